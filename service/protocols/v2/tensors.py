"""Tensors of the Open Inference Protocol ⇄ NumPy arrays, as JSON data or binary tensor data.

A request body is a JSON header, optionally followed by the tensors' bytes in the order of ``inputs``
(the binary tensor data extension: little-endian, row-major, BOOL as one byte, the header's length in the
``Inference-Header-Content-Length`` header). Binary inputs become arrays with ``np.frombuffer``, without a
copy when the bytes are aligned; every size is checked against the bytes that are really there before
an array is made, so a lying header is a 400, never a read past the body.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from marshmallow import ValidationError

from service.protocols.declarations.arrays import Array
from service.requests import MAX_RANK, ArrayKind
from service.web.problems import Problem, did_you_mean

HEADER_LENGTH = "Inference-Header-Content-Length"
# The most dimensions a shape may list (NumPy's limit): a rank the model does not take (each takes up to
# MAX_RANK) is then refused by the model's field, with /v1's message, not as a malformed shape.
MAX_SHAPE_RANK = 32
_LARGEST_ARRAY_BYTES = np.iinfo(np.intp).max

# Every datatype this service reads or writes, with its little-endian NumPy dtype.
DTYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
# The protocol's other datatypes: named in messages, never accepted.
OTHER_DATATYPES = frozenset({"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "FP16", "BF16", "BYTES"})
_KINDS: dict[str, ArrayKind] = {"BOOL": "boolean", "INT32": "integer", "INT64": "integer"}


def datatype_of(array: np.ndarray) -> str:
    """The protocol's name for ``array``'s dtype (float64 → FP64, bool → BOOL, …)."""
    for name, dtype in DTYPES.items():
        if array.dtype == dtype:
            return name
    raise TypeError(f"no Open Inference Protocol datatype for {array.dtype}")


def malformed(detail: str, *, field: str) -> Problem:
    """A 400: the body does not follow the protocol (framing, sizes, structure), naming what is wrong."""
    return _naming(400, "malformed-request", "Malformed request", "The request is malformed.", detail, field)


def invalid(detail: str, *, field: str) -> Problem:
    """A 422: the body follows the protocol but breaks a model's rule, naming the tensor or parameter."""
    return _naming(422, "validation-error", "Invalid request", "The request is invalid.", detail, field)


def _naming(status: int, slug: str, title: str, summary: str, detail: str, field: str) -> Problem:
    return Problem(status, f"{summary} {field}: {detail}", slug=slug, title=title, errors={field: [detail]})


def split_body(body: bytes, header_length: str | None) -> tuple[memoryview, memoryview]:
    """The JSON header and the binary data after it (empty without ``Inference-Header-Content-Length``)."""
    whole = memoryview(body)
    if header_length is None:
        return whole, whole[len(whole) :]
    text = header_length.strip()
    # ASCII digits only: str.isdigit alone takes "²" (a Latin-1 header byte), which int() refuses. No sign;
    # 19 digits fit an int64.
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        raise malformed(
            f"{HEADER_LENGTH} must be a byte count, got {header_length[:40]!r}.", field=HEADER_LENGTH
        )
    length = int(text)
    if not 0 < length <= len(body):
        raise malformed(
            f"{HEADER_LENGTH} is {length:,} but the body has {len(body):,} bytes: the JSON header must be "
            "non-empty and inside the body.",
            field=HEADER_LENGTH,
        )
    return whole[:length], whole[length:]


def parse_header(header: memoryview) -> dict[str, Any]:
    """The JSON header as a dict (orjson refuses NaN and Infinity, which JSON does not have)."""
    try:
        parsed = orjson.loads(header)
    except orjson.JSONDecodeError as error:
        if not bytes(header).strip():  # asked only now: a copy of a large header, for its message alone
            empty = "The request body is empty: send a JSON inference request."
            raise malformed(empty, field="body") from None
        raise malformed(f"The inference header is not valid JSON: {error}.", field="body") from None
    if not isinstance(parsed, dict):
        raise malformed("The inference header must be a JSON object with an inputs list.", field="body")
    return parsed


@dataclass(frozen=True)
class InputSpec:
    """What one input tensor of a model accepts."""

    datatypes: tuple[str, ...]  # the first is the one the model metadata names
    shape: tuple[int, ...]  # for the model metadata: the least rank, -1 for each variable dimension
    required: bool = True
    max_rank: int = MAX_RANK  # the most dimensions it takes (leading ones broadcast)
    axes: str | None = None  # the dimensions' names, e.g. "[..., n, d_k]"


# Triton's (system and CUDA) shared-memory extensions: an input's data is in a region registered before.
SHARED_MEMORY_PARAMETERS = frozenset(
    {"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"}
)


