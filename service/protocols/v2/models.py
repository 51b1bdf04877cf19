"""The four models of /v2, named like the /v1 endpoints: their tensors, parameters and outputs.

Each model maps the protocol's pieces onto the same typed request /v1 builds: input tensors become its
arrays, request parameters its options (read by the /v1 schema's own fields, so names, types, defaults
and messages are the same), and the requested outputs its ``include``. Outputs are named like the /v1
response fields; per-row scalars are tensors of the batch shape.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

import numpy as np
from marshmallow import Schema, fields

from service.kernels import LikelihoodResult
from service.protocols.declarations.arrays import Array
from service.protocols.declarations.attention import AttentionRequestSchema
from service.protocols.declarations.fields import StrictBoolean
from service.protocols.declarations.likelihood import LikelihoodRequestSchema
from service.protocols.declarations.sample import SampleRequestSchema
from service.protocols.declarations.schemas import RequestSchema
from service.protocols.declarations.softmax import SoftmaxRequestSchema
from service.protocols.v2.tensors import InputSpec
from service.requests import (
    AttentionOutput,
    AttentionRequest,
    LikelihoodRequest,
    SampleRequest,
    SoftmaxOutput,
    SoftmaxRequest,
)

BINARY_DATA_OUTPUT = "binary_data_output"
FLOAT = ("FP64", "FP32")
INTEGER = ("INT64", "INT32")
BOOL = ("BOOL",)

# "FLOAT" in an output's datatype: FP64 or FP32, following the request's precision.
FOLLOWS_PRECISION = "FLOAT"

Request = AttentionRequest | SoftmaxRequest | LikelihoodRequest | SampleRequest


@dataclass(frozen=True)
class OutputSpec:
    """One output tensor: how to read it from the kernel's result, and whether it is answered by default."""

    name: str
    datatype: str  # FOLLOWS_PRECISION, INT64, BOOL or FP64
    shape: tuple[int, ...]  # for the metadata: -1 for each variable dimension
    read: Callable[[Any], np.ndarray | None]
    default: bool = True  # answered when the request lists no outputs, if available
    available: Callable[[Any], bool] = lambda request: True  # for this typed request (top_logprobs > 0)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per model
class Model:
    name: str
    schema_name: str  # the contract's component names start with it
    description: str
    declaration: type[Schema]  # the request's one declaration (its /v1 schema): tensors and parameters
    input_shapes: Mapping[
        str, tuple[int, ...]
    ]  # each input's shape in the metadata: -1 per variable dimension
    outputs: Mapping[str, OutputSpec]
    build: Callable[[dict[str, Any], dict[str, Any], frozenset[str]], Request]

    inputs: Mapping[str, InputSpec] = field(init=False)
    parameters: Schema = field(init=False)

    def __post_init__(self) -> None:
        # Frozen: each derived once, here.
        object.__setattr__(self, "inputs", input_tensors(self.declaration, self.input_shapes))
        object.__setattr__(
            self, "parameters", parameters_schema(self.declaration, f"{self.schema_name}Parameters")
        )

    def output_datatype(self, output: OutputSpec, precision: str) -> str:
        if output.datatype == FOLLOWS_PRECISION:
            return "FP32" if precision == "float32" else "FP64"
        return output.datatype


_KIND_DATATYPES = {"number": FLOAT, "integer": INTEGER, "boolean": BOOL}


def input_tensors(declaration: type[Schema], shapes: Mapping[str, tuple[int, ...]]) -> dict[str, InputSpec]:
    """The input tensors of a model: the array fields of its request's declaration, each taking the
    datatypes of its element kind and required as the field is; ``shapes`` (the metadata's, in its order)
    must name each array field."""
    arrays = {name: f for name, f in declaration().fields.items() if isinstance(f, Array)}
    if set(shapes) != set(arrays):
        raise ValueError(f"{declaration.__name__}: shapes for {sorted(shapes)}, arrays {sorted(arrays)}")
    return {
        name: InputSpec(_KIND_DATATYPES[arrays[name].kind], shape, required=arrays[name].required)
        for name, shape in shapes.items()
    }


def parameters_schema(request_schema: type[Schema], name: str) -> Schema:
    """The request parameters of a model: the scalar fields of its request's declaration (numbers, flags,
    names), with the same names, types, rules and reading of ``null``. The array fields are the model's
    input tensors; lists and objects (``include``, ``window``, ``rotary``) are not the protocol's scalar
    parameters (``include`` is the requested outputs).

    Beside them, the binary tensor data extension's ``binary_data_output`` (answer every output as binary).
    """
    options: dict[str, Any] = {
        field_name: copy.copy(field)  # the new schema binds its own copy to itself
        for field_name, field in request_schema().fields.items()
        if not isinstance(field, Array | fields.List | fields.Nested)
    }
    options[BINARY_DATA_OUTPUT] = StrictBoolean(
        load_default=False, metadata={"description": "Answer every output as binary tensor data."}
    )
    # A RequestSchema, as /v1's: unknown parameters are refused and null means "absent" (the default).
    schema: Schema = RequestSchema.from_dict(options, name=name)()
    return schema


def _outputs(*specs: OutputSpec) -> dict[str, OutputSpec]:
    return {spec.name: spec for spec in specs}


def _build_attention(
    arrays: dict[str, Any], options: dict[str, Any], outputs: frozenset[str]
) -> AttentionRequest:
    include: frozenset[AttentionOutput] = frozenset(n for n in get_args(AttentionOutput) if n in outputs)
    return AttentionRequest(**arrays, **options, include=include)


