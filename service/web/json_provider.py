"""Flask JSON provider backed by orjson: NumPy arrays are written directly, with no ``tolist``."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response
from flask.json.provider import JSONProvider

# The encoding lives with the answers that are written in pieces (which need no Flask); this module only
# plugs it into Flask, so the arrow runs one way. dumps_bytes stays importable from here.
from service.web.answers import dumps_bytes, encode_in_pieces, should_stream

__all__ = ["OrjsonProvider", "dumps_bytes"]


class OrjsonProvider(JSONProvider):
    """Serialize with orjson; integer keys (marshmallow error dicts) and NumPy values are supported."""

    mimetype = "application/json"

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return dumps_bytes(obj).decode()

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return orjson.loads(s)

    def response(self, *args: Any, **kwargs: Any) -> Response:
        obj = _response_object(args, kwargs)
        if should_stream(obj):  # large arrays: written a block at a time, never held whole as bytes
            return Response(encode_in_pieces(obj), mimetype=self.mimetype)
        return Response(dumps_bytes(obj), mimetype=self.mimetype)


def _response_object(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What ``jsonify`` documents: one argument as it is, several as a list, keywords as an object."""
    if args and kwargs:
        raise TypeError("jsonify() takes positional arguments or keyword arguments, not both")
    if not args and not kwargs:
        return None
    if kwargs:
        return kwargs
    return args[0] if len(args) == 1 else list(args)