def decode_inputs(
    tensors: object, binary: memoryview, specs: Mapping[str, InputSpec]
) -> dict[str, np.ndarray]:
    """The request's input tensors as arrays, by name; every size is checked before an array is made."""
    if not isinstance(tensors, list):
        raise malformed("inputs must be a list of tensors.", field="inputs")
    if len(tensors) > len(specs):  # before reading any: a million tensors are refused at once
        raise invalid(
            f"this model takes at most {len(specs)} input tensors ({', '.join(specs)}), "
            f"got {len(tensors):,}.",
            field="inputs",
        )
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for position, tensor in enumerate(tensors):
        where = f"inputs[{position}]"
        if not isinstance(tensor, dict):
            raise malformed(f"{where} must be a tensor object.", field=where)
        name = tensor.get("name")
        if not isinstance(name, str):
            raise malformed(f"{where} needs a name.", field=where)
        if name not in specs:
            detail = f"Unknown input tensor {name[:60]!r}.{did_you_mean(name, list(specs))}"
            # The field is the client's name cut short: a megabyte of name is not echoed three times.
            raise invalid(f"{detail} This model's inputs are: {', '.join(specs)}.", field=name[:60])
        if name in arrays:
            raise invalid("this input tensor is given twice.", field=name)
        datatype, dtype = _datatype(tensor.get("datatype"), specs[name], name)
        shape = _shape(tensor.get("shape"), name, datatype)
        count = math.prod(shape)
        parameters = tensor.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise malformed("parameters must be an object.", field=name)
        shared = sorted(key for key in parameters or () if key in SHARED_MEMORY_PARAMETERS)
        if shared:
            # The data is elsewhere: answering from the JSON data beside it (a 200 before) computes on
            # something else than meant. Other parameters describe the data (MLServer's content_type "np"
            # on every input) and are read past, as the protocol lets a server do.
            raise invalid(
                f"has parameter {shared[0]!r}, but this server has no shared memory (Triton's shared-memory "
                "extensions): send the data as JSON or with binary_data_size.",
                field=name,
            )
        size = None if parameters is None else parameters.get("binary_data_size")
        if size is not None:
            if "data" in tensor:
                raise malformed("has both data and binary_data_size; send one.", field=name)
            arrays[name] = _binary_tensor(binary, offset, size, shape, count, datatype, dtype, name)
            offset += size
        elif "data" in tensor:
            arrays[name] = _json_tensor(tensor["data"], shape, count, datatype, dtype, name)
        else:
            raise malformed("needs data (JSON) or parameters.binary_data_size (binary).", field=name)
    if offset != len(binary):
        raise malformed(
            f"the body has {len(binary) - offset:,} bytes after the binary tensors' data "
            f"({offset:,} bytes declared by binary_data_size, {len(binary):,} after the JSON header).",
            field="body",
        )
    missing = [name for name, spec in specs.items() if spec.required and name not in arrays]
    if missing:
        raise invalid(
            f"this required input tensor is missing (inputs are {', '.join(specs)}).", field=missing[0]
        )
    return arrays


def _datatype(datatype: object, spec: InputSpec, name: str) -> tuple[str, np.dtype[Any]]:
    if isinstance(datatype, str) and datatype in spec.datatypes:
        return datatype, DTYPES[datatype]
    if isinstance(datatype, str) and (datatype in DTYPES or datatype in OTHER_DATATYPES):
        raise invalid(
            f"datatype {datatype} is not accepted here; use {' or '.join(spec.datatypes)}.", field=name
        )
    raise malformed(
        f"datatype must be one of {', '.join(spec.datatypes)}, got {str(datatype)[:40]!r}.", field=name
    )


def _shape(shape: object, name: str, datatype: str) -> tuple[int, ...]:
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_SHAPE_RANK
        or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in shape)
    ):
        raise malformed(
            f"shape must be a list of at most {MAX_SHAPE_RANK} non-negative integers, got {str(shape)[:60]}.",
            field=name,
        )
    # A shape with a 0 holds no element whatever its other dimensions, so no size check refuses it; but NumPy
    # makes no array, not even an empty one, whose other dimensions multiply past the bytes it can address.
    # (Without a 0, the element count checked against the data refuses such a shape first.)
    itemsize = DTYPES[datatype].itemsize
    if 0 in shape and math.prod(size for size in shape if size) * itemsize > _LARGEST_ARRAY_BYTES:
        raise invalid(
            f"shape {str(shape)[:80]} of {datatype} is larger than any array can be, even with no elements.",
            field=name,
        )
    return tuple(shape)


