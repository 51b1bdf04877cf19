"""The models of /v2, one per declared model and named like it: tensors and parameters read off the
declaration, and the way back from them to the one request schema.

A model's input tensors are its request schema's array fields and its parameters the other fields, each
named by its path (``rotary.base`` inside the ``rotary`` object, ``attention.w_q`` inside ``attention``);
the ``include`` list is the requested outputs. An infer request is put back together as the /v1 body it
stands for, with the decoded arrays in place of JSON lists, and loaded through the same schema: the same
rules, defaults, reading of ``null`` and messages, and the same typed request.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from marshmallow import Schema, fields

from service.protocols.declarations.arrays import Array
from service.protocols.declarations.common import IncludeList
from service.protocols.declarations.fields import StrictBoolean
from service.protocols.declarations.model import (
    FOLLOWS_PRECISION,
    ModelDeclaration,
    OutputSpec,
    declared_models,
)
from service.protocols.declarations.schemas import RequestSchema
from service.protocols.v2.tensors import InputSpec

BINARY_DATA_OUTPUT = "binary_data_output"
INCLUDE = "include"
PRECISION = "precision"
FLOAT = ("FP64", "FP32")
INTEGER = ("INT64", "INT32")
BOOL = ("BOOL",)
_KIND_DATATYPES = {"number": FLOAT, "integer": INTEGER, "boolean": BOOL}


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per model
class Model:
    """A declared model as /v2 serves it."""

    declaration: ModelDeclaration
    inputs: Mapping[str, InputSpec] = field(init=False)  # by path, in the schema's order
    parameter_fields: Mapping[str, fields.Field[Any]] = field(init=False)  # by path
    required_parameters: frozenset[str] = field(init=False)  # required, and inside required objects only
    outputs: Mapping[str, OutputSpec] = field(init=False)
    parameters: Schema = field(init=False)  # documents the parameters (the contract); loads nothing

    def __post_init__(self) -> None:
        # Frozen: each derived once, here.
        schema = self.declaration.request_schema
        inputs: dict[str, InputSpec] = {}
        parameters: dict[str, fields.Field[Any]] = {}
        required_parameters: set[str] = set()
        for path, declared, required in _leaves(schema):
            if isinstance(declared, Array):
                shape = (-1,) * declared.min_rank
                inputs[path] = InputSpec(
                    _KIND_DATATYPES[declared.kind],
                    shape,
                    required=required,
                    max_rank=declared.max_rank,
                    axes=declared.shape,
                )
            else:
                parameters[path] = declared
                if required:
                    required_parameters.add(path)
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "parameter_fields", parameters)
        object.__setattr__(self, "required_parameters", frozenset(required_parameters))
        object.__setattr__(
            self,
            "outputs",
            {spec.name: _with_shape(spec, self.declaration) for spec in self.declaration.outputs},
        )
        object.__setattr__(self, "parameters", _parameters_schema(parameters, self.schema_name))

    @property
    def name(self) -> str:
        return self.declaration.name

    @property
    def schema_name(self) -> str:
        return self.declaration.schema_name

    @property
    def description(self) -> str:
        return f"{self.declaration.summary} (as POST /v1/{self.name})"

    @property
    def include_choices(self) -> frozenset[str]:
        declared = self.declaration.request_schema.fields.get(INCLUDE)
        return frozenset(declared.choices) if isinstance(declared, IncludeList) else frozenset()

    def output_datatype(self, output: OutputSpec, precision: str) -> str:
        if output.datatype == FOLLOWS_PRECISION:
            return "FP32" if precision == "float32" else "FP64"
        return output.datatype

    def metadata_shape(self, output: OutputSpec) -> tuple[int, ...]:
        """The shape the metadata gives ``output`` (each output's is set when the model is made)."""
        shape = self.outputs[output.name].shape
        assert shape is not None
        return shape

    def include_for(self, outputs: frozenset[str]) -> list[str]:
        """The request's ``include`` list that computes ``outputs`` (those not always computed)."""
        choices = self.include_choices
        wanted = {spec.include or spec.name for name, spec in self.outputs.items() if name in outputs}
        return sorted(wanted & choices)

    def body(self, arrays: Mapping[str, np.ndarray], parameters: Mapping[str, Any]) -> dict[str, Any]:
        """The /v1 body the tensors and parameters stand for: each value put at its path."""
        body: dict[str, Any] = {}
        for path, value in (*arrays.items(), *parameters.items()):
            *parents, leaf = path.split(".")
            level = body
            for parent in parents:
                level = level.setdefault(parent, {})
            level[leaf] = value
        return body


def _leaves(schema: Schema, prefix: str = "", required: bool = True) -> Iterator[tuple[str, Any, bool]]:
    """Every field of ``schema`` that holds a value, by path: nested objects are walked into."""
    for name, declared in schema.fields.items():
        path = f"{prefix}{declared.data_key or name}"
        if isinstance(declared, fields.Nested) and isinstance(declared.schema, Schema):
            yield from _leaves(declared.schema, f"{path}.", required and declared.required)
        else:
            yield path, declared, required and declared.required


def _with_shape(spec: OutputSpec, declaration: ModelDeclaration) -> OutputSpec:
    """``spec`` with its metadata shape: the least rank the /v1 response field allows, unless declared."""
    if spec.shape is not None:
        return spec
    answered = declaration.response().fields.get(spec.name)
    if answered is None:
        raise ValueError(f"{declaration.name}: output {spec.name!r} needs a shape (no response field)")
    rank = answered.min_rank if isinstance(answered, Array) else 0
    return replace(spec, shape=(-1,) * rank)


def _parameters_schema(parameters: Mapping[str, fields.Field[Any]], schema_name: str) -> Schema:
    """The request parameters as the contract documents them: each field under its path, and the binary
    tensor data extension's ``binary_data_output`` (answer every output as binary)."""
    documented: dict[str, Any] = {}
    for path, declared in parameters.items():
        documented_field = copy.copy(declared)  # the new schema binds its own copy to itself
        documented_field.data_key = path
        documented[path.replace(".", "_")] = documented_field
    documented[BINARY_DATA_OUTPUT] = StrictBoolean(
        load_default=False, metadata={"description": "Answer every output as binary tensor data."}
    )
    schema: Schema = RequestSchema.from_dict(documented, name=f"{schema_name}Parameters")()
    return schema


MODELS: dict[str, Model] = {name: Model(declared) for name, declared in declared_models().items()}
VERSION = "1"
