"""The Blueprint every /v1 endpoint uses: orjson body parsing, a 415 for bodies that are not JSON, and one
plain function per view at run time (service/web/dispatch.py) instead of flask-smorest's wrappers."""

from __future__ import annotations

from typing import Any

import flask_smorest
import marshmallow as ma
from flask.wrappers import Request
from flask_smorest.utils import resolve_schema_instance
from webargs import core

from service.web import dispatch
from service.web.parsing import OrjsonParser
from service.web.problems import Problem
from service.web.statuses import status_name


class Blueprint(flask_smorest.Blueprint):  # type: ignore[misc]
    """A flask-smorest Blueprint whose JSON bodies are parsed by orjson and whose views run unwrapped.

    Each decorator is flask-smorest's own (so the contract is unchanged); what it was given is noted, and
    :meth:`add_url_rule` hands Flask the one function :func:`service.web.dispatch.plain_view` builds from
    the notes. ``require_json_body=False`` leaves out the 415 for blueprints that take other bodies (/v2).
    """

    ARGUMENTS_PARSER = OrjsonParser()

    def __init__(self, *args: Any, require_json_body: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Checked first thing in each view rather than in a before_request hook: the same point of the
        # request (after the app's steps, before the view), without a hook's cost.
        self._view_check = _require_json_body if require_json_body else None

    def arguments(self, schema: Any, **kwargs: Any) -> Any:
        """flask-smorest's ``arguments``, documenting its 422 under the contract's own response name.

        flask-smorest names it ``http.HTTPStatus(422).name``, which Python 3.13 renamed.
        """
        decorate = super().arguments(schema, **kwargs)
        status = kwargs.get("error_status_code", self.ARGUMENTS_PARSER.DEFAULT_VALIDATION_STATUS)

        def decorator(view: Any) -> Any:
            wrapper = decorate(view)
            wrapper._apidoc["arguments"]["responses"][status] = status_name(status)
            return dispatch.note_arguments(
                wrapper, view, schema=schema, parser=self.ARGUMENTS_PARSER, options=kwargs
            )

        return decorator

    def response(self, status_code: Any, schema: Any = None, **kwargs: Any) -> Any:
        decorate = super().response(status_code, schema, **kwargs)
        instance = resolve_schema_instance(schema)

        def decorator(view: Any) -> Any:
            wrapper = decorate(view)
            if instance is None or isinstance(instance, ma.Schema):  # else a reference: documentation only
                dispatch.note_answer(wrapper, view, status_code=status_code, schema=instance, blueprint=self)
            return wrapper

        return decorator

    def alt_response(self, status_code: Any, response: Any = None, **kwargs: Any) -> Any:
        decorate = super().alt_response(status_code, response, **kwargs)
        return lambda view: dispatch.note_documentation_only(decorate(view), view)

    def doc(self, **kwargs: Any) -> Any:  # flask-smorest's is a staticmethod; called the same way
        decorate = super().doc(**kwargs)
        return lambda view: dispatch.note_documentation_only(decorate(view), view)

    def add_url_rule(
        self, rule: str, endpoint: str | None = None, view_func: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        """Route the plain equivalent of the decorated ``view_func`` (service.web.dispatch)."""
        if isinstance(view_func, type):
            raise TypeError("this Blueprint routes view functions, not MethodView classes")
        if view_func is not None:
            view_func = dispatch.plain_view(view_func, check=self._view_check)
        super().add_url_rule(rule, endpoint, view_func, *args, **kwargs)


def _require_json_body(request: Request) -> None:
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # Bodies are small JSON under MAX_BODY_BYTES and our clients send them plain; decoding gzip would
        # add a decompression bomb to guard against for no gain. Reading the compressed bytes as JSON (as
        # before) gave a misleading 400, or silently wrong data. RFC 7694: 415 with the encodings accepted.
        raise Problem(
            415,
            f"Send the request body without a Content-Encoding (this request sent {encoding[:40]!r}); "
            "this service does not decode compressed bodies.",
            slug="unsupported-media-type",
            headers={"Accept-Encoding": "identity"},
        )
    if not core.is_json(request.mimetype):
        sent = request.mimetype or "no Content-Type"
        raise Problem(
            415,
            f"Send the request body as application/json (this request sent {sent}).",
            slug="unsupported-media-type",
            headers={"Accept-Post": "application/json"},
        )
