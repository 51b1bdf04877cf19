"""Service endpoints: health, the contract, the index."""

from __future__ import annotations

from marshmallow import fields

from service.protocols.declarations.schemas import ResponseSchema


class HealthSchema(ResponseSchema):
    status = fields.String(required=True, metadata={"example": "ok"})


class EndpointSchema(ResponseSchema):
    method = fields.String(required=True)
    path = fields.String(required=True)
    summary = fields.String(required=True)


class IndexSchema(ResponseSchema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    endpoints = fields.List(fields.Nested(EndpointSchema), required=True)
