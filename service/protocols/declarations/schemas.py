"""The two kinds of body schema, and the rule each states once for every endpoint.

- A **request** refuses fields it does not know, and treats an optional field sent as ``null`` as absent,
  so its default applies: clients generated from the contract (pydantic models, openapi-python-client)
  send ``null`` for every field left unset. A required field sent as ``null`` is still refused, naming it.
- A **response** may gain fields in later versions (the README's compatibility policy), so the contract
  does not forbid members it does not list; clients ignore the ones they do not know (RFC 9457 §3.2 for
  problem details).
"""

from __future__ import annotations

import functools
from typing import Any

from marshmallow import EXCLUDE, Schema, post_load, pre_load


class RequestSchema(Schema):
    """A request body: unknown fields are refused, and ``null`` for an optional field means "absent"."""

    @pre_load
    def _null_means_absent(self, data: Any, **kwargs: Any) -> Any:
        if not isinstance(data, dict):
            return data  # marshmallow refuses a body that is not an object, naming it
        optional = self._optional_names
        return {name: value for name, value in data.items() if value is not None or name not in optional}

    @functools.cached_property
    def _optional_names(self) -> frozenset[str]:
        # Once per schema instance: the fields are fixed when it is built.
        return frozenset(
            field.data_key or name for name, field in self.load_fields.items() if not field.required
        )


class PartSchema(RequestSchema):
    """Put first among a request schema's bases: that request's fields, loaded as a dict rather than as its
    typed request, for a request that holds it as a part (a Transformer block's ``attention``,
    ``feed_forward``, ``norm_1`` and ``norm_2``: the block makes their typed requests, over its own rows). The
    subclass's ``Meta.exclude`` names the fields the enclosing request supplies."""

    @post_load
    def typed(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """The fields as loaded (marshmallow finds hooks by name: this replaces the request's own)."""
        return data


class ResponseSchema(Schema):
    """A response body: documented as open to members it does not list (apispec omits
    ``additionalProperties: false`` for ``unknown = EXCLUDE``). The views write their answers as dicts
    of arrays straight to JSON; these schemas document them (and the contract tests check each answer
    against the contract)."""

    class Meta:
        unknown = EXCLUDE
