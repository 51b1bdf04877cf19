"""The Open Inference Protocol's binary framing, on the client's side: arrays ⇄ one request body.

A request body is a JSON header followed by each input's little-endian bytes (its length in the
``Inference-Header-Content-Length`` header); an answer is framed the same way. Both the sync and the async
client use these functions, so they send and read exactly the same bytes.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from attention_client._errors import ApiError, MalformedAnswerError

HEADER_LENGTH = "Inference-Header-Content-Length"
_UTC = datetime.timezone.utc  # noqa: UP017 (the client runs on Python 3.10, which has no datetime.UTC)
_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


def json_default(value: object) -> Any:
    """NumPy values in a JSON body (an array inside an option, checked as it is): as lists and numbers."""
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


@dataclass(frozen=True)
class Call:
    """One infer request: where it goes, its body and its headers."""

    path: str
    body: bytes
    headers: dict[str, str]


def infer_call(
    model: str,
    tensors: list[tuple[str, NDArray[Any], str]],
    parameters: Mapping[str, Any],
    outputs: list[str] | None,
) -> Call:
    """Frame ``tensors`` as binary tensor data after the JSON header; every output is asked for as binary."""
    chunks = [
        np.ascontiguousarray(array, dtype=_DTYPES[datatype]).tobytes() for _, array, datatype in tensors
    ]
    header: dict[str, Any] = {
        "inputs": [
            {
                "name": name,
                "shape": list(array.shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": len(chunk)},
            }
            for (name, array, datatype), chunk in zip(tensors, chunks, strict=True)
        ],
        "parameters": {**{k: v for k, v in parameters.items() if v is not None}, "binary_data_output": True},
    }
    if outputs is not None:
        header["outputs"] = [{"name": name} for name in outputs]
    head = json.dumps(header, separators=(",", ":"), default=json_default).encode()
    return Call(
        path=f"/v2/models/{model}/infer",
        body=b"".join([head, *chunks]),
        headers={HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"},
    )


Outputs = dict[str, NDArray[Any]]
ResultT = TypeVar("ResultT")
# What reading an answer that is not the service's can raise, besides the checks below: JSON that does not
# parse (ValueError), a member missing or of the wrong kind (LookupError, TypeError, AttributeError), data
# that NumPy cannot make into the declared array (ValueError, OverflowError).
_READ_ERRORS = (ValueError, TypeError, LookupError, AttributeError, OverflowError)


def read_result(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    build: Callable[[Outputs], ResultT],
    read: Callable[[int, Mapping[str, str], bytes], Outputs] | None = None,
) -> ResultT:
    """The answer as ``build`` makes it from the outputs (``read`` from the body: by default an infer
    answer's), or an :class:`ApiError`: the service's refusal (its problem document), or
    :class:`MalformedAnswerError` for anything that is not a well-formed answer, with the exception that
    reading it raised as ``__cause__``."""
    if status != 200:
        raise error_from(status, headers, body)
    try:
        return build((read or read_outputs)(status, headers, body))
    except MalformedAnswerError:
        raise
    except _READ_ERRORS as error:
        raise malformed_answer(status, headers, body, f"{type(error).__name__}: {error}") from error


def read_outputs(status: int, headers: Mapping[str, str], body: bytes) -> Outputs:
    """A 200's outputs by name (binary ones are read-only views of ``body``).

    Raises :class:`MalformedAnswerError` when the framing does not add up, and whatever the reading raises
    (see :func:`read_result`) when the JSON is not an infer answer.
    """
    head_end = _header_length(status, headers, body)
    header = json.loads(body[:head_end], parse_constant=no_json_constant)
    if not isinstance(header, dict) or not isinstance(header.get("outputs"), list):
        raise malformed_answer(
            status, headers, body, "the JSON is not an infer answer with a list of outputs"
        )
    outputs: Outputs = {}
    offset = head_end
    for output in header["outputs"]:
        datatype = output["datatype"]
        dtype = _DTYPES[datatype]
        shape = output["shape"]
        if not isinstance(shape, list) or not all(_is_count(size) for size in shape):
            raise malformed_answer(
                status, headers, body, f"output {str(output['name'])[:60]!r} has shape {str(shape)[:60]}"
            )
        if output["name"] in outputs:
            raise malformed_answer(
                status, headers, body, f"output {str(output['name'])[:60]!r} is answered twice"
            )
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            array = _json_data(output["data"], datatype, shape)
        else:
            expected = math.prod(shape) * dtype.itemsize
            if not _is_count(size) or size != expected or offset + size > len(body):
                raise malformed_answer(
                    status,
                    headers,
                    body,
                    f"output {str(output['name'])[:60]!r} declares {size!r} bytes for shape {shape} "
                    f"({expected} expected) at byte {offset} of a {len(body)}-byte body",
                )
            array = np.frombuffer(body, dtype=dtype, count=size // dtype.itemsize, offset=offset)
            offset += size
        outputs[output["name"]] = array.reshape(shape)
    if offset != len(body):
        raise malformed_answer(
            status,
            headers,
            body,
            f"{len(body) - offset} bytes follow the binary outputs' {offset - head_end}",
        )
    return outputs


def _json_data(data: object, datatype: str, shape: list[int]) -> NDArray[Any]:
    """An output's JSON data as its array: flat (row-major, as the service writes it) or nested exactly as
    ``shape``, as the service's decoder reads a request's. Each element must be of the datatype's JSON kind
    (NumPy would read "1.5" or true as a number): raises ValueError (or OverflowError) otherwise."""
    if not isinstance(data, list):
        raise ValueError(f"data is a JSON {type(data).__name__}, not a list")
    nesting, elements = json_nesting(data)
    count = math.prod(shape)
    if nesting != (count,) and list(nesting) != shape:
        raise ValueError(f"data is nested as {list(nesting)} but shape is {shape}")
    kind = _KINDS[datatype]
    null = np.nan if kind == "number" else None  # (a non-finite number, as the service writes it)
    return json_elements(elements, kind, _DTYPES[datatype], null).reshape(shape)


_KINDS = {"BOOL": "boolean", "INT32": "integer", "INT64": "integer", "FP32": "number", "FP64": "number"}


def json_nesting(data: object) -> tuple[tuple[int, ...], list[Any]]:
    """The shape of rectangular nested JSON lists, and their elements in row-major order; ValueError for
    ragged lists or lists beside values at one level."""
    nesting: list[int] = []
    level: list[Any] = [data]
    while any(isinstance(item, list) for item in level):
        if not all(isinstance(item, list) for item in level):
            raise ValueError(f"data mixes lists and values at depth {len(nesting)}")
        lengths = {len(item) for item in level}
        if len(lengths) > 1:
            raise ValueError(f"data is ragged at depth {len(nesting)} (lengths {sorted(lengths)[:4]})")
        nesting.append(lengths.pop())
        level = [element for item in level for element in item]
    return tuple(nesting), level


def json_elements(elements: list[Any], kind: str, dtype: np.dtype[Any], null: float | None) -> NDArray[Any]:
    """JSON values as a flat array of ``dtype`` once each is of ``kind``: a JSON boolean for "boolean", an
    integer for "integer", an integer or a float for "number". A null becomes ``null`` (the service writes
    a non-finite number as null), or is refused when ``null`` is None."""
    fits = _FITS[kind]
    if null is not None and None in elements:
        elements = [null if value is None else value for value in elements]
    for value in elements:
        if not fits(value):
            raise ValueError(f"data holds {json.dumps(value)[:40]} where {kind}s go")
    return np.array(elements, dtype=dtype)  # OverflowError for an integer beyond the datatype


# The JSON kinds by the Python types json.loads makes of them (bool is an int subclass: a JSON boolean).
_FITS: dict[str, Callable[[object], bool]] = {
    "boolean": lambda value: value.__class__ is bool,
    "integer": lambda value: value.__class__ is int,
    "number": lambda value: value.__class__ is float or value.__class__ is int,
}


def no_json_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")  # json.loads reads NaN and Infinity, which JSON does not have


def _is_count(value: object) -> bool:
    """A size or a dimension: an integer >= 0 (not a bool, which JSON keeps apart and NumPy would take)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _header_length(status: int, headers: Mapping[str, str], body: bytes) -> int:
    """Where the JSON header ends: the whole body, or ``Inference-Header-Content-Length`` bytes."""
    length = headers.get(HEADER_LENGTH)
    if length is None:
        return len(body)
    text = length.strip()
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= len(body):
        raise malformed_answer(
            status, headers, body, f"{HEADER_LENGTH} is {length[:40]!r} but the body has {len(body)} bytes"
        )
    return int(text)


def malformed_answer(
    status: int, headers: Mapping[str, str], body: bytes, problem: str
) -> MalformedAnswerError:
    """The error for an answer that is not a well-formed result, quoting the start of the body."""
    kind = headers.get("Content-Type", "no Content-Type")
    start = body[:200].decode("utf-8", "replace")
    return MalformedAnswerError(
        status,
        "Malformed answer",
        f"The answer is not a well-formed infer answer (HTTP {status}, {kind}, {len(body)} bytes): "
        f"{problem}. It starts: {start!r}",
        request_id=headers.get("X-Request-ID"),
        retry_after=retry_after_seconds(headers),
    )


def error_from(status: int, headers: Mapping[str, str], body: bytes) -> ApiError:
    """The service's problem document (or the protocol's ``{"error": …}``) as an ApiError; anything else
    (a proxy's HTML error page) as a :class:`MalformedAnswerError` with the status it came with."""
    try:
        problem = json.loads(body)
    except ValueError as error:
        malformed = malformed_answer(status, headers, body, "the error answer is not JSON")
        malformed.__cause__ = error  # raised by the caller: this is the `from error` it cannot write
        return malformed
    if not isinstance(problem, dict) or not ({"title", "detail", "error"} & problem.keys()):
        return malformed_answer(status, headers, body, "the error answer is not a problem document")
    errors = problem.get("errors")
    return ApiError(
        status,
        str(problem.get("title", "")),
        str(problem.get("detail") or problem.get("error") or ""),
        errors=errors if isinstance(errors, dict) else {},
        type=str(problem.get("type", "about:blank")),
        request_id=problem.get("request_id"),
        retry_after=retry_after_seconds(headers),
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """An answer's ``Retry-After`` as seconds from now: delta-seconds or an HTTP-date (RFC 9110, section
    10.2.3, in any of its three formats; a date in the past is 0). None when it has none, or none that reads
    as either."""
    value = next((value for name, value in headers.items() if name.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime's format has no zone: an HTTP-date is always in GMT
        when = when.replace(tzinfo=_UTC)
    return max(0.0, (when - datetime.datetime.now(_UTC)).total_seconds())
