"""A model, declared once: what both codecs, the contract and the clients derive their pieces from.

Each declaration module of this package ends with one ``MODEL = ModelDeclaration(...)``: the request's
schema (whose ``post_load`` makes the typed request), the /v1 answer (its schema and how it is built from
the kernel's result), the answer's tensors for /v2, and the worked example the contract shows. From it:

- /v1 routes ``POST /v1/<name>`` (service.protocols.v1.views);
- /v2 serves the model ``<name>``: its input tensors are the schema's array fields, its parameters the
  other fields, both by their dotted path inside nested objects (``rotary.base``, ``attention.w_q``)
  (service.protocols.v2.models);
- the contract's operations, schemas and examples (service.site.spec), and from the contract the clients.

:func:`declared_models` finds the declarations by module, so a new model is one new module here.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from marshmallow import Schema

# "FLOAT" in an output's datatype: FP64 or FP32, following the request's precision.
FOLLOWS_PRECISION = "FLOAT"


@dataclass(frozen=True)
class OutputSpec:
    """One tensor of the answer on /v2: how to read it from the kernel's result, and when it is answered.

    ``include`` is the value of the request's ``include`` list that asks for it (by default the output's
    own name when that is one of the list's choices; an output that is not is always computed).
    """

    name: str
    datatype: str  # FOLLOWS_PRECISION, INT64, BOOL or FP64
    read: Callable[[Any], np.ndarray | None]
    # For the metadata, -1 for each variable dimension: by default the least rank the response schema's
    # field of this name allows (a scalar for a number field).
    shape: tuple[int, ...] | None = None
    default: bool = True  # answered when the request lists no outputs, if available
    available: Callable[[Any], bool] = lambda request: True  # for this typed request (top_logprobs > 0)
    unavailable: str = (
        ""  # why it is not, when asked for: "needs the top_logprobs parameter to be at least 1"
    )
    include: str | None = None


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one object per model
class ModelDeclaration:
    """One model: ``POST /v1/<name>`` and the /v2 model ``<name>``.

    ``summary`` and ``description`` document the operation (on both protocols); ``topic`` is the /v1
    tag's one line. ``answer(result, request)`` is the /v1 answer body built from the kernel's result and
    the typed request; ``outputs`` are the same answer as /v2 tensors.
    """

    name: str
    topic: str
    summary: str
    request: type[Schema]
    response: type[Schema]
    answer: Callable[[Any, Any], dict[str, Any]]
    outputs: tuple[OutputSpec, ...]
    example: Mapping[str, Any]
    description: str = ""
    request_schema: Schema = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # One instance per model, built once: marshmallow schemas are reusable and loading is thread-safe.
        object.__setattr__(self, "request_schema", self.request())

    @property
    def operation_id(self) -> str:
        """``multi-head-attention`` → ``multiHeadAttention``: the contract's (and the JS client's) name."""
        first, *rest = self.name.split("-")
        return first + "".join(word.capitalize() for word in rest)

    @property
    def schema_name(self) -> str:
        """``log-likelihood`` → ``LogLikelihood``: the prefix of the model's /v2 component names."""
        return "".join(word.capitalize() for word in self.name.split("-"))

    @property
    def route_name(self) -> str:
        """``log-likelihood`` → ``log_likelihood``: the Flask blueprint and the contract's tag."""
        return self.name.replace("-", "_")


@functools.cache
def declared_models() -> dict[str, ModelDeclaration]:
    """Every model declared in this package (a module's ``MODEL``), by name, in the order of the names."""
    from service.protocols import declarations

    found: list[ModelDeclaration] = []
    for info in pkgutil.iter_modules(declarations.__path__):
        declared = getattr(importlib.import_module(f"{declarations.__name__}.{info.name}"), "MODEL", None)
        if isinstance(declared, ModelDeclaration):
            found.append(declared)
    return {model.name: model for model in sorted(found, key=lambda model: model.name)}
