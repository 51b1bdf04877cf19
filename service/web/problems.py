"""Every error, whatever raised it, leaves as one RFC 9457 ``application/problem+json`` document."""

from __future__ import annotations

import difflib
import ipaddress
import logging
import re
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

import marshmallow as ma
from flask import Flask, Response, current_app, has_request_context, request
from flask.wrappers import Request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import RequestRedirect

from service.kernels import EmptyRowError, KernelError, NumericalOverflowError
from service.web.hooks import RequestGlobals, request_steps
from service.web.json_provider import dumps_bytes
from service.web.request_id import current_request_id
from service.web.statuses import status_phrase

PROBLEM_MIMETYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:attention-service:problem:"
MAX_REPORTED_FIELDS = 20
MAX_NAME_CHARACTERS = 100  # a field name longer than any declared one is cut to this in answers
MAX_MESSAGES_PER_FIELD = 5

log = logging.getLogger(__name__)


class Problem(Exception):
    """An error the client can act on; raised anywhere, rendered by :func:`problem_response`."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        title: str | None = None,
        errors: Mapping[str, list[str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.title = title
        self.errors = errors
        self.headers = dict(headers or {})


def header_problem(
    status: int,
    header: str,
    message: str,
    *,
    slug: str,
    title: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Problem:
    """A problem about the request's ``header`` (its coding, its framing), naming it in ``errors`` as a field
    is named: the detail is ``"<header>: <message>"``."""
    return Problem(
        status, f"{header}: {message}", slug=slug, title=title, errors={header: [message]}, headers=headers
    )


def problem_response(problem: Problem) -> Response:
    """Render ``problem`` as problem+json."""
    title = problem.title or status_phrase(problem.status)
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + problem.slug if problem.slug else "about:blank",
        "title": title,
        "status": problem.status,
        "detail": problem.detail,
    }
    if problem.errors is not None:
        body["errors"] = problem.errors
    request_id = current_request_id()
    if request_id is not None:
        body["request_id"] = request_id
    if has_request_context() and (request.path == "/v2" or request.path.startswith("/v2/")):
        # The Open Inference Protocol's clients read {"error": "<message>"}; the other members stay.
        body["error"] = problem.detail
    try:
        payload = dumps_bytes(body)
    except TypeError:  # a client's field name with a lone surrogate, echoed back: escape it
        payload = dumps_bytes(_escape_surrogates(body))
    response = Response(payload, status=problem.status, mimetype=PROBLEM_MIMETYPE)
    response.headers.update(problem.headers)
    return response


def problem_from_validation_messages(messages: Any, schema: ma.Schema | None) -> Problem:
    """A 422 from marshmallow's messages for ``schema``: each field's first messages, with hints."""
    errors = _field_errors(messages, schema)
    return Problem(422, _summarize(errors), slug="validation-error", title="Invalid request", errors=errors)


def problem_from_http_exception(error: HTTPException) -> Problem:
    """Translate werkzeug's HTTP errors (routing's 404 and 405, the body limit's 413, …)."""
    status = error.code or 500
    headers = {k: v for k, v in error.get_headers() if k.lower() == "allow"}  # 405 must say what is
    if status == 413:
        limit = current_app.config.get("MAX_CONTENT_LENGTH")
        detail = f"The request body is larger than the limit of {limit:,} bytes (MAX_BODY_BYTES)."
        return Problem(413, detail, slug="body-too-large", headers=headers)
    if status == 404 and has_request_context():
        wrong_base = _repeated_prefix_problem(request.path)
        if wrong_base is not None:
            return wrong_base
    return Problem(status, error.description or "", headers=headers)


# "/v2/v2/models/…", "/v1/v1/attention", "/v1/v2/…": a client whose base URL already ends in a protocol's
# prefix adds one again (Client("http://host:8000/v2")). No route starts with two version segments.
_REPEATED_PREFIX = re.compile(r"/(v\d+)(?P<meant>/v\d+(?:/.*)?)", re.ASCII)


def _repeated_prefix_problem(path: str) -> Problem | None:
    """The 404 for a path under a repeated protocol prefix, naming the base URL as the thing to fix."""
    match = _REPEATED_PREFIX.fullmatch(path)
    if match is None:
        return None
    meant = match["meant"]
    detail = (
        f"There is nothing at {path[:80]}. Did you mean {meant[:80]}? The base URL must be the server's root "
        f"(http://host:port), not …/{match[1]}: clients add the protocol's prefix themselves."
    )
    return Problem(404, detail, slug="wrong-base-url", title="Not Found", errors={"base_url": [detail]})


def _escape_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {_escape_surrogates(key): _escape_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escape_surrogates(item) for item in value]
    return value


