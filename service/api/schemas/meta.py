"""Service endpoints: health, the contract, the index."""

from __future__ import annotations

from marshmallow import Schema, fields


class HealthSchema(Schema):
    status = fields.String(required=True, metadata={"example": "ok"})


class EndpointSchema(Schema):
    method = fields.String(required=True)
    path = fields.String(required=True)
    summary = fields.String(required=True)


class IndexSchema(Schema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    endpoints = fields.List(fields.Nested(EndpointSchema), required=True)
