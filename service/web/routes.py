"""Routes declared once: the plain Flask view Flask calls, and the OpenAPI operation the contract shows.

A :class:`Routes` is a Flask blueprint plus the operations it documents. Each ``@routes.get``/``@routes.post``
registers the function as it is with Flask (no wrapper: what Flask calls is the function written) and
notes its operation (operationId, summary and description from the docstring, the request body and
responses) for :func:`service.site.spec.build_spec`, which writes the contract with apispec's public API.
Nothing here wraps or reads a library's internals.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import flask

from service.web.statuses import status_name

View = TypeVar("View", bound=Callable[..., Any])

JSON = "application/json"
# The response every operation may give besides those it lists (a problem+json document).
DEFAULT_ERROR = "DEFAULT_ERROR"
_RULE_VARIABLE = re.compile(r"<(?:([^<>:]+):)?([^<>]+)>")


@dataclass(frozen=True)
class Operation:
    """One method on one path, as the contract documents it."""

    path: str  # OpenAPI form: /static/{filename}
    method: str  # lower case: get, post
    operation: dict[str, Any]  # the OpenAPI operation object (schemas as marshmallow schemas)
    path_parameters: tuple[dict[str, Any], ...] = ()  # OpenAPI parameter objects


@dataclass
class Routes:
    """A Flask blueprint and the operations it documents (one tag in the contract, named like it)."""

    name: str
    import_name: str
    description: str
    url_prefix: str = ""
    operations: list[Operation] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.blueprint = flask.Blueprint(self.name, self.import_name, url_prefix=self.url_prefix or None)

    def get(self, rule: str, **documentation: Any) -> Callable[[View], View]:
        return self.route(rule, "GET", **documentation)

    def post(self, rule: str, **documentation: Any) -> Callable[[View], View]:
        return self.route(rule, "POST", **documentation)

    def route(
        self,
        rule: str,
        method: str,
        *,
        operation_id: str,
        endpoint: str | None = None,
        summary: str | None = None,
        description: str | None = None,
        response: Any = None,
        response_example: Any = None,
        request: Any = None,
        request_example: Any = None,
        errors: Iterable[int] = (),
        responses: Mapping[str, Any] | None = None,
        request_body: Mapping[str, Any] | None = None,
        parameters: Sequence[Mapping[str, Any]] | None = None,
    ) -> Callable[[View], View]:
        """Route the decorated function for ``method`` on ``rule`` and document it.

        ``response`` is the 200 answer's schema (``response_example`` its example), ``request`` the JSON
        body's schema (``request_example`` its example; a 422 is then documented), ``errors`` the other
        statuses it may answer (problem+json, by their shared response names); ``responses``,
        ``request_body`` and ``parameters`` are written into the operation as they are, over the rest.
        """

        def register(view: View) -> View:
            self.blueprint.add_url_rule(rule, endpoint or view.__name__, view, methods=[method])
            # In the order flask-smorest wrote them, so the contract's bytes stayed the same when it went.
            answers: dict[str, Any] = {}
            if request is not None:
                answers["422"] = status_name(422)
            for status in errors:
                answers[str(status)] = status_name(status)
            if response is not None:
                content: dict[str, Any] = {"schema": response}
                if response_example is not None:
                    content["example"] = response_example
                answers["200"] = {"description": "OK", "content": {JSON: content}}
            answers["default"] = DEFAULT_ERROR
            answers.update(responses or {})
            operation: dict[str, Any] = {"responses": answers}
            if request is not None:
                body: dict[str, Any] = {"schema": request}
                if request_example is not None:
                    body["example"] = request_example
                operation["requestBody"] = {"required": True, "content": {JSON: body}}
            operation.update(_from_docstring(view.__doc__))
            if summary is not None:
                operation["summary"] = summary
            if description is not None:
                operation["description"] = description
            operation["tags"] = [self.name]
            operation["operationId"] = operation_id
            if parameters is not None:
                operation["parameters"] = [dict(parameter) for parameter in parameters]
            if request_body is not None:
                operation["requestBody"] = dict(request_body)
            full_rule = self.url_prefix + rule
            self.operations.append(
                Operation(
                    path=_RULE_VARIABLE.sub(r"{\2}", full_rule),
                    method=method.lower(),
                    operation=operation,
                    path_parameters=tuple(
                        _path_parameter(name, converter)
                        for converter, name in _RULE_VARIABLE.findall(full_rule)
                    ),
                )
            )
            return view

        return register


def _path_parameter(name: str, converter: str) -> dict[str, Any]:
    """A path variable as a parameter: werkzeug's default (string) converter takes at least one character and
    no slash; ``path`` takes slashes."""
    schema: dict[str, Any] = {"type": "string"}
    if converter in ("", "string"):
        schema["minLength"] = 1
    return {"in": "path", "name": name, "required": True, "schema": schema}


def _from_docstring(docstring: str | None) -> dict[str, Any]:
    """Summary (the lines before the first blank one) and description (the rest) of a view's docstring."""
    lines = inspect.cleandoc(docstring or "").split("\n")
    blank = next((index for index, line in enumerate(lines) if not line.strip()), len(lines))
    summary, description = "\n".join(lines[:blank]).strip(), "\n".join(lines[blank + 1 :]).strip()
    info: dict[str, Any] = {}
    if summary:
        info["summary"] = summary
    if description:
        info["description"] = description
    return info
