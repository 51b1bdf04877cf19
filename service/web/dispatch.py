"""One plain function per endpoint at run time, in place of flask-smorest's stack of wrappers.

flask-smorest documents a view by wrapping it once per decorator (``doc``, ``arguments``, ``response``,
``alt_response``), and every wrapper calls the next through ``current_app.ensure_sync``; the body goes
through webargs' location machinery (loader lookup, schema resolution, ``pre_load``, validators). For a small
request that stack cost more than the typed request's own checks (docs/performance.md, "Per-request
overhead"). The decorators still run at import, so the contract (``_apidoc``) is exactly theirs; the
:class:`~service.web.blueprint.Blueprint` notes what each was given (:func:`note_arguments`,
:func:`note_answer`, :func:`note_documentation_only`), and :func:`plain_view` builds from those notes the
function Flask calls: the body read by the parser's own ``load_json`` and loaded by the schema once, the view
called, its result dumped by the response schema and written by the app's JSON provider. These are the steps
webargs and flask-smorest take for the options this service uses, so answers and errors are the same bytes.
A stack holding anything else (another decorator, an option of ``arguments`` other than the documented
ones and the error status) is called as it is.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import marshmallow as ma
from flask import current_app, request
from flask.wrappers import Request
from flask_smorest.utils import set_status_and_headers_in_response, unpack_tuple_response
from webargs import core
from werkzeug.wrappers import Response

View = Callable[..., Any]

# ``Blueprint.arguments`` options that only document (the rest change parsing: those stacks keep webargs).
DOCUMENTATION_OPTIONS = frozenset({"content_type", "required", "description", "example", "examples"})
_ERROR_OPTIONS = frozenset({"error_status_code", "error_headers"})


@dataclass(frozen=True)
class _Arguments:
    """``@blp.arguments(schema)`` on a JSON body: what webargs' ``use_args`` was given."""

    inner: View
    schema: ma.Schema
    parser: Any  # a webargs FlaskParser (service.web.parsing.OrjsonParser)
    error_status_code: int | None
    error_headers: Mapping[str, str] | None


@dataclass(frozen=True)
class _Answer:
    """``@blp.response(status_code, schema)``: what flask-smorest's response wrapper does with a result."""

    inner: View
    status_code: int
    schema: ma.Schema | None
    prepare_content: Callable[[Any], Any]  # the Blueprint's _prepare_response_content hook


@dataclass(frozen=True)
class _DocumentationOnly:
    """``@blp.doc`` and ``@blp.alt_response``: their wrappers only call the next one."""

    inner: View


# Keyed by the wrapper each decorator returned (weakly: a wrapper that is never routed may go).
_NOTES: weakref.WeakKeyDictionary[View, _Arguments | _Answer | _DocumentationOnly] = (
    weakref.WeakKeyDictionary()
)


def note_documentation_only(wrapper: View, inner: View) -> View:
    _NOTES[wrapper] = _DocumentationOnly(inner)
    return wrapper


def note_answer(
    wrapper: View, inner: View, *, status_code: int, schema: ma.Schema | None, blueprint: Any
) -> View:
    _NOTES[wrapper] = _Answer(inner, int(status_code), schema, blueprint._prepare_response_content)
    return wrapper


def note_arguments(
    wrapper: View, inner: View, *, schema: Any, parser: Any, options: Mapping[str, Any]
) -> View:
    """Note ``@blp.arguments`` reading a JSON body with no other parsing option (others keep webargs)."""
    location = options.get("location", "json")
    others = set(options) - DOCUMENTATION_OPTIONS - _ERROR_OPTIONS - {"location"}
    if location == "json" and not others and isinstance(schema, ma.Schema):
        _NOTES[wrapper] = _Arguments(
            inner, schema, parser, options.get("error_status_code"), options.get("error_headers")
        )
    return wrapper


def plain_view(view: View, *, check: Callable[[Request], None] | None = None) -> View:
    """The function to route for the decorated stack ``view``: ``check(request)`` first when given, then
    what the stack does, in one call (documented as ``view``: its name, docstring and ``_apidoc`` are
    copied, and ``__wrapped__`` is the stack).

    The stack is read from the outside in: documentation-only wrappers are skipped, one body argument and one
    answer are taken, and what is left must be the undecorated (synchronous) view; any other stack is called
    as it is, after the check.
    """
    layers = _read_stack(view)
    plain = _compose(*layers, check) if layers is not None else _compose(view, None, None, check)
    return functools.wraps(view)(plain)


def _read_stack(view: View) -> tuple[View, _Arguments | None, _Answer | None] | None:
    arguments: _Arguments | None = None
    answer: _Answer | None = None
    current = view
    while (note := _NOTES.get(current)) is not None:
        if isinstance(note, _Arguments):
            if arguments is not None or answer is not None:
                return None  # arguments inside the response, or twice: not a stack this service writes
            arguments = note
        elif isinstance(note, _Answer):
            if answer is not None:
                return None
            answer = note
        current = note.inner
    if hasattr(current, "__wrapped__") or inspect.iscoroutinefunction(current):
        return None  # another decorator, or an async view: keep flask-smorest's own stack
    return current, arguments, answer


def _compose(
    view: View, arguments: _Arguments | None, answer: _Answer | None, check: Callable[[Request], None] | None
) -> View:
    def call(*args: Any, **kwargs: Any) -> Any:
        current_request: Request = request._get_current_object()  # type: ignore[attr-defined]
        if check is not None:
            check(current_request)
        if arguments is not None:
            args = (*args, _load_body(arguments, current_request))
        result = view(*args, **kwargs)
        return _respond(answer, result) if answer is not None else result

    return call


def _load_body(arguments: _Arguments, req: Request) -> Any:
    """webargs' ``parse`` for ``location="json"``: the parser's ``load_json``, then ``schema.load``, with a
    validation error handed to the parser's own ``_on_validation_error`` (``{"json": messages}``)."""
    parser = arguments.parser
    try:
        data = parser.load_json(req, arguments.schema)
        if data is core.missing:
            data = {}
        return arguments.schema.load(data)
    except ma.ValidationError as error:
        parser._on_validation_error(
            error,
            req,
            arguments.schema,
            "json",
            error_status_code=arguments.error_status_code,
            error_headers=arguments.error_headers,
        )
        raise ValueError("_on_validation_error did not raise an exception") from error


def _respond(answer: _Answer, result: Any) -> Any:
    """flask-smorest's response wrapper, without storing the dump for ETags (no view here uses ``etag``)."""
    body, status, headers = unpack_tuple_response(result)
    if isinstance(body, Response):
        set_status_and_headers_in_response(body, status, headers)
        return body
    dumped = body if answer.schema is None else answer.schema.dump(body)
    response: Any = current_app.json.response(answer.prepare_content(dumped))  # what jsonify does
    set_status_and_headers_in_response(response, status, headers)
    if status is None:
        response.status_code = answer.status_code
    return response
