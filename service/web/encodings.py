"""Request bodies sent compressed (``Content-Encoding: gzip`` or ``deflate``), inflated within the body limit
and the process's memory budget.

A compressed body counts at its inflated size, as a plain body counts at its length: the inflated bytes are
held against ``MAX_BODY_BYTES`` (413 ``body-too-large`` as soon as they would pass it) and reserved from the
memory budget (503 ``overloaded`` when it cannot take them now), each step *before* it is inflated, with
zlib's ``max_length``: a body of a few KB that would inflate to gigabytes (a zip bomb) costs one step of
memory and is refused, never held. Any other coding is a 415 naming the header, before the body is read.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import flask

from service.settings import SMALL_BODY_BYTES
from service.web.admission import hold_body_bytes
from service.web.body import note_inflated_size, read_body
from service.web.connection import let_other_connections_run
from service.web.problems import Problem, header_problem

CONTENT_ENCODING = "Content-Encoding"
ACCEPTED_CODINGS = "gzip, deflate"
# zlib's wbits for each coding: gzip's header and trailer (RFC 1952; x-gzip is its old name, RFC 9110
# 8.4.1.3), or zlib's (RFC 1950: what HTTP's "deflate" means). Raw deflate (RFC 1951), which some clients
# send as "deflate", is told from zlib by its header (:func:`_deflate_wbits`).
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS
_CODINGS = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}
# Bytes inflated (and reserved) per step after the first, which is no more than a small body's size, so a
# compressed small request is as cheap to admit as a plain one.
INFLATE_STEP = 256 * 1024
# Compressed bytes given to zlib per step.
INPUT_STEP = 64 * 1024
# A gzip body may be several members one after another (RFC 1952); a client sends one, or a few when it
# concatenates files (bgzip writes one per 64 KiB: 256 for a 16 MiB body). Each costs a decompressor and a
# step, so without a bound 16 MiB of empty 20-byte members were about 800,000 of them: 400 past this many.
MAX_GZIP_MEMBERS = 4096


def request_coding(req: flask.Request) -> str | None:
    """The body's content coding, ``"gzip"`` or ``"deflate"``; None when it has none (or ``identity``).

    Any other coding, or more than one, is a 415 naming the header and listing the codings accepted
    (RFC 7694's ``Accept-Encoding`` in the answer).
    """
    header = req.headers.get(CONTENT_ENCODING)
    if header is None:
        return None
    coding = header.strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in _CODINGS:
        return _CODINGS[coding]
    message = (
        f"this service decodes request bodies sent as gzip or deflate (or uncompressed), not {header[:40]!r}."
    )
    raise header_problem(
        415,
        CONTENT_ENCODING,
        message,
        slug="unsupported-media-type",
        headers={"Accept-Encoding": ACCEPTED_CODINGS},
    )


def check_transfer_coding(req: flask.Request) -> None:
    """501 naming ``Transfer-Encoding`` for a transfer coding other than ``chunked``.

    gunicorn refuses the codings it does not know (``br``), but passes ``gzip``, ``deflate`` and ``compress``
    before ``chunked`` on with the body still coded; this service does not undo them (a client compresses
    with ``Content-Encoding``), and read as plain such a body was computed, or refused as JSON that is not.
    """
    header = req.headers.get("Transfer-Encoding")
    if header is None:
        return
    codings = [coding.strip().lower() for coding in header.split(",")]
    if all(coding == "chunked" for coding in codings):
        return
    message = (
        f"this service undoes no transfer coding but chunked, got {header[:40]!r}; compress the body with "
        f"{CONTENT_ENCODING}: gzip instead."
    )
    raise header_problem(
        501, "Transfer-Encoding", message, slug="unsupported-transfer-coding", title="Not Implemented"
    )


def read_decoded_body(req: flask.Request) -> bytes:
    """The request body with its content coding undone (the body as read when it has none).

    501 for a transfer coding but chunked, 415 for a content coding this service does not decode (both
    before reading the body), 400 for bytes that are not what
    the header says, 413 once the inflated bytes would pass ``MAX_BODY_BYTES``, 503 when the memory budget
    cannot hold them now.
    """
    check_transfer_coding(req)
    coding = request_coding(req)
    body = read_body(req)
    if coding is None or not body:
        return body
    inflated = inflate(body, coding, limit=req.max_content_length, hold=hold_body_bytes)
    note_inflated_size(len(inflated))
    return inflated


def inflate(data: bytes, coding: str, *, limit: int | None, hold: Callable[[int], None]) -> bytes:
    """``data`` decompressed as ``coding`` (``"gzip"``, every member up to :data:`MAX_GZIP_MEMBERS`, or
    ``"deflate"``): at most ``limit`` bytes.

    ``hold(n)`` is called before a step that may produce more bytes than were held so far, with how many more
    (it raises to refuse them); a step never produces more than one byte past ``limit``, and that byte is a
    413. zlib is given at most :data:`INPUT_STEP` compressed bytes a step, so what it copies back (the input
    a step left, the bytes after a member) stays small whatever the body's length and number of members.
    """
    compressed = memoryview(data)
    inflated: list[bytes] = []
    total = held = 0
    position = 0  # the first compressed byte not yet given to zlib
    members = 0
    while True:
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise _malformed(coding, f"it holds more than {MAX_GZIP_MEMBERS:,} gzip members")
        wbits = _GZIP_WBITS if coding == "gzip" else _deflate_wbits(compressed[position : position + 2])
        decompressor = zlib.decompressobj(wbits)
        while not decompressor.eof:
            step = SMALL_BODY_BYTES if total < SMALL_BODY_BYTES else INFLATE_STEP
            if limit is not None:
                step = min(step, limit - total + 1)
            if total + step > held:  # held so far: what was inflated, and at most one step not used
                hold(total + step - held)
                held = total + step
            # What the last step had no room to inflate, if anything; else the next compressed bytes.
            given: bytes | memoryview = decompressor.unconsumed_tail
            if not given:
                given = compressed[position : position + INPUT_STEP]
                position += len(given)
            try:
                piece = decompressor.decompress(given, step)
            except zlib.error as error:
                raise _malformed(coding, f"it is not valid {coding} data ({error})") from None
            total += len(piece)
            if limit is not None and total > limit:
                raise Problem(
                    413,
                    f"The request body inflates past the limit of {limit:,} bytes (MAX_BODY_BYTES); a "
                    "compressed body counts at its inflated size.",
                    slug="body-too-large",
                )
            inflated.append(piece)
            exhausted = not decompressor.unconsumed_tail and position == len(compressed)
            if len(piece) < step and exhausted and not decompressor.eof:
                break  # every byte given, nothing more to inflate, and the stream not ended: cut short
            let_other_connections_run()  # between steps of a large body
        if not decompressor.eof:
            raise _malformed(coding, f"its {coding} data ends before the end of the compressed stream")
        position -= len(decompressor.unused_data)  # given to zlib, but after the end of this member
        if position == len(compressed):
            break
        if coding != "gzip":  # gzip may hold several members (RFC 1952); a zlib stream is one
            raise _malformed(
                coding, f"{len(compressed) - position:,} bytes follow the end of the compressed stream"
            )
    # One copy of at most MAX_BODY_BYTES beyond what was held, and only one at a time per process: nothing
    # yields to other requests between here and the caller's use of it.
    return b"".join(inflated)


def _deflate_wbits(data: bytes | memoryview) -> int:
    """zlib's format when ``data`` starts with a zlib header (RFC 1950: method 8, a check that divides by
    31), else raw deflate."""
    if len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0:
        return _ZLIB_WBITS
    return _RAW_DEFLATE_WBITS


def _malformed(coding: str, reason: str) -> Problem:
    message = f"The request body does not decode as its {CONTENT_ENCODING} ({coding}) says: {reason}."
    return Problem(
        400, message, slug="malformed-body", title="Malformed body", errors={CONTENT_ENCODING: [message]}
    )
