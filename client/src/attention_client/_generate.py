"""Writes ``_models.py``, the client's typed methods, from the contract: ``make clients`` (``make openapi``).

    python client/src/attention_client/_generate.py openapi.yaml > client/src/attention_client/_models.py

(Run as a file, not with ``-m``: importing the package imports the module this writes.)

For every ``POST /v1/{model}`` operation of the contract, one method of :class:`SyncModels` and of
:class:`AsyncModels` (``Client`` and ``AsyncClient`` inherit them), named by its operationId in snake case,
with one argument per field of its request schema: the array fields (the contract's array components) are
arrays, the others options checked against their schema before sending. Closed sets become ``Literal``
types, objects ``TypedDict``s, defaults are the contract's, docstrings its descriptions. A result class per
model holds the outputs (the /v2 model's, or the /v1 response's while there is no /v2 model).

How a call travels is derived too: to ``/v2/models/{model}/infer`` as binary tensors when the /v2 model
takes every option the call sets (an option of the same name, or an object's members flattened: ``rotary``
as ``rotary.base``, ``rotary.style``… or ``rotary_base``…), else to ``/v1`` as JSON. A dev tool: it needs
PyYAML (in the dev lock) and ruff to format its output.
"""

from __future__ import annotations

import keyword
import math
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = '''"""The client's model methods and results, generated from openapi.yaml (make clients): don't edit.

Regenerate after the contract changes (``make openapi`` does both); ``tests/client`` fails when this file
is stale.
"""'''

# An option whose absence the service decides from the call itself: precision follows the float inputs on
# /v2 (float32 throughout answers float32), so the client's default is None, not the contract's float64.
DECIDED_BY_THE_SERVICE = frozenset({"precision"})
# How /v2 may name an object option's members as parameters: rotary.base, or rotary_base.
FLATTENED = (".", "_")
# A /v1 null that stands for minus infinity (a hidden score), not for "no number" (NaN).
MINUS_INFINITY = re.compile(r"minus infinity|(masked|hidden) entries are null")
_WIDTH = 110


@dataclass
class Literals:
    """The Literal aliases: one per option name and allowed values, model-prefixed where names clash."""

    by_key: dict[tuple[str, str, tuple[Any, ...]], str] = field(default_factory=dict)
    values: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass
class Model:
    operation_id: str
    camel: str
    method: str
    path: str
    summary: str
    description: str
    request: dict[str, Any]
    response: dict[str, Any]
    result: str
    v2: dict[str, Any] | None


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[_\-\s]+", name) if part)