def _binary_tensor(
    binary: memoryview,
    offset: int,
    size: object,
    shape: tuple[int, ...],
    count: int,
    datatype: str,
    dtype: np.dtype[Any],
    name: str,
) -> np.ndarray:
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise malformed(f"binary_data_size must be a non-negative integer, got {str(size)[:40]}.", field=name)
    expected = count * dtype.itemsize
    if size != expected:
        raise malformed(
            f"shape {list(shape)} of {datatype} is {expected:,} bytes ({count:,} × {dtype.itemsize}), "
            f"but binary_data_size is {size:,}.",
            field=name,
        )
    if offset + size > len(binary):
        raise malformed(
            f"binary_data_size {size:,} at byte {offset:,} of the binary data runs past its end "
            f"({len(binary):,} bytes after the JSON header).",
            field=name,
        )
    if datatype == "BOOL":
        octets = np.frombuffer(binary, dtype=np.uint8, count=count, offset=offset)
        if count and int(octets.max()) > 1:
            raise malformed("BOOL data must hold only bytes 0 (false) and 1 (true).", field=name)
        return octets.view(np.bool_).reshape(shape)
    array = np.frombuffer(binary, dtype=dtype, count=count, offset=offset).reshape(shape)
    if array.ctypes.data % dtype.alignment:
        array = array.copy()  # unaligned after the header: one copy, so the arithmetic runs at full speed
    return array


def _nested_deeper_than(data: object, rank: int) -> bool:
    """Whether ``data``'s first entries nest lists more than ``rank`` deep (looks at most rank + 1 deep)."""
    probe = data
    for _ in range(rank + 1):
        if not isinstance(probe, list) or not probe:
            return False
        probe = probe[0]
    return True


def _json_tensor(
    data: object, shape: tuple[int, ...], count: int, datatype: str, dtype: np.dtype[Any], name: str
) -> np.ndarray:
    # The /v1 array field reads the lists (flat, as the protocol sends them, or nested), with its checks of
    # element types, raggedness and finiteness.
    if count == 0:
        # An empty dimension breaks the model's rule for the tensor, not the protocol's: the array is made
        # here so that the declaration's field refuses it with /v1's message.
        if not _holds_no_values(data):
            raise malformed(f"shape {list(shape)} has no elements but data has some.", field=name)
        return np.empty(shape, dtype=dtype)
    rank = max(1, len(shape))
    if _nested_deeper_than(data, rank):  # the protocol's structure, as the nesting below (a 400, not a 422)
        raise malformed(
            f"data is nested deeper than shape {list(shape)}; send it flat (row-major) or nested as the "
            "shape.",
            field=name,
        )
    field = Array(kind=_KINDS.get(datatype, "number"), min_rank=1, max_rank=rank)
    try:
        array = field.deserialize(data)
    except ValidationError as error:
        messages: Sequence[Any] = error.messages if isinstance(error.messages, list) else [error.messages]
        raise invalid(f"data {messages[0]}", field=name) from None
    if array.size != count:
        raise malformed(
            f"shape {list(shape)} has {count:,} elements but data has {array.size:,}.", field=name
        )
    if array.ndim > 1 and array.shape != shape:
        # The protocol sends data flat (row-major) or nested as the tensor; nested otherwise, it is not
        # clear which was meant ([3, 2] for [2, 3] may be a transposed matrix), so it is not guessed.
        raise malformed(
            f"data is nested as {list(array.shape)} but shape is {list(shape)}; send it flat "
            "(row-major) or nested as the shape.",
            field=name,
        )
    if dtype.kind == "i" and array.dtype != dtype and array.size:
        limits = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < limits.min or high > limits.max:  # astype would wrap it silently (2**32 → 0 in INT32)
            outside = low if low < limits.min else high
            raise invalid(f"data holds {outside}, outside the range of {datatype}.", field=name)
    if array.dtype != dtype:
        with np.errstate(over="ignore"):
            cast = array.astype(dtype)  # an FP32 entry beyond its range becomes inf
        if dtype.kind == "f" and cast.size and not np.isfinite(cast).all():
            outside = array.ravel()[np.argmin(np.isfinite(cast).ravel())]
            raise invalid(
                f"data holds {outside:.9g}, beyond the range of {datatype} (±{np.finfo(dtype).max:.9g}).",
                field=name,
            )
        array = cast
    return array.reshape(shape)


def _holds_no_values(data: object) -> bool:
    """Whether ``data`` is a list of (lists of) lists only: the data of a tensor with no elements."""
    pending = [data]
    while pending:
        item = pending.pop()
        if not isinstance(item, list):
            return False
        pending.extend(item)
    return True


@dataclass(frozen=True)
class OutputTensor:
    """One output of an answer: its array and whether it travels as binary data."""

    name: str
    array: np.ndarray
    binary: bool


def encode_outputs(outputs: Sequence[OutputTensor]) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The answer's output objects for the JSON header, and the binary chunks that follow it, in order.

    JSON data is the flattened array written by orjson (non-finite values as null); binary data is the
    array's bytes, little-endian and row-major.
    """
    described: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for output in outputs:
        array = output.array
        entry: dict[str, Any] = {
            "name": output.name,
            "datatype": datatype_of(array),
            "shape": list(array.shape),
        }
        if output.binary:
            chunk = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
            entry["parameters"] = {"binary_data_size": len(chunk)}
            chunks.append(chunk)
        else:
            entry["data"] = np.ascontiguousarray(array).reshape(-1)
        described.append(entry)
    return described, chunks