def _build_softmax(
    arrays: dict[str, Any], options: dict[str, Any], outputs: frozenset[str]
) -> SoftmaxRequest:
    include: frozenset[SoftmaxOutput] = frozenset(n for n in get_args(SoftmaxOutput) if n in outputs)
    return SoftmaxRequest(**arrays, **options, include=include)


def _build_likelihood(
    arrays: dict[str, Any], options: dict[str, Any], outputs: frozenset[str]
) -> LikelihoodRequest:
    return LikelihoodRequest(**arrays, **options)


def _scalar(value: float) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


ATTENTION = Model(
    name="attention",
    schema_name="Attention",
    description="Masked scaled dot-product attention (as POST /v1/attention).",
    input_shapes={
        "query": (-1, -1),
        "key": (-1, -1),
        "value": (-1, -1),
        "mask": (-1, -1),
        "bias": (-1, -1),
        "alibi_slopes": (-1,),
    },
    declaration=AttentionRequestSchema,
    outputs=_outputs(
        OutputSpec("output", FOLLOWS_PRECISION, (-1, -1), lambda r: r.output),
        OutputSpec("weights", FOLLOWS_PRECISION, (-1, -1), lambda r: r.weights),
        OutputSpec("scores", FOLLOWS_PRECISION, (-1, -1), lambda r: r.scores, default=False),
        OutputSpec("logsumexp", FOLLOWS_PRECISION, (-1,), lambda r: r.logsumexp, default=False),
        OutputSpec("scale", "FP64", (), lambda r: _scalar(r.scale)),
        OutputSpec("empty_rows", "INT64", (-1, -1), lambda r: r.empty_rows),
    ),
    build=_build_attention,
)

SOFTMAX = Model(
    name="softmax",
    schema_name="Softmax",
    description="Softmax with temperature, mask, top-k and top-p (as POST /v1/softmax).",
    input_shapes={"logits": (-1, -1), "mask": (-1, -1)},
    declaration=SoftmaxRequestSchema,
    outputs=_outputs(
        OutputSpec("probabilities", FOLLOWS_PRECISION, (-1, -1), lambda r: r.probabilities),
        OutputSpec(
            "log_probabilities", FOLLOWS_PRECISION, (-1, -1), lambda r: r.log_probabilities, default=False
        ),
        OutputSpec("entropy", FOLLOWS_PRECISION, (-1,), lambda r: r.entropy),
        OutputSpec("argmax", "INT64", (-1,), lambda r: r.argmax),
        OutputSpec("temperature", "FP64", (), lambda r: _scalar(r.temperature)),
    ),
    build=_build_softmax,
)


def _top_tokens(result: LikelihoodResult) -> np.ndarray | None:
    return result.top_ids


def _lists_top(request: LikelihoodRequest) -> bool:
    """top_logprobs and top_tokens exist when the top_logprobs parameter asks for some (as in /v1)."""
    return request.top_logprobs > 0


LOG_LIKELIHOOD = Model(
    name="log-likelihood",
    schema_name="LogLikelihood",
    description="Per-token log-probabilities and per-sequence log-likelihood (as POST /v1/log-likelihood).",
    input_shapes={"logits": (-1, -1, -1), "targets": (-1, -1)},
    declaration=LikelihoodRequestSchema,
    outputs=_outputs(
        OutputSpec("token_logprobs", FOLLOWS_PRECISION, (-1, -1), lambda r: r.token_logprobs),
        OutputSpec("ranks", "INT64", (-1, -1), lambda r: r.ranks),
        OutputSpec("log_likelihood", FOLLOWS_PRECISION, (-1,), lambda r: r.log_likelihood),
        OutputSpec("num_tokens", "INT64", (-1,), lambda r: r.num_tokens),
        OutputSpec("mean_nll", FOLLOWS_PRECISION, (-1,), lambda r: r.mean_nll),
        OutputSpec("perplexity", FOLLOWS_PRECISION, (-1,), lambda r: r.perplexity),
        OutputSpec("is_greedy", "BOOL", (-1,), lambda r: r.is_greedy),
        OutputSpec(
            "top_logprobs", FOLLOWS_PRECISION, (-1, -1, -1), lambda r: r.top_values, available=_lists_top
        ),
        OutputSpec("top_tokens", "INT64", (-1, -1, -1), _top_tokens, available=_lists_top),
    ),
    build=_build_likelihood,
)


def _build_sample(arrays: dict[str, Any], options: dict[str, Any], outputs: frozenset[str]) -> SampleRequest:
    return SampleRequest(**arrays, **options)


SAMPLE = Model(
    name="sample",
    schema_name="Sample",
    description="Seeded draws after temperature, top-k, top-p and min-p (as POST /v1/sample).",
    input_shapes={"logits": (-1, -1), "mask": (-1, -1)},
    declaration=SampleRequestSchema,
    outputs=_outputs(
        OutputSpec("tokens", "INT64", (-1, -1), lambda r: r.tokens),
        OutputSpec("logprobs", "FP64", (-1, -1), lambda r: r.logprobs),
        OutputSpec("seed", "INT64", (), lambda r: np.asarray(r.seed, dtype=np.int64)),
    ),
    build=_build_sample,
)

MODELS: dict[str, Model] = {model.name: model for model in (ATTENTION, SOFTMAX, LOG_LIKELIHOOD, SAMPLE)}
VERSION = "1"