def _field_errors(messages: Any, schema: ma.Schema | None) -> dict[str, list[str]]:
    """Messages per field, at most MAX_REPORTED_FIELDS fields and MAX_MESSAGES_PER_FIELD messages each.

    A field inside a nested object is named by its path (``rotary.base``), as /v2 names its parameters. A
    body with a million unknown fields must not become a million-entry answer.
    """
    if not isinstance(messages, Mapping):
        return {"body": [str(m) for m in _as_list(messages)[:MAX_MESSAGES_PER_FIELD]]}
    errors: dict[str, list[str]] = {}
    for name, texts in islice(_messages_by_path(messages, schema, ""), MAX_REPORTED_FIELDS):
        errors.setdefault(name, []).extend(texts)
    if len(messages) > MAX_REPORTED_FIELDS:
        more = len(messages) - MAX_REPORTED_FIELDS
        errors.setdefault("body", []).append(f"{more:,} more fields have errors that are not listed here.")
    return errors


def _messages_by_path(
    messages: Mapping[Any, Any], schema: ma.Schema | None, prefix: str
) -> Iterator[tuple[str, list[str]]]:
    for field, field_messages in messages.items():
        name = (prefix.rstrip(".") or "body") if field == "_schema" else shortened(f"{prefix}{field}")
        declared = _declared(schema, str(field))
        if isinstance(field_messages, Mapping) and isinstance(declared, ma.fields.Nested):
            nested = declared.schema if isinstance(declared.schema, ma.Schema) else None
            yield from _messages_by_path(field_messages, nested, f"{name}.")
            continue
        texts = [str(m) for m in _as_list(field_messages)[:MAX_MESSAGES_PER_FIELD]]
        if texts == ["Unknown field."] and schema is not None:
            texts = [_unknown_field_message(str(field), _field_names(schema))]
        yield name, texts


def shortened(name: str) -> str:
    """A client's field name as an answer names it: cut to MAX_NAME_CHARACTERS, so that a megabyte of name is
    not echoed back in ``errors``, ``detail`` and the protocol's ``error``."""
    return name if len(name) <= MAX_NAME_CHARACTERS else name[: MAX_NAME_CHARACTERS - 1] + "…"


def _declared(schema: ma.Schema | None, name: str) -> ma.fields.Field[Any] | None:
    """The field of ``schema`` read from the body's member ``name``."""
    if schema is None:
        return None
    return next((f for key, f in schema.fields.items() if (f.data_key or key) == name), None)


def _field_names(schema: ma.Schema) -> list[str]:
    return [declared.data_key or name for name, declared in schema.fields.items()]


def refuse_many_unknown_fields(data: Mapping[str, Any], schema: ma.Schema) -> None:
    """Refuse a body with more unknown fields than an answer lists, before marshmallow sees it.

    marshmallow builds a message for every unknown field: 1.89 million of them in a 16 MiB body took 10 s of
    CPU and 680 MiB. Here the count is one set difference (in C) and the scan for the names listed stops at
    the MAX_REPORTED_FIELDS-th, so the cost beyond parsing is bounded by the limit, not by the body.
    """
    if len(data) <= MAX_REPORTED_FIELDS:
        return
    known = {field.data_key or name for name, field in schema.load_fields.items()}
    unknown = len(data.keys() - known)
    if unknown <= MAX_REPORTED_FIELDS:
        return  # few enough for marshmallow to report with the other fields' errors
    listed = islice((name for name in data if name not in known), MAX_REPORTED_FIELDS)
    errors = _field_errors({name: ["Unknown field."] for name in listed}, schema)
    more = unknown - MAX_REPORTED_FIELDS
    errors.setdefault("body", []).append(f"{more:,} more fields have errors that are not listed here.")
    raise Problem(422, _summarize(errors), slug="validation-error", title="Invalid request", errors=errors)


def _unknown_field_message(name: str, allowed: list[str]) -> str:
    return f"Unknown field.{did_you_mean(name, allowed)} Allowed fields: {', '.join(sorted(allowed))}."


def did_you_mean(name: str, allowed: list[str]) -> str:
    """`` Did you mean 'x'?`` for the allowed name closest to a misspelt ``name``, or ``""``: one wording for
    unknown fields, tensors and outputs alike."""
    # difflib matches at a ratio of 0.6 at least, 2·matches / (both lengths), out of reach for a name over 7/3
    # of the longest allowed. Said first: difflib indexes every character of the name (about 40 bytes each)
    # before its own length check, and a 15 MB name took 700 MB and 2 s.
    if 3 * len(name) > 7 * max(map(len, allowed), default=0):
        return ""
    close = difflib.get_close_matches(name, allowed, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _as_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, Mapping):  # nested messages: flatten to "key: message"
        return [f"{key}: {msg}" for key, msgs in value.items() for msg in _as_list(msgs)]
    return [value]


def _summarize(errors: Mapping[str, list[str]]) -> str:
    parts = [f"{field}: {messages[0]}" for field, messages in list(errors.items())[:3] if messages]
    if len(errors) > 3:
        # "more", not "more fields": one of the entries may be "body", which says how many went unlisted.
        parts.append(f"(and {len(errors) - 3} more, listed in errors)")
    return "The request is invalid. " + " ".join(parts)


