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

from marshmallow import EXCLUDE, RAISE, Schema, ValidationError, fields, missing, pre_load
from marshmallow.decorators import POST_DUMP, POST_LOAD, PRE_DUMP, PRE_LOAD, VALIDATES, VALIDATES_SCHEMA

# (name in the body, name in the loaded data, field): each declared field, in marshmallow's order
_FieldPlan = tuple[str, str, fields.Field[Any]]


class RequestSchema(Schema):
    """A request body: unknown fields are refused, and ``null`` for an optional field means "absent".

    :meth:`load` takes a shorter way through a valid body (below); anything else goes marshmallow's way.
    """

    _plan: tuple[tuple[_FieldPlan, ...], frozenset[str]] | None = None

    @pre_load
    def _null_means_absent(self, data: Any, **kwargs: Any) -> Any:
        if not isinstance(data, dict):
            return data  # marshmallow refuses a body that is not an object, naming it
        return self._without_null_optionals(data)

    def _without_null_optionals(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` without the optional fields sent as ``null`` (the one rule for both ways of loading)."""
        optional = self._optional_names
        return {name: value for name, value in data.items() if value is not None or name not in optional}

    @functools.cached_property
    def _optional_names(self) -> frozenset[str]:
        # Once per schema instance: the fields are fixed when it is built.
        return frozenset(
            field.data_key or name for name, field in self.load_fields.items() if not field.required
        )

    def load(self, data: Any, *, many: bool | None = None, partial: Any = None, unknown: Any = None) -> Any:
        """marshmallow's ``load``; a body with only known fields, each valid, skips its bookkeeping.

        marshmallow builds a closure, a keyword dict and an error-store entry per declared field, present or
        not (a request declares up to 17): for a small body that was most of the cost. Here each field sent
        is deserialized by the field itself (its checks and validators), each one absent takes its
        ``load_default``, and the ``post_load`` hooks run as marshmallow runs them. At the first thing that
        is not plain (an error, an unknown or missing required field, a body that is not an object, any
        ``load`` option) the body goes through marshmallow's own ``load`` from the start, so every error
        and message is marshmallow's.
        """
        plan = self._plan if self._plan is not None else self._make_plan()
        if not plan or many or partial or unknown is not None or type(data) is not dict:
            return super().load(data, many=many, partial=partial, unknown=unknown)
        fields_plan, known = plan
        body = self._without_null_optionals(data)
        if not body.keys() <= known:
            return super().load(data)
        result: dict[str, Any] = {}
        try:
            for data_key, attribute, field in fields_plan:
                value = body.get(data_key, missing)
                if value is missing:
                    if field.required:
                        return super().load(data)
                    default = field.load_default
                    value = default() if callable(default) else default
                    if value is missing:
                        continue
                else:
                    value = field.deserialize(value, data_key, body)
                    if value is missing:  # a field may load to nothing; marshmallow then leaves it out
                        continue
                result[attribute] = value
            return self._invoke_load_processors(
                POST_LOAD, result, many=False, original_data=data, partial=self.partial, unknown=self.unknown
            )
        except ValidationError:
            return super().load(data)

    def _make_plan(self) -> Any:
        """The fields in marshmallow's order, or ``()`` when this schema does more than the plain way
        handles (validators, other pre-load hooks, dotted attributes, non-default options)."""
        hooks = self._hooks
        plain = (
            not self.many
            and not self.partial
            and self.unknown == RAISE
            and not hooks[VALIDATES]
            and not hooks[VALIDATES_SCHEMA]
            and [name for name, _, _ in hooks[PRE_LOAD]] == ["_null_means_absent"]
        )
        steps = tuple(
            (field.data_key or name, field.attribute or name, field)
            for name, field in self.load_fields.items()
        )
        if any("." in attribute for _, attribute, _ in steps):
            plain = False
        plan = (steps, frozenset(data_key for data_key, _, _ in steps)) if plain else ()
        self._plan = plan  # type: ignore[assignment]
        return plan


class ResponseSchema(Schema):
    """A response body: documented as open to members it does not list (apispec omits
    ``additionalProperties: false`` for ``unknown = EXCLUDE``; responses are only ever dumped).

    :meth:`dump` of a view's ``dict`` takes a shorter way (below); anything else goes marshmallow's way.
    """

    class Meta:
        unknown = EXCLUDE

    _dump_plan: tuple[_FieldPlan, ...] | None = None

    def dump(self, obj: Any, *, many: bool | None = None) -> Any:
        """marshmallow's ``dump``; a ``dict`` skips the accessor machinery.

        marshmallow reaches each declared member through two accessor functions and, when the view left it
        out, a ``KeyError`` caught inside them. Here each member is looked up once (``getattr`` on the
        dict for an absent one, as marshmallow's accessor falls back to) and written by the field's own
        ``_serialize``, in marshmallow's order.
        """
        plan = self._dump_plan if self._dump_plan is not None else self._make_dump_plan()
        if not plan or many or type(obj) is not dict:
            return super().dump(obj, many=many)
        result: dict[str, Any] = {}
        for key, attribute, field in plan:
            value = obj[attribute] if attribute in obj else getattr(obj, attribute, missing)
            if value is missing:
                default = field.dump_default
                value = default() if callable(default) else default
                if value is missing:
                    continue
            result[key] = field._serialize(value, attribute, obj)
        return result

    def _make_dump_plan(self) -> Any:
        steps = tuple(
            (field.data_key or name, field.attribute or name, field)
            for name, field in self.dump_fields.items()
        )
        plain = (
            not self.many
            and not self._hooks[PRE_DUMP]
            and not self._hooks[POST_DUMP]
            and all(field._CHECK_ATTRIBUTE and "." not in attribute for _, attribute, field in steps)
        )
        self._dump_plan = steps if plain else ()
        return self._dump_plan
