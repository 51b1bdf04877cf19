"""Flask JSON provider backed by orjson: NumPy arrays are written directly, with no ``tolist``."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from flask import Response
from flask.json.provider import JSONProvider

DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _default(value: Any) -> Any:
    # orjson only takes C-contiguous arrays natively; views and transposes come here.
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps_bytes(value: Any) -> bytes:
    """Serialize to JSON bytes; non-finite floats become ``null`` (callers decide when that is allowed)."""
    return orjson.dumps(value, default=_default, option=DUMP_OPTIONS)


class OrjsonProvider(JSONProvider):
    """Serialize with orjson; integer keys (marshmallow error dicts) and NumPy values are supported."""

    mimetype = "application/json"

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return dumps_bytes(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return orjson.loads(s)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        from service.web.answers import encode_in_pieces, should_stream  # answers imports dumps_bytes

        obj = self._prepare_response_obj(args, kwargs)
        if should_stream(obj):  # large arrays: written a block at a time, never held whole as bytes
            return Response(encode_in_pieces(obj), mimetype=self.mimetype)
        return Response(dumps_bytes(obj), mimetype=self.mimetype)
