"""What the generated module (``_models.py``) states about each model, read by the hand-written transport.

Each record is written by the generator from the contract (``openapi.yaml``): a model's arrays (its input
tensors), its options (with their JSON schema, for the checks), the outputs it may ask for (``include``)
and the result it answers. Nothing here knows a model by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

ResultT = TypeVar("ResultT")

Kind = Literal["number", "integer", "boolean"]
OutputKind = Literal["number", "integer", "boolean", "any"]


@dataclass(frozen=True)
class Tensor:
    """An array argument: its element kind, the ranks the contract allows, and whether it is an input tensor
    of the /v2 model (else a call that sets it goes to /v1)."""

    name: str
    kind: Kind
    min_rank: int
    max_rank: int
    required: bool
    v2: bool = True


@dataclass(frozen=True)
class Option:
    """A scalar, list or object argument, checked against ``schema`` (the contract's, references inlined).

    ``v2`` is how the option travels on /v2: one request parameter of the same name (``(name,)``), an
    object's members flattened by their path (``rotary.base``, or ``rotary_base``; objects inside objects
    too: ``attention.rotary.base``), those the /v2 model takes as parameters, or none (``()``: the /v2 model
    does not take it yet). ``tensors`` are the object's array members that /v2 takes as input tensors
    (``attention.w_q``). A call that sets what /v2 does not take goes to /v1.
    """

    name: str
    schema: dict[str, Any]
    v2: tuple[str, ...]
    flatten: Literal["none", "object"] = "none"
    tensors: tuple[Tensor, ...] = ()  # an object's array members that /v2 takes as input tensors, by path


@dataclass(frozen=True)
class Output:
    """A member of the result: how to read it from the answer.

    ``required``: every answer holds it (an answer without it is malformed);
    ``scalar``: a Python float or int rather than an array; ``null_as``: what a /v1 JSON ``null`` becomes
    (-inf for a hidden score, NaN otherwise); ``depth``: the nesting of a fixed-depth list (``empty_rows``),
    so that an empty one keeps its rank.
    """

    name: str
    kind: OutputKind
    required: bool = False  # in every answer (else only when asked for, or when it applies)
    scalar: bool = False
    null_as: float = float("nan")
    depth: int = 0


@dataclass(frozen=True)
class ModelSpec(Generic[ResultT]):
    """One model: where its calls go and what they hold.

    ``v2_model`` is None while the model has no /v2 counterpart (its calls go to ``v1_path`` as JSON).
    ``include`` lists the values of the model's ``include`` option (the outputs answered only on request),
    None when it has none; ``include_v2`` says whether the /v2 model takes it as a parameter (a call that
    sets it goes to /v1 otherwise).
    """

    operation_id: str
    v1_path: str
    v2_model: str | None
    tensors: tuple[Tensor, ...]
    options: tuple[Option, ...]
    include: tuple[str, ...] | None
    outputs: tuple[Output, ...]
    result: type[ResultT]
    include_v2: bool = False
