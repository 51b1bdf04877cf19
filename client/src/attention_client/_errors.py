"""The exceptions the client raises for an answer that is not a result."""

from __future__ import annotations


class ApiError(Exception):
    """The service refused or failed a call: ``status``, ``title``, ``detail`` and the fields to blame.

    ``errors`` maps each offending field (an input tensor such as ``"key"``, or a parameter such as
    ``"temperature"``) to its messages, as the service's problem documents do.
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
    ) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors or {}
        self.type = type
        self.request_id = request_id


class MalformedAnswerError(ApiError):
    """An answer that is not a well-formed result: a proxy's HTML page, a truncated body, JSON that is not
    an infer answer, a binary answer whose ``Inference-Header-Content-Length`` or sizes do not add up.

    ``status`` is the HTTP status it came with (often 200), ``title`` is ``"Malformed answer"`` and
    ``detail`` says what is wrong; the exception that reading it raised (``JSONDecodeError``, ``KeyError``,
    …) is chained as ``__cause__``, when there was one.
    """
