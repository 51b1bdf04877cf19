"""The Open Inference Protocol's binary framing, on the client's side: arrays ⇄ one request body.

A request body is a JSON header followed by each input's little-endian bytes (its length in the
``Inference-Header-Content-Length`` header); an answer is framed the same way. Both the sync and the async
client use these functions, so they send and read exactly the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from attention_client._errors import ApiError

HEADER_LENGTH = "Inference-Header-Content-Length"
_DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


def float_tensor(name: str, values: ArrayLike) -> tuple[str, NDArray[Any], str]:
    """A float32 array travels as FP32 (and is answered in float32); other real numbers as FP64.

    Complex numbers (whose imaginary part the cast would drop), booleans and text are refused here, as the
    service refuses them in JSON.
    """
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be real numbers, got {array.dtype}")
    if array.dtype == np.float32:
        return name, array, "FP32"
    return name, np.asarray(array, dtype=np.float64), "FP64"


def bool_tensor(name: str, values: ArrayLike) -> tuple[str, NDArray[Any], str]:
    """Booleans; an integer mask must hold only 0 and 1 (2 is a mistake, not "true")."""
    array = np.asarray(values)
    if array.dtype != np.bool_:
        if array.dtype.kind not in "iu" or not np.isin(array, (0, 1)).all():
            raise ValueError(f"{name} must be booleans (or 0/1 integers), got {array.dtype}")
        array = array.astype(np.bool_)
    return name, array, "BOOL"


def int_tensor(name: str, values: ArrayLike) -> tuple[str, NDArray[Any], str]:
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got {array.dtype}")
    if array.dtype == np.int32:
        return name, array, "INT32"
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds {int(array.max())}, beyond INT64")  # the cast would wrap it
    return name, np.asarray(array, dtype=np.int64), "INT64"


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
    head = json.dumps(header, separators=(",", ":")).encode()
    return Call(
        path=f"/v2/models/{model}/infer",
        body=b"".join([head, *chunks]),
        headers={HEADER_LENGTH: str(len(head)), "Content-Type": "application/octet-stream"},
    )


def read_outputs(status: int, headers: Mapping[str, str], body: bytes) -> dict[str, NDArray[Any]]:
    """The answer's outputs by name (binary ones are read-only views of ``body``), or the ApiError."""
    if status != 200:
        raise error_from(status, body)
    length = headers.get(HEADER_LENGTH)
    head_end = len(body) if length is None else int(length)
    header = json.loads(body[:head_end])
    outputs: dict[str, NDArray[Any]] = {}
    offset = head_end
    for output in header["outputs"]:
        dtype = _DTYPES[output["datatype"]]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:  # JSON data: null (a hidden score, an unscored position) becomes NaN
            data = [np.nan if value is None else value for value in output["data"]]
            array = np.array(data, dtype=dtype)
        else:
            if offset + size > len(body):
                raise ApiError(status, "Malformed answer", f"output {output['name']} runs past the body")
            array = np.frombuffer(body, dtype=dtype, count=size // dtype.itemsize, offset=offset)
            offset += size
        outputs[output["name"]] = array.reshape(output["shape"])
    return outputs


def error_from(status: int, body: bytes) -> ApiError:
    """The service's problem document (or whatever came instead) as an ApiError."""
    try:
        problem = json.loads(body)
    except ValueError:
        problem = None
    if not isinstance(problem, dict):
        text = body[:500].decode("utf-8", "replace")
        return ApiError(status, "Unexpected answer", text or f"HTTP {status} with an empty body")
    errors = problem.get("errors")
    return ApiError(
        status,
        str(problem.get("title", "")),
        str(problem.get("detail") or problem.get("error") or ""),
        errors=errors if isinstance(errors, dict) else {},
        type=str(problem.get("type", "about:blank")),
        request_id=problem.get("request_id"),
    )
