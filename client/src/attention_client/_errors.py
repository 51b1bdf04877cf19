"""The exceptions the client raises for an answer that is not a result."""

from __future__ import annotations


class ApiError(Exception):
    """The service refused or failed a call: ``status``, ``title``, ``detail`` and the fields to blame.

    ``errors`` maps each offending field (an input tensor such as ``"key"``, or a parameter such as
    ``"temperature"``) to its messages, as the service's problem documents do. ``retry_after`` is the
    answer's ``Retry-After`` in seconds (an overloaded service's 503 says when to try again), else None.
    """

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        errors: dict[str, list[str]] | None = None,
        type: str = "about:blank",
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or {}
        self.type = type
        self.request_id = request_id
        self.retry_after = retry_after


class MalformedAnswerError(ApiError):
    """An answer that is not a well-formed result: a proxy's HTML page, a truncated body, JSON that is not
    an infer answer, a binary answer whose ``Inference-Header-Content-Length`` or sizes do not add up.

    ``status`` is the HTTP status it came with (often 200), ``title`` is ``"Malformed answer"`` and
    ``detail`` says what is wrong; the exception that reading it raised (``JSONDecodeError``, ``KeyError``,
    …) is chained as ``__cause__``, when there was one.
    """


# No answer came: a status of 0, as the JS client's errors have for an unreachable service.
NO_ANSWER = 0


class InvalidInput(ApiError, ValueError):
    """An argument the client refuses before sending anything: ``argument`` names it, ``errors`` maps it
    to the message, ``status`` is 0. Also a ``ValueError``, which these checks raised before they were
    :class:`ApiError`.

    Raised for arrays that are ragged, not numbers (text, objects), of the wrong kind (a float ``targets``),
    rank or with a NaN or infinity; options of the wrong type, outside their range or not among their
    allowed values; an ``include`` that is a string rather than a collection of names, or names an unknown
    output; a base URL that ends in ``/v1`` or ``/v2`` (it must be the server root).
    """

    def __init__(self, argument: str, message: str) -> None:
        # "logits must be real numbers, …": the message names the argument, first.
        detail = message if message.startswith(argument) else f"{argument} {message}"
        super().__init__(
            NO_ANSWER,
            "Invalid input",
            detail,
            errors={argument: [detail]},
            type="urn:attention-client:invalid-input",
        )
        self.args = (f"Invalid input: {detail}",)
        self.argument = argument


class TransportError(ApiError):
    """The call got no answer: ``status`` is 0, ``detail`` says what failed and where, and the transport's
    exception (an ``httpx.TransportError``) is chained as ``__cause__``. Retrying is safe: every call
    computes a pure function of its inputs."""

    def __init__(self, title: str, detail: str) -> None:
        super().__init__(NO_ANSWER, title, detail, type="urn:attention-client:transport-error")


class ConnectionFailed(TransportError, ConnectionError):
    """No connection could be made (refused, unreachable, a name that does not resolve), after the
    client's ``retries``."""


class Timeout(TransportError, TimeoutError):
    """Connecting, sending or waiting for the answer took longer than the client's ``timeout``."""