_KERNEL_PROBLEM_SLUGS: tuple[tuple[type[KernelError], str], ...] = (
    (EmptyRowError, "empty-row"),
    (NumericalOverflowError, "numerical-overflow"),
    # Everything else is a rule of the request, whichever layer found it: shapes that do not fit (a
    # ShapeError from the kernels' shape checks, which the typed requests run), a range or an allowed
    # value (a RequestError), a value the arithmetic refuses (a target id >= V).
    (KernelError, "validation-error"),
)


def problem_from_kernel_error(error: KernelError) -> Problem:
    """The arithmetic's own complaints (shapes, empty rows, overflow, values) are the client's to fix: 422."""
    slug = next(slug for kind, slug in _KERNEL_PROBLEM_SLUGS if isinstance(error, kind))
    errors = {error.field or "body": [error.message]}
    # A broken rule reads like every other validation error, whichever layer found it.
    detail = _summarize(errors) if slug == "validation-error" else error.message
    return Problem(422, detail, slug=slug, title="Invalid request", errors=errors)


def _relative_redirects(request: Request, g: RequestGlobals) -> None:
    """Routing's redirects (``/static//x.js`` → ``/static/x.js``) with a relative ``Location``.

    werkzeug builds the redirect from the client's ``Host`` header (``http://evil.example/static/x.js``) and
    Flask returns it before any error handler, as HTML. Raised here, before dispatch, it is problem+json
    and points at a path on this server, whatever Host said.
    """
    redirect = request.routing_exception
    if isinstance(redirect, RequestRedirect):
        target = urlsplit(redirect.new_url)
        location = "/" + target.path.lstrip("/")  # never "//host": that would leave this server
        if target.query:
            location += "?" + target.query
        raise Problem(redirect.code, f"This resource is at {location}.", headers={"Location": location})


# RFC 9110 section 7.2: Host = uri-host [ ":" port ], in RFC 3986's grammar (section 3.2.2): a bracketed IP
# literal, or a reg-name (IPv4 addresses among them) of unreserved characters, sub-delims and %XX escapes,
# which may be empty; the port is digits. Written out because werkzeug's check refuses "_", which compose
# service names use.
_UNRESERVED_OR_ESCAPED = r"[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2}"
_HOST_VALUE = re.compile(
    r"(?:\[(?:(?P<ipv6>[0-9A-Fa-f:.]+)(?:%25(?:" + _UNRESERVED_OR_ESCAPED + r")+)?"  # RFC 6874 zone
    r"|[vV][0-9A-Fa-f]+\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\]"  # IPvFuture
    r"|(?:[!$&'()*+,;=]|" + _UNRESERVED_OR_ESCAPED + r")*)"
    r"(?::[0-9]*)?"
)


def _valid_host(value: str) -> bool:
    match = _HOST_VALUE.fullmatch(value.strip(" \t"))  # a field value's surrounding whitespace is not its own
    if match is None:
        return False
    literal = match.group("ipv6")
    if literal is None:
        return True
    try:
        ipaddress.IPv6Address(literal)
    except ValueError:
        return False
    return True


def _require_host(request: Request, g: RequestGlobals) -> None:
    """A request whose ``Host`` is not a host and port, or an HTTP/1.1 request without one, is a 400 (RFC 9112
    section 3.2: a server MUST refuse either); gunicorn refuses two of them, and HTTP/1.0 may leave it out."""
    environ = request.environ
    host = environ.get("HTTP_HOST")
    if host is None:
        if environ.get("SERVER_PROTOCOL") == "HTTP/1.1":
            raise header_problem(
                400,
                "Host",
                "an HTTP/1.1 request must say which host it is for (RFC 9112, section 3.2).",
                slug="missing-host",
                title="Missing Host",
            )
    elif not _valid_host(host):
        raise header_problem(
            400,
            "Host",
            "not a host name or IP address with an optional port (RFC 9110, section 7.2; RFC 3986, section "
            "3.2.2).",
            slug="invalid-host",
            title="Invalid Host",
        )


def register_error_handlers(app: Flask) -> None:
    """Route every exception to problem+json; unexpected ones are logged and hidden behind a 500."""
    request_steps(app).add_before(_require_host)
    request_steps(app).add_before(_relative_redirects)
    app.register_error_handler(Problem, problem_response)
    app.register_error_handler(KernelError, lambda e: problem_response(problem_from_kernel_error(e)))
    app.register_error_handler(HTTPException, lambda e: problem_response(problem_from_http_exception(e)))

    def internal_error(error: Exception) -> Response:
        log.exception("unhandled error", exc_info=error)
        return problem_response(Problem(500, "The server failed to answer this request; it has been logged."))

    app.register_error_handler(Exception, internal_error)
