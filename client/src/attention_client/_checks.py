"""Every argument checked before anything is sent: an :class:`InvalidInput` naming it, never NumPy's or
httpx's own exception, and never a request the service can only refuse.

Arrays are checked for what the casts and the wire would otherwise hide (ragged lists, text, complex
numbers, NaN and infinity, integers beyond INT64); options against their JSON schema in the contract
(type, allowed values, range, list length, object members), as the generated module states it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from attention_client._errors import InvalidInput
from attention_client._spec import Option, Tensor

# How a checked array travels on /v2: (name, array, datatype).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
Checked = tuple[str, NDArray[Any], str]


def check_tensor(tensor: Tensor, values: object) -> Checked:
    """``values`` as the array to send for ``tensor``; float32 stays FP32 (answered in float32)."""
    name = tensor.name
    array = _as_array(name, values)
    if not tensor.min_rank <= array.ndim <= tensor.max_rank:
        ranks = (
            f"{tensor.min_rank}"
            if tensor.min_rank == tensor.max_rank
            else f"{tensor.min_rank} to {tensor.max_rank}"
        )
        raise InvalidInput(name, f"must have rank {ranks}, got shape {list(array.shape)}")
    if tensor.kind == "boolean":
        return name, _booleans(name, array), "BOOL"
    if tensor.kind == "integer":
        return _integers(name, array)
    return _floats(name, array)


def _as_array(name: str, values: object) -> NDArray[Any]:
    if isinstance(values, str | bytes):
        raise InvalidInput(name, f"must be an array of numbers, got the string {str(values)[:40]!r}")
    try:
        array = np.asarray(values)
    except (ValueError, TypeError) as error:  # NumPy refuses ragged nesting ("inhomogeneous shape")
        raise InvalidInput(name, f"is not a rectangular array (ragged lists?): {error}") from error
    if array.dtype.kind in "OUSV":
        raise InvalidInput(
            name, f"must be an array of numbers, got {array.dtype} (ragged lists, text or None?)"
        )
    return array


def _floats(name: str, array: NDArray[Any]) -> Checked:
    if array.dtype.kind not in "iuf":
        raise InvalidInput(name, f"must be real numbers, got {array.dtype}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise InvalidInput(name, "holds a NaN or an infinity; the service takes finite numbers only")
    if array.dtype == np.float32:
        return name, array, "FP32"
    return name, np.asarray(array, dtype=np.float64), "FP64"


def _booleans(name: str, array: NDArray[Any]) -> NDArray[np.bool_]:
    """Booleans; an integer mask must hold only 0 and 1 (2 is a mistake, not "true")."""
    if array.dtype == np.bool_:
        return array
    if array.dtype.kind not in "iu" or not np.isin(array, (0, 1)).all():
        raise InvalidInput(name, f"must be booleans (or 0/1 integers), got {array.dtype}")
    return array.astype(np.bool_)


def _integers(name: str, array: NDArray[Any]) -> Checked:
    if array.dtype.kind not in "iu":
        raise InvalidInput(name, f"must be integers, got {array.dtype}")
    if array.dtype == np.int32:
        return name, array, "INT32"
    if array.dtype == np.uint64 and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise InvalidInput(name, f"holds {int(array.max())}, beyond INT64")  # the cast would wrap it
    return name, np.asarray(array, dtype=np.int64), "INT64"


def check_include(model: str, allowed: tuple[str, ...], value: object) -> list[str]:
    """The names of the optional outputs asked for, each once, in the order given."""
    if isinstance(value, str | bytes):
        raise InvalidInput(
            "include", f"must be a collection of output names such as [{str(value)[:40]!r}], not a string"
        )
    if not isinstance(value, Collection):
        raise InvalidInput("include", f"must be a collection of output names, got {type(value).__name__}")
    chosen: list[str] = []
    for item in value:
        if not isinstance(item, str) or item not in allowed:
            close = difflib.get_close_matches(str(item), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidInput(
                "include",
                f"{str(item)[:40]!r} is not an optional output of {model}.{hint} "
                f"Allowed: {', '.join(allowed)}.",
            )
        if item not in chosen:
            chosen.append(item)
    return chosen


def check_option(option: Option, value: object) -> Any:
    """``value`` as JSON (plain Python numbers, lists and dicts), once it fits the option's schema."""
    return _fit(option.name, option.name, value, option.schema)