def _snake(operation_id: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


class Contract:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.schemas: dict[str, Any] = spec["components"]["schemas"]

    def ref(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = self.schemas[node["$ref"].removeprefix("#/components/schemas/")]
        return node

    def ref_name(self, node: dict[str, Any]) -> str:
        return str(node["$ref"]).removeprefix("#/components/schemas/")

    def inline(self, node: Any) -> Any:
        """``node`` with every reference replaced by its schema, without descriptions and titles (defaults
        stay: an object given empty travels on /v2 as a member's default, see _client._flatten)."""
        if isinstance(node, dict):
            if "$ref" in node:
                return self.inline(self.ref(node))
            dropped = ("description", "title")
            return {k: self.inline(v) for k, v in node.items() if k not in dropped}
        if isinstance(node, list):
            return [self.inline(v) for v in node]
        return node

    def models(self) -> Iterator[Model]:
        for path, item in sorted(self.spec["paths"].items()):
            if not path.startswith("/v1/") or "post" not in item:
                continue
            operation = item["post"]
            request = operation["requestBody"]["content"]["application/json"]["schema"]
            response = operation["responses"]["200"]["content"]["application/json"]["schema"]
            name = path.removeprefix("/v1/")
            v2 = self.spec["paths"].get(f"/v2/models/{name}/infer")
            response_name = self.ref_name(response)
            yield Model(
                operation_id=operation["operationId"],
                camel=_camel(operation["operationId"]),
                method=_snake(operation["operationId"]),
                path=path,
                summary=operation.get("summary", ""),
                description=operation.get("description", ""),
                request=self.ref(request),
                response=self.ref(response),
                result=response_name.removesuffix("Response") + "Result",
                v2=self._v2(name, v2) if v2 else None,
            )

    def _v2(self, name: str, item: dict[str, Any]) -> dict[str, Any]:
        request = self.ref(item["post"]["requestBody"]["content"]["application/json"]["schema"])
        parameters = self.ref(request["properties"]["parameters"])["properties"]
        inputs = self.ref(request["properties"]["inputs"]["items"])["properties"]["name"]["enum"]
        outputs = self.ref(request["properties"]["outputs"]["items"])["properties"]["name"]["enum"]
        return {
            "name": name,
            "parameters": list(parameters),
            "inputs": list(inputs),
            "outputs": list(outputs),
        }

    # --- the shape of a field's schema ---

    def without_null(self, node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The schema without its ``null`` alternative, and whether there was one."""
        if "anyOf" in node:
            others = [a for a in node["anyOf"] if a.get("type") != "null"]
            if len(others) == 1 and len(others) < len(node["anyOf"]):
                merged = {k: v for k, v in node.items() if k != "anyOf"}
                return {**merged, **others[0]}, True
        kinds = node.get("type")
        if isinstance(kinds, list) and "null" in kinds:
            rest = [k for k in kinds if k != "null"]
            return {**node, "type": rest[0] if len(rest) == 1 else rest}, True
        return node, False

    def array_component(self, node: dict[str, Any]) -> tuple[str, int, int] | None:
        """(kind, min rank, max rank) when ``node`` is an array field (a reference to an array component)."""
        bare, _ = self.without_null(node)
        if "$ref" not in bare:
            return None
        return self.array_shape(self.ref(bare))

    def array_shape(self, target: dict[str, Any]) -> tuple[str, int, int] | None:
        """(kind, min rank, max rank) of a nest of arrays of one kind of scalar (or its rank variants)."""
        target = self.without_null(self.ref(target))[0]
        shapes = [self.depth(a) for a in target.get("anyOf", [target])]
        known = [shape for shape in shapes if shape is not None]
        if len(known) != len(shapes) or len({kind for kind, _ in known}) != 1:
            return None
        depths = [depth for _, depth in known]
        if max(depths) == 0:
            return None
        return known[0][0], min(depths), max(depths)

    def depth(self, node: dict[str, Any]) -> tuple[str, int] | None:
        """(element kind, nesting) of a scalar or a nest of arrays of one kind of scalar, else None."""
        node = self.ref(node)
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else [k for k in (kinds or []) if k != "null"]
        if kinds == ["array"] and "items" in node:
            inner = self.depth(node["items"])
            return (inner[0], inner[1] + 1) if inner else None
        if len(kinds) == 1 and kinds[0] in ("number", "integer", "boolean"):
            return kinds[0], 0
        return None


# --- writing ---


def _doc(text: str, indent: int) -> list[str]:
    lines: list[str] = []
    for paragraph in text.strip().split("\n\n"):
        lines.extend(
            textwrap.wrap(
                " ".join(paragraph.split()),
                width=_WIDTH - indent,
                break_on_hyphens=False,
                break_long_words=False,
            )
            or [""]
        )
        lines.append("")
    return [(" " * indent + line).rstrip() for line in lines[:-1]]


def _hanging(text: str, first: int, rest: int) -> list[str]:
    """One paragraph wrapped with a hanging indent (an argument's description in the docstring)."""
    return textwrap.wrap(
        " ".join(text.split()),
        width=_WIDTH,
        initial_indent=" " * first,
        subsequent_indent=" " * rest,
        break_on_hyphens=False,
        break_long_words=False,
    )


_SCALARS = {"boolean": "bool", "integer": "int", "number": "float", "string": "str"}
_ARRAYS = {"number": "FloatArray", "integer": "IntArray", "boolean": "BoolArray"}


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')


def _default(value: Any) -> str:
    if isinstance(value, list):
        return "(" + "".join(f"{_default(v)}, " for v in value).rstrip(" ") + ")" if value else "()"
    if isinstance(value, float) and math.isinf(value):
        return "-math.inf" if value < 0 else "math.inf"
    return repr(value)


class Writer:
    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self.models = list(contract.models())
        self.literals = self._literals()
        self.typed_dicts: dict[str, dict[str, Any]] = {}
        self.constants: dict[str, tuple[str, str]] = {}  # name: (annotation, value)

    def _enums(self) -> Iterator[tuple[str, str, tuple[Any, ...]]]:
        """(model, option, values) of every closed set among the options (members of objects too)."""
        for model in self.models:
            for name, node in model.request["properties"].items():
                yield from self._enums_in(model.camel, name, node)

    def _enums_in(
        self, model: str, name: str, node: dict[str, Any]
    ) -> Iterator[tuple[str, str, tuple[Any, ...]]]:
        node = self.contract.without_null(node)[0]
        if "$ref" in node:
            target = self.contract.ref(node)
            if target.get("type") == "object":
                for member, schema in target.get("properties", {}).items():
                    yield from self._enums_in(model, member, schema)
            return
        if "enum" in node and node.get("type") == "string":
            yield model, name, tuple(node["enum"])
        if node.get("type") == "array" and "enum" in node.get("items", {}):
            yield model, name, tuple(node["items"]["enum"])

    def _literals(self) -> Literals:
        found = list(self._enums())
        clashing = {name for _, name, values in found if len({v for _, n, v in found if n == name}) > 1}
        literals = Literals()
        for model, name, values in found:
            alias = _camel(model) + _camel(name) if name in clashing else _camel(name)
            literals.by_key[(model, name, values)] = alias
            literals.values[alias] = values
        return literals

    def _alias(self, model: str, name: str, values: list[Any]) -> str:
        key = (model, name, tuple(values))
        if key in self.literals.by_key:
            return self.literals.by_key[key]
        # A member of an object (Rotary.style), found under the model that holds the object; deeper down
        # (a list of objects), the Literal itself.
        found = [a for (_, n, v), a in self.literals.by_key.items() if (n, v) == key[1:]]
        return found[0] if found else _literal(tuple(values))

    def python_type(self, model: str, name: str, node: dict[str, Any]) -> str:
        """The annotation of an option (without None, which the caller adds when it is nullable)."""
        described = node.get("description")
        node = self.contract.without_null(node)[0]
        if "$ref" in node:
            target = self.contract.ref(node)
            if target.get("type") == "object":
                type_name = self.contract.ref_name(node)
                if type_name not in self.typed_dicts or described:
                    # Its docstring: the component's description, else that of a field holding it.
                    self.typed_dicts[type_name] = {"description": described, **target}
                return type_name
            node = target
        if "anyOf" in node:
            return " | ".join(dict.fromkeys(self.python_type(model, name, a) for a in node["anyOf"]))
        kinds = node.get("type")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
        parts = []
        for kind in kinds:
            if kind == "null":
                parts.append("None")
            elif kind == "string" and "enum" in node:
                parts.append(self._alias(model, name, node["enum"]))
            elif kind == "array":
                items = node.get("items", {})
                if "enum" in items:
                    parts.append(f"Collection[{self._alias(model, name, items['enum'])}]")
                else:
                    item = self.python_type(model, name, items)
                    if self.contract.without_null(items)[1]:
                        item += " | None"
                    parts.append(f"Sequence[{item}]")
            else:
                parts.append(_SCALARS.get(kind, "Any"))
        return " | ".join(dict.fromkeys(parts)) or "Any"

    # --- one model ---

    def arguments(self, model: Model) -> list[dict[str, Any]]:
        """Each request field as an argument: name, annotation, default (or None when required), role."""
        properties: dict[str, Any] = model.request["properties"]
        required = set(model.request.get("required", []))
        arguments = []
        for name, node in properties.items():
            array = self.contract.array_component(node)
            nullable = self.contract.without_null(node)[1]
            argument: dict[str, Any] = {
                "name": name,
                "description": node.get("description", ""),
                "required": name in required,
            }
            if array:
                argument.update(role="tensor", kind=array[0], ranks=array[1:], annotation="ArrayLike")
            elif name == "include":
                argument.update(role="include", annotation=self.python_type(model.camel, name, node))
                if node.get("default"):
                    # A constant typed as the Literal's tuple: mypy types a tuple default as tuple[str].
                    constant = f"{_snake(model.operation_id).upper()}_INCLUDE"
                    item = self._alias(
                        model.camel, name, self.contract.without_null(node)[0]["items"]["enum"]
                    )
                    self.constants[constant] = (f"tuple[{item}, ...]", _default(node["default"]))
            else:
                argument.update(
                    role="option",
                    annotation=self.python_type(model.camel, name, node),
                    schema=self.contract.inline(node),
                )
            if name in required:
                argument["default"] = None
            elif name == "include" and node.get("default"):
                argument["default"] = f"{_snake(model.operation_id).upper()}_INCLUDE"
            elif "default" in node and name not in DECIDED_BY_THE_SERVICE and node["default"] is not None:
                argument["default"] = _default(node["default"])
            else:
                argument["default"] = "None"
                argument["annotation"] += " | None"
            if nullable and argument["default"] not in (None, "None") and argument["role"] == "option":
                pass  # None is still accepted at run time (absent), as the service reads null
            arguments.append(argument)
        return arguments

    def v2_route(self, model: Model, argument: dict[str, Any]) -> tuple[tuple[str, ...], str]:
        """How an option travels on /v2: its parameters, and how it is flattened into them."""
        if model.v2 is None:
            return (), "none"
        parameters: list[str] = model.v2["parameters"]
        name = argument["name"]
        if name in parameters:
            return (name,), "none"
        # An object's members flattened by path: rotary.base (or rotary_base), those the /v2 model takes; a
        # call setting another goes to /v1.
        taken, tensors = self.flattened(model, name, argument["schema"], FLATTENED)
        return (tuple(taken), "object") if taken or tensors else ((), "none")

    def flattened(
        self, model: Model, name: str, schema: dict[str, Any], separators: tuple[str, ...]
    ) -> tuple[list[str], list[tuple[str, str, int, int]]]:
        """The /v2 parameters and input tensors (path, kind, ranks) of an object's members, objects inside
        it included (their paths joined by dots)."""
        assert model.v2 is not None
        schema = self.without_null_inlined(schema)
        parameters: list[str] = []
        tensors: list[tuple[str, str, int, int]] = []
        for member, sub in schema.get("properties", {}).items():
            paths = [f"{name}{separator}{member}" for separator in separators]
            tensor = next((p for p in paths if p in model.v2["inputs"]), None)
            parameter = next((p for p in paths if p in model.v2["parameters"]), None)
            shape = self.contract.array_shape(sub) if tensor else None
            if tensor and shape:
                tensors.append((tensor, *shape))
            elif parameter:
                parameters.append(parameter)
            elif self.without_null_inlined(sub).get("type") == "object":
                inner = self.flattened(model, f"{name}.{member}", sub, (".",))
                parameters += inner[0]
                tensors += inner[1]
        return parameters, tensors

    def v2_tensors(self, model: Model, argument: dict[str, Any]) -> list[tuple[str, str, int, int]]:
        if model.v2 is None or argument["name"] in model.v2["parameters"]:
            return []
        return self.flattened(model, argument["name"], argument["schema"], FLATTENED)[1]

    def without_null_inlined(self, schema: dict[str, Any]) -> dict[str, Any]:
        bare: dict[str, Any] = self.contract.without_null(self.contract.inline(schema))[0]
        return bare

    def outputs(self, model: Model) -> list[dict[str, Any]]:
        properties: dict[str, Any] = model.response.get("properties", {})
        required = set(model.response.get("required", []))
        names = model.v2["outputs"] if model.v2 else list(properties)
        outputs = []
        for name in names:
            node = properties.get(name)
            output: dict[str, Any] = {"name": name, "required": name in required, "description": ""}
            if node is None:
                output.update(kind="any", scalar=False, annotation="NDArray[Any]")
            else:
                output["description"] = node.get("description", "")
                bare, _ = self.contract.without_null(node)
                bare = self.contract.ref(bare) if "$ref" in bare else bare
                kinds = bare.get("type")
                if kinds in ("number", "integer"):
                    output.update(kind=kinds, scalar=True, annotation="float" if kinds == "number" else "int")
                else:
                    shapes = [self.contract.depth(a) for a in bare.get("anyOf", [bare])]
                    leaf = {shape[0] if shape else None for shape in shapes}
                    kind = leaf.pop() if len(leaf) == 1 and None not in leaf else "any"
                    depths = {shape[1] if shape else None for shape in shapes}
                    output.update(
                        kind=kind,
                        scalar=False,
                        annotation=_ARRAYS.get(kind or "", "NDArray[Any]"),
                        depth=depths.pop() if len(depths) == 1 and "$ref" not in node else 0,
                    )
                if MINUS_INFINITY.search(output["description"]):
                    output["null_as"] = "-math.inf"
            outputs.append(output)
        return outputs


def _literal(values: tuple[Any, ...]) -> str:
    return "Literal[" + ", ".join(repr(v) for v in values) + "]"


def render(spec: dict[str, Any]) -> str:
    contract = Contract(spec)
    writer = Writer(contract)
    models = writer.models
    plans = []
    for model in models:
        arguments = writer.arguments(model)
        plans.append((model, arguments, writer.outputs(model)))

    out: list[str] = [HEADER, "", "from __future__ import annotations", ""]
    out += [
        "import math",
        "from collections.abc import Collection, Sequence",
        "from dataclasses import dataclass",
        "from typing import Any, Literal, TypedDict",
        "",
        "from numpy.typing import ArrayLike, NDArray",
        "",
        "from attention_client._results import BoolArray, FloatArray, IntArray",
        "from attention_client._spec import ModelSpec, Option, Output, Tensor",
        "",
    ]
    for alias, values in sorted(writer.literals.values.items()):
        out.append(f"{alias} = {_literal(values)}")
    out.append("")

    out.append("")
    for name, (annotation, value) in sorted(writer.constants.items()):
        out.append(f"{name}: {annotation} = {value}")
    out.append("")

    # TypedDicts of the objects (collected while typing the arguments).
    for name, schema in sorted(writer.typed_dicts.items()):
        out += ["", f"class {name}(TypedDict, total=False):"]
        out += [*_quoted(schema.get("description") or f"The members of {name}.", 4), ""]
        for member, node in schema.get("properties", {}).items():
            annotation = writer.python_type(name, member, node)
            if contract.without_null(node)[1]:
                annotation += " | None"
            out.append(f"    {member}: {annotation}")
            if node.get("description"):
                out += _quoted(node["description"], 4)
        out.append("")

    for model, _, outputs in plans:
        out += ["", "@dataclass(frozen=True, kw_only=True)", f"class {model.result}:"]
        answered = f"/v2 model {model.v2['name']}" if model.v2 else f"POST {model.path}"
        out += [f'    """What {model.method} answers (the outputs of the {answered})."""', ""]
        for output in outputs:
            if output["required"]:
                out.append(f"    {output['name']}: {output['annotation']}")
            else:
                out.append(f"    {output['name']}: {output['annotation']} | None = None")
            if output["description"]:
                out += _quoted(output["description"], 4)
        out.append("")

    for model, arguments, outputs in plans:
        constant = _snake(model.operation_id).upper()
        out += ["", f"{constant} = ModelSpec(", f"    operation_id={model.operation_id!r},"]
        out.append(f"    v1_path={model.path!r},")
        out.append(f"    v2_model={model.v2['name'] if model.v2 else None!r},")
        out.append("    tensors=(")
        for a in arguments:
            if a["role"] == "tensor":
                low, high = a["ranks"]
                on_v2 = model.v2 is not None and a["name"] in model.v2["inputs"]
                described = f"{a['name']!r}, {a['kind']!r}, {low}, {high}, required={a['required']}"
                described += "" if on_v2 else ", v2=False"
                out.append(f"        Tensor({described}),")
        out.append("    ),")
        out.append("    options=(")
        for a in arguments:
            if a["role"] == "option":
                parameters, flatten = writer.v2_route(model, a)
                described = f"{a['name']!r}, {a['schema']!r}, v2={parameters!r}, flatten={flatten!r}"
                nested = writer.v2_tensors(model, a)
                if nested:
                    described += (
                        ", tensors=("
                        + "".join(
                            f"Tensor({path!r}, {kind!r}, {low}, {high}, required=False), "
                            for path, kind, low, high in nested
                        )
                        + ")"
                    )
                out.append(f"        Option({described}),")
        out.append("    ),")
        include = next((a for a in arguments if a["role"] == "include"), None)
        if include is not None:
            node = model.request["properties"]["include"]
            allowed = contract.without_null(node)[0]["items"]["enum"]
            out.append(f"    include={tuple(allowed)!r},")
            out.append(f"    include_v2={model.v2 is not None and 'include' in model.v2['parameters']},")
        else:
            out.append("    include=None,")
        out.append("    outputs=(")
        for o in outputs:
            extra = ""
            if o["required"]:
                extra += ", required=True"
            if o.get("scalar"):
                extra += ", scalar=True"
            if o.get("null_as"):
                extra += f", null_as={o['null_as']}"
            if (o.get("depth") or 0) > 1:
                extra += f", depth={o['depth']}"
            out.append(f"        Output({o['name']!r}, {o['kind']!r}{extra}),")
        out.append("    ),")
        out.append(f"    result={model.result},")
        out.append(")")
        out.append("")

    for sync in (True, False):
        base = "SyncModels" if sync else "AsyncModels"
        out += ["", f"class {base}:"]
        kind = "" if sync else "asyncio "
        out.append(f'    """One method per model of the contract ({kind}calls); the transport: ``_call``."""')
        out.append("")
        if sync:
            out.append("    def _call(self, spec: ModelSpec[Any], arguments: dict[str, Any]) -> Any:")
        else:
            out.append("    async def _call(self, spec: ModelSpec[Any], arguments: dict[str, Any]) -> Any:")
        out.append("        raise NotImplementedError")
        for model, arguments, _ in plans:
            out += ["", *_method(model, arguments, sync=sync, writer=writer)]
    out.append("")
    out.append("MODELS: tuple[ModelSpec[Any], ...] = (")
    for model, _, _ in plans:
        out.append(f"    {_snake(model.operation_id).upper()},")
    out.append(")")
    out.append("")
    all_names = sorted(
        ["AsyncModels", "MODELS", "SyncModels"]
        + [m.result for m in models]
        + list(writer.literals.values)
        + list(writer.typed_dicts),
        key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n),  # as ruff sorts __all__
    )
    out.append("__all__ = [" + ", ".join(repr(n) for n in all_names) + "]")
    return "\n".join(out) + "\n"


def _quoted(description: str, indent: int) -> list[str]:
    """A docstring of one paragraph, its quotes counted in the width."""
    lines = textwrap.wrap(
        " ".join(_escape(description).split()) + '"""',
        width=_WIDTH,
        initial_indent=" " * indent + '"""',
        subsequent_indent=" " * indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
    return lines


def _method(model: Model, arguments: list[dict[str, Any]], *, sync: bool, writer: Writer) -> list[str]:
    positional = [a for a in arguments if a["role"] == "tensor" and a["required"]]
    keywords = [a for a in arguments if a not in positional]
    keywords.sort(key=lambda a: not a["required"])  # required options first (stable otherwise)
    parameters = ["self"] + [f"{_safe(a['name'])}: {a['annotation']}" for a in positional] + ["*"]
    for a in keywords:
        if a["default"] is None:
            parameters.append(f"{_safe(a['name'])}: {a['annotation']}")
        else:
            parameters.append(f"{_safe(a['name'])}: {a['annotation']} = {a['default']}")
    head = "    def" if sync else "    async def"
    lines = [f"{head} {model.method}(", *(f"        {p}," for p in parameters), f"    ) -> {model.result}:"]
    doc = [model.summary]
    if model.description:
        doc.append(model.description)
    unrouted = _unrouted(model, arguments, writer)
    if model.v2 is None:
        doc.append(f"Sent to POST {model.path} as JSON (there is no /v2 model {model.path[4:]} yet).")
    elif unrouted:
        doc.append(
            f"Sent to /v2/models/{model.v2['name']}/infer as binary tensors; a call that sets "
            f"{', '.join(unrouted)} goes to POST {model.path} as JSON (the /v2 model does not take "
            f"{'it' if len(unrouted) == 1 else 'them'} yet)."
        )
    else:
        doc.append(f"Sent to /v2/models/{model.v2['name']}/infer as binary tensors.")
    body = [_escape(text) for text in doc]
    lines.append('        """' + _doc(body[0], 8)[0].lstrip())
    lines += _doc(body[0], 8)[1:]
    for text in body[1:]:
        lines += ["", *_doc(text, 8)]
    lines += ["", "        Args:"]
    for a in positional + keywords:
        text = a["description"] or "(no description)"
        if a["name"] in DECIDED_BY_THE_SERVICE:
            text += " None: float32 when every float input is float32, else float64."
        lines += _hanging(_escape(f"{a['name']}: {text}"), 12, 16)
    lines += ["", f"        Returns a :class:`{model.result}`; raises :class:`InvalidInput` for an argument"]
    lines += ["        the service would refuse, :class:`ApiError` for a refusal or a failed call."]
    lines.append('        """')
    call = "self._call" if sync else "await self._call"
    constant = _snake(model.operation_id).upper()
    lines.append(f"        result: {model.result} = {call}(")
    lines.append(f"            {constant},")
    lines.append("            {")
    for a in arguments:
        lines.append(f"                {a['name']!r}: {_safe(a['name'])},")
    lines.append("            },")
    lines.append("        )")
    lines.append("        return result")
    return lines


def _unrouted(model: Model, arguments: list[dict[str, Any]], writer: Writer) -> list[str]:
    """The arguments (or members of one) that the /v2 model does not take."""
    if model.v2 is None:
        return []
    missing = [a["name"] for a in arguments if a["role"] == "tensor" and a["name"] not in model.v2["inputs"]]
    for a in arguments:
        if a["role"] != "option":
            continue
        parameters, flatten = writer.v2_route(model, a)
        if not parameters:
            missing.append(a["name"])
        elif flatten == "object":
            schema = writer.without_null_inlined(a["schema"])
            taken = {p[len(a["name"]) + 1 :] for p in parameters}
            taken |= {path[len(a["name"]) + 1 :] for path, *_ in writer.v2_tensors(model, a)}
            missing += [
                f"{a['name']}.{m}"
                for m in schema["properties"]
                if m not in taken and not any(t.startswith(f"{m}.") for t in taken)
            ]
    return missing


def _safe(name: str) -> str:
    return f"{name}_" if keyword.iskeyword(name) else name


def format_source(source: str) -> str:
    """``source`` as ruff formats it, with the project's settings (the one formatter of the repository)."""
    ruff = Path(sys.executable).parent / "ruff"
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(root / "client/src/attention_client/_models.py"), "-"],
        input=source,
        capture_output=True,
        text=True,
        cwd=root,
        check=True,
        timeout=60,
    )
    return done.stdout


def generate(contract_path: Path) -> str:
    import yaml  # a dev tool's dependency, not the client's

    spec = yaml.safe_load(contract_path.read_text())
    return format_source(render(spec))


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m attention_client._generate openapi.yaml > _models.py")
    sys.stdout.write(generate(Path(argv[1])))


if __name__ == "__main__":
    main(sys.argv)