def _fit(argument: str, where: str, value: object, schema: Mapping[str, Any]) -> Any:
    if "anyOf" in schema:
        failures: list[InvalidInput] = []
        for alternative in schema["anyOf"]:
            try:
                return _fit(argument, where, value, alternative)
            except InvalidInput as error:
                failures.append(error)
        # The message of the alternative that is not null: "must be one of …", not "must be null".
        meaningful = [f for f in failures if not f.detail.endswith("must be null")] or failures
        raise meaningful[0]
    kinds = schema.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if value is None:
        if "null" in kinds or not kinds:
            return None
        raise InvalidInput(argument, f"{where} must not be None")
    if isinstance(value, np.ndarray) and value.ndim > 0 and "array" in kinds:
        fast = _fit_ndarray(argument, where, value, schema)
        if fast is not _NO_FIT:
            return fast
    for kind in kinds:
        fitted = _FITS.get(kind, _no_fit)(value)
        if fitted is not _NO_FIT:
            break
    else:
        if kinds == ["null"]:
            raise InvalidInput(argument, f"{where} must be null")
        expected = " or ".join(_NAMES.get(kind, kind) for kind in kinds if kind != "null")
        if "enum" in schema and not kinds:
            expected = "one of " + ", ".join(map(repr, schema["enum"]))
        raise InvalidInput(argument, f"{where} must be {expected}, got {type(value).__name__} {_show(value)}")
    if "enum" in schema and fitted not in schema["enum"]:
        close = difflib.get_close_matches(str(fitted), [str(v) for v in schema["enum"]], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        allowed = ", ".join(repr(v) for v in schema["enum"])
        raise InvalidInput(argument, f"{where} must be one of {allowed}, got {_show(fitted)}{hint}")
    _check_range(argument, where, fitted, schema)
    if isinstance(fitted, list):
        return _fit_items(argument, where, fitted, schema)
    if isinstance(fitted, dict):
        return _fit_members(argument, where, fitted, schema)
    return fitted


def _check_range(argument: str, where: str, value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        # The service reads JSON integers into 64 bits: beyond them, its parser refuses the whole body.
        # (Only an integer option's value gets here as an int that large: _number makes it a float.)
        raise InvalidInput(
            argument, f"{where} must be within INT64 (-2**63 to 2**63 - 1), got {_show(value)}"
        )
    for key, sign in _BOUNDS.items():
        if key not in schema:
            continue
        limit = schema[key]
        holds = {
            "minimum": value >= limit,
            "exclusiveMinimum": value > limit,
            "maximum": value <= limit,
            "exclusiveMaximum": value < limit,
        }[key]
        if not holds:
            raise InvalidInput(argument, f"{where} must be {sign} {limit}, got {value}")


_BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


def _fit_ndarray(argument: str, where: str, array: NDArray[Any], schema: Mapping[str, Any]) -> Any:
    """An array of numbers or booleans checked by NumPy, whole (not item by item, which a large weight
    matrix inside an option would make slow); kept as the array, which the body writes as a list. Schemas
    of other items (objects, mixed kinds) are checked item by item instead (``_NO_FIT``)."""
    depth, node = 0, schema
    while "array" in _kinds(node) and "items" in node:
        depth, node = depth + 1, node["items"]
    leaf = [kind for kind in _kinds(node) if kind != "null"]
    if depth == 0 or len(leaf) != 1 or leaf[0] not in ("number", "integer", "boolean"):
        return _NO_FIT
    if array.ndim != depth:
        raise InvalidInput(argument, f"{where} must have rank {depth}, got shape {list(array.shape)}")
    kind = leaf[0]
    if kind == "boolean":
        return _booleans(argument, array)
    if array.dtype.kind not in ("iu" if kind == "integer" else "iuf"):
        raise InvalidInput(argument, f"{where} must hold {kind}s, got {array.dtype}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise InvalidInput(
            argument, f"{where} holds a NaN or an infinity; the service takes finite numbers only"
        )
    return array


def _kinds(schema: Mapping[str, Any]) -> list[str]:
    kinds = schema.get("type", [])
    return [kinds] if isinstance(kinds, str) else list(kinds)


def _fit_items(argument: str, where: str, items: list[Any], schema: Mapping[str, Any]) -> list[Any]:
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    if len(items) < low or (high is not None and len(items) > high):
        size = f"{low}" if low == high else f"{low} to {high}" if high is not None else f"at least {low}"
        raise InvalidInput(argument, f"{where} must hold {size} items, got {len(items)}")
    item_schema = schema.get("items", {})
    fitted = [_fit(argument, f"{where}[{i}]", item, item_schema) for i, item in enumerate(items)]
    if schema.get("uniqueItems") and len({repr(v) for v in fitted}) != len(fitted):
        raise InvalidInput(argument, f"{where} must not repeat an item")
    return fitted


def _fit_members(
    argument: str, where: str, members: dict[str, Any], schema: Mapping[str, Any]
) -> dict[str, Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        for key in members:
            if key not in properties:
                close = difflib.get_close_matches(str(key), list(properties), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise InvalidInput(
                    argument, f"{where} has no member {key!r}.{hint} Allowed: {', '.join(properties)}."
                )
    for key in schema.get("required", []):
        if members.get(key) is None:
            raise InvalidInput(argument, f"{where} needs {key!r}")
    return {
        key: _fit(argument, f"{where}.{key}", value, properties.get(key, {}))
        for key, value in members.items()
        if value is not None  # null is absent, as the service reads it
    }


_NO_FIT: Any = object()


def _no_fit(value: object) -> Any:
    return _NO_FIT


def _boolean(value: object) -> Any:
    return bool(value) if isinstance(value, bool | np.bool_) else _NO_FIT


def _integer(value: object) -> Any:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        return _NO_FIT
    return int(value)


def _number(value: object) -> Any:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return _NO_FIT
    if isinstance(value, int | np.integer) and INT64_MIN <= int(value) <= INT64_MAX:
        return int(value)
    try:
        number = float(value)  # an integer beyond INT64 too, which the service's JSON parser would refuse
    except OverflowError:  # an integer beyond any float (10**400)
        return _NO_FIT
    return number if math.isfinite(number) else _NO_FIT  # the service takes finite numbers only


def _string(value: object) -> Any:
    return value if isinstance(value, str) else _NO_FIT


def _array(value: object) -> Any:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Collection):
        return _NO_FIT
    return list(value)


def _object(value: object) -> Any:
    return dict(value) if isinstance(value, Mapping) else _NO_FIT


_FITS = {
    "boolean": _boolean,
    "integer": _integer,
    "number": _number,
    "string": _string,
    "array": _array,
    "object": _object,
}
_NAMES = {
    "boolean": "a bool",
    "integer": "an int",
    "number": "a finite number",
    "string": "a string",
    "array": "a list",
    "object": "a dict",
}


def _show(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 10_000:
        # repr refuses an int of over 4,300 digits (ValueError): 10,000 bits are about 3,000
        return f"of {value.bit_length()} bits"
    return repr(value)[:60]
