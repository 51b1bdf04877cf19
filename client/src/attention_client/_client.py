"""``Client`` and ``AsyncClient``: the transport under the generated model methods, and the probes.

The model methods (``attention``, ``softmax``, …) are generated from the contract into ``_models.py``;
each hands its arguments and its model's record (:class:`ModelSpec`) to ``_call`` here, which checks every
argument, frames the call (binary tensors on /v2, or JSON on /v1 for what /v2 does not take yet), sends it
and reads the answer into the model's result class.

Every call computes a pure function of its inputs, so sending one again is safe. The transport retries a
connection that could not be made (``retries`` times). Of the answers, only an overloaded service's
refusal is retried: a 503 or 429 whose ``Retry-After`` asks for a wait of at most ``most_retry_wait``
seconds is sent again after that wait, ``overload_retries`` times at most (the service sheds load with
such answers, refused before any computing, so that clients come back later rather than queue); any other
answer, and one that asks for a longer wait, raises at once (its :attr:`ApiError.retry_after` says when).
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
import numpy as np

from attention_client._checks import Checked, check_include, check_option, check_tensor
from attention_client._errors import (
    ConnectionFailed,
    InvalidInput,
    MalformedAnswerError,
    Timeout,
    TransportError,
)
from attention_client._models import AsyncModels, SyncModels
from attention_client._protocol import (
    Call,
    Outputs,
    error_from,
    infer_call,
    json_default,
    json_elements,
    json_nesting,
    malformed_answer,
    no_json_constant,
    read_result,
    retry_after_seconds,
)
from attention_client._spec import ModelSpec, Option, Output, ResultT

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_RETRIES = 2
DEFAULT_OVERLOAD_RETRIES = 2
DEFAULT_MOST_RETRY_WAIT_SECONDS = 10.0
# The refusals of an overloaded service (503 Service Unavailable, 429 Too Many Requests): with a Retry-After,
# sent again once it has passed.
OVERLOADED_STATUSES = frozenset({429, 503})
# Up to this share of the Retry-After is waited on top of it, at random: clients refused at the same moment
# are told the same whole second, and would otherwise all come back together.
RETRY_JITTER = 0.2

Route = Literal["v1", "v2"]
# The alphabet of the service's model names (multi-head-attention): nothing a URL path reads otherwise.
MODEL_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
NOT_MODEL_NAMES = frozenset({"stats"})  # /v2/models/stats: the statistics of every model


@dataclass(frozen=True)
class Prepared:
    """A checked call, framed for its route."""

    route: Route
    call: Call
    precision: str | None  # the float type the /v1 answer's numbers are read into


def prepare(spec: ModelSpec[Any], arguments: Mapping[str, Any]) -> Prepared:
    """Check every argument (:class:`InvalidInput` naming the first that the service would refuse) and frame
    the call: /v2 binary tensors when the /v2 model takes every option set, else /v1 JSON."""
    tensors: list[Checked] = []
    for tensor in spec.tensors:
        value = arguments.get(tensor.name)
        if value is None:
            if tensor.required:
                raise InvalidInput(tensor.name, "is required")
            continue
        tensors.append(check_tensor(tensor, value))
    options: dict[str, tuple[Option, Any]] = {}
    for option in spec.options:
        fitted = check_option(option, arguments.get(option.name))
        if fitted is not None:
            options[option.name] = (option, fitted)
    include = None
    if spec.include is not None and arguments.get("include") is not None:
        include = check_include(spec.operation_id, spec.include, arguments["include"])
    on_v2 = {tensor.name for tensor in spec.tensors if tensor.v2}
    flat = {name: _flatten(option, value) for name, (option, value) in options.items()}
    if (
        spec.v2_model is not None
        and all(name in on_v2 for name, _, _ in tensors)
        and all(taken is not None for taken in flat.values())
        and (include is None or spec.include_v2)
    ):
        parameters: dict[str, Any] = {}
        for option, _ in options.values():
            taken = flat[option.name]
            assert taken is not None  # (checked above)
            parameters.update(taken[0])
            tensors += [check_tensor(t, taken[1][t.name]) for t in option.tensors if t.name in taken[1]]
        if include is not None:
            # /v2 takes /v1's include as a parameter: it answers what /v1 would, without listing outputs (an
            # include need not be an output's name: positional-encoding's "tables" are cos and sin).
            parameters["include"] = include
        return Prepared("v2", infer_call(spec.v2_model, tensors, parameters, None), None)
    return _v1_call(spec, tensors, options, include)


Flattened = tuple[dict[str, Any], dict[str, Any]]  # /v2 parameters and input tensors, by name


def _flatten(option: Option, value: Any) -> Flattened | None:
    """How ``value`` of ``option`` travels on /v2, or None when /v2 does not take it (or one of its
    members): an object's members by path (rotary.base, attention.w_q), each a parameter or a tensor.

    An object given without members (``rotary={}``, or only None members, which the checks drop) means "on,
    with its defaults", while no ``rotary.*`` parameter means no rotary on /v2: it travels as its first
    member that the contract gives a default (``rotary.base``), else the call goes to /v1, which reads ``{}``.
    """
    if option.flatten != "object":
        return ({option.v2[0]: value}, {}) if option.v2 else None
    # rotary_base is the path rotary.base too
    parameters = {
        (f"{option.name}.{p[len(option.name) + 1 :]}" if p.startswith(f"{option.name}_") else p): p
        for p in option.v2
    }
    tensors = {tensor.name for tensor in option.tensors}
    flat: Flattened = ({}, {})

    def walk(prefix: str, members: Mapping[str, Any], schema: Mapping[str, Any]) -> bool:
        properties = _object_properties(schema)
        if not members:  # (see the docstring)
            for member, member_schema in properties.items():
                path = f"{prefix}.{member}"
                if path in parameters and "default" in member_schema:
                    flat[0][parameters[path]] = member_schema["default"]
                    return True
            return False
        for member, item in members.items():
            path = f"{prefix}.{member}"
            if path in tensors:
                flat[1][path] = item
            elif path in parameters:
                flat[0][parameters[path]] = item
            elif not (isinstance(item, Mapping) and walk(path, item, properties.get(member, {}))):
                return False
        return True

    return flat if walk(option.name, value, option.schema) else None


def _object_properties(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The members of an object ``schema`` (the contract's, references inlined), or of its object branch
    when it may also be null (``anyOf: [{type: object, …}, {type: null}]``)."""
    if "properties" in schema:
        properties: Mapping[str, Any] = schema["properties"]
        return properties
    for branch in schema.get("anyOf", ()):
        if "properties" in branch:
            return _object_properties(branch)
    return {}


def _v1_call(
    spec: ModelSpec[Any],
    tensors: list[Checked],
    options: dict[str, tuple[Option, Any]],
    include: list[str] | None,
) -> Prepared:
    body: dict[str, Any] = {name: array.tolist() for name, array, _ in tensors}
    body.update({name: value for name, (_, value) in options.items()})
    if include is not None:
        body["include"] = include
    precision = body.get("precision")
    floats = [datatype for _, _, datatype in tensors if datatype.startswith("FP")]
    if precision is None and any(option.name == "precision" for option in spec.options):
        # As /v2 decides it: float32 throughout is answered in float32.
        precision = "float32" if floats and all(d == "FP32" for d in floats) else "float64"
        body["precision"] = precision
    content = json.dumps(body, separators=(",", ":"), allow_nan=False, default=json_default).encode()
    call = Call(path=spec.v1_path, body=content, headers={"Content-Type": "application/json"})
    return Prepared("v1", call, precision)


def finish(
    spec: ModelSpec[ResultT], prepared: Prepared, status: int, headers: Mapping[str, str], body: bytes
) -> ResultT:
    """The answer as the model's result, or the :class:`ApiError` it is."""
    if prepared.route == "v2":
        return read_result(status, headers, body, lambda outputs: _build(spec, outputs))
    return read_result(
        status,
        headers,
        body,
        lambda outputs: _build(spec, outputs),
        read=lambda _status, _headers, answer: _v1_outputs(spec, answer, prepared.precision),
    )


def _build(spec: ModelSpec[ResultT], outputs: Outputs) -> ResultT:
    members: dict[str, Any] = {}
    for output in spec.outputs:
        value = outputs.get(output.name)
        if value is None and output.required:
            raise KeyError(f"the answer has no {output.name!r}")
        if value is not None and output.scalar:
            members[output.name] = float(value) if output.kind == "number" else int(value)
        else:
            members[output.name] = value
    return spec.result(**members)


def _v1_outputs(spec: ModelSpec[Any], body: bytes, precision: str | None) -> Outputs:
    """The arrays of a /v1 JSON answer: null as -inf (a hidden score) or NaN, or 0 in integer arrays (as the
    binary /v2 answers write them)."""
    answer = json.loads(body, parse_constant=no_json_constant)
    if not isinstance(answer, dict):
        raise TypeError(f"the answer is a JSON {type(answer).__name__}, not an object")
    outputs: Outputs = {}
    for output in spec.outputs:
        value = answer.get(output.name)
        if value is not None:
            outputs[output.name] = _array(output, value, precision)
    return outputs


def _array(output: Output, value: Any, precision: str | None) -> np.ndarray[Any, Any]:
    """A /v1 member as its array, each element of the output's JSON kind (ValueError otherwise)."""
    if output.kind == "any":
        array = np.asarray(value)
    else:
        nesting, elements = json_nesting(value)
        if output.kind == "number":
            dtype = np.dtype(np.float32 if precision == "float32" else np.float64)
            null: float | None = output.null_as  # the service writes null, never NaN
        elif output.kind == "integer":
            dtype, null = np.dtype(np.int64), 0  # nulls: unscored positions, as 0 like the binary answers
        else:
            dtype, null = np.dtype(np.bool_), None
        array = json_elements(elements, output.kind, dtype, null).reshape(nesting)
    if array.size == 0 and output.depth > array.ndim:
        array = array.reshape((0,) * output.depth)  # [] of index lists keeps its rank
    return array


@dataclass(frozen=True)
class OverloadRetries:
    """When a client sends a call again that an overloaded service refused: ``retries`` times at most, for
    a ``Retry-After`` of at most ``most_wait`` seconds. Both clients hold one, checked when they are made."""

    retries: int
    most_wait: float

    @classmethod
    def checked(cls, overload_retries: object, most_retry_wait: object) -> OverloadRetries:
        retries = overload_retries
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidInput("overload_retries", f"must be an integer >= 0, got {retries!r}")
        if (
            isinstance(most_retry_wait, bool)
            or not isinstance(most_retry_wait, int | float)
            or not 0 <= most_retry_wait < float("inf")
        ):
            wait = most_retry_wait
            raise InvalidInput("most_retry_wait", f"must be a number of seconds >= 0, got {wait!r}")
        return cls(retries, float(most_retry_wait))

    def wait(self, status: int, headers: Mapping[str, str], *, retries_left: int) -> float | None:
        """Seconds to wait before sending the call again (its ``Retry-After`` and up to
        :data:`RETRY_JITTER` of it more), or None to raise its error now: not an overloaded service's
        refusal, no retries left, no ``Retry-After``, or one over ``most_wait``."""
        if status not in OVERLOADED_STATUSES or retries_left <= 0:
            return None
        asked = retry_after_seconds(headers)
        if asked is None or asked > self.most_wait:
            return None
        return asked * (1 + RETRY_JITTER * random.random())


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _check_base_url(base_url: str) -> None:
    path = urlsplit(base_url).path.rstrip("/")
    if path.endswith(("/v1", "/v2")) or "/v2/models" in path:
        raise InvalidInput(
            "base_url",
            f"must be the server root (e.g. http://127.0.0.1:8000), not {base_url!r}: the client adds "
            "/v1/… and /v2/… itself",
        )


def _transport_error(error: httpx.TransportError, method: str, url: str) -> TransportError:
    where = f"{method} {url}"
    if isinstance(error, httpx.TimeoutException):
        return Timeout("Timeout", f"{where} took longer than the client's timeout ({type(error).__name__}).")
    if isinstance(error, httpx.ConnectError):
        return ConnectionFailed("Connection failed", f"{where}: could not connect ({error}).")
    return TransportError("Transport error", f"{where} failed: {type(error).__name__}: {error}")


def _undecodable(response: httpx.Response, error: httpx.DecodingError) -> MalformedAnswerError:
    """A body that does not decode as its ``Content-Encoding`` says (a proxy's broken gzip)."""
    return malformed_answer(response.status_code, response.headers, b"", f"its body does not decode: {error}")


def _probe_answer(path: str, status: int, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    if status != 200:
        raise error_from(status, headers, body)
    try:
        answer = json.loads(body, parse_constant=no_json_constant)
    except ValueError as error:
        raise malformed_answer(status, headers, body, f"GET {path} answered no JSON") from error
    if not isinstance(answer, dict):
        raise malformed_answer(status, headers, body, f"GET {path} answered no JSON object")
    return answer


def _probe_flag(path: str, member: str, status: int, headers: Mapping[str, str], body: bytes) -> bool:
    """A probe's answer (``{"live": true}``): its member must be a JSON boolean ("false" is not false)."""
    flag = _probe_answer(path, status, headers, body).get(member)
    if not isinstance(flag, bool):
        raise malformed_answer(status, headers, body, f"GET {path} answered no JSON boolean {member!r}")
    return flag


def _metadata_path(model: str | None) -> str:
    """The metadata route of ``model``; InvalidInput for a name that would reach another route: ".." or a
    percent-encoded "/" (the server decodes them into other paths), or "stats" (/v2/models/stats is every
    model's statistics, not a model)."""
    if model is None:
        return "/v2"
    if not isinstance(model, str) or not MODEL_NAME.fullmatch(model) or model in NOT_MODEL_NAMES:
        raise InvalidInput(
            "model", f"must be a model's name such as 'attention' (a-z, 0-9 and '-'), got {model!r:.60}"
        )
    return f"/v2/models/{model}"


class Client(SyncModels):
    """A connection pool to one service: ``with Client(url) as c: c.attention(q, k, v)``.

    ``base_url`` is the server root; ``timeout`` bounds each step of a request (seconds: connecting, each
    read and each write), not a whole call, which an answer arriving a little at a time can make longer;
    ``retries`` retries a request whose connection could not be made; ``overload_retries`` sends a
    call again that an overloaded service refused (503 or 429) once its ``Retry-After`` has passed (and up to
    a fifth of it more, at random), when that is at most ``most_retry_wait`` seconds (0 retries: raise at
    once). So a call may take ``overload_retries + 1`` requests and those waits. Errors the service answers
    raise :class:`ApiError`; arguments it would refuse, :class:`InvalidInput` before sending; a call that gets
    no answer, :class:`ConnectionFailed` or :class:`Timeout` (the httpx exception chained).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        overload_retries: int = DEFAULT_OVERLOAD_RETRIES,
        most_retry_wait: float = DEFAULT_MOST_RETRY_WAIT_SECONDS,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        _check_base_url(base_url)
        self._overload = OverloadRetries.checked(overload_retries, most_retry_wait)
        self._http = httpx.Client(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport or httpx.HTTPTransport(retries=retries),
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, call: Call) -> tuple[int, httpx.Headers, bytes]:
        try:
            with self._http.stream(method, call.path, content=call.body, headers=call.headers) as response:
                try:
                    body = response.read()
                except httpx.DecodingError as error:
                    raise _undecodable(response, error) from error
        except httpx.TransportError as error:
            raise _transport_error(error, method, str(self._http.base_url.join(call.path))) from error
        return response.status_code, response.headers, body

    def _call(self, spec: ModelSpec[ResultT], arguments: dict[str, Any]) -> ResultT:
        prepared = prepare(spec, arguments)
        retries_left = self._overload.retries
        while True:
            status, headers, body = self._send("POST", prepared.call)
            wait = self._overload.wait(status, headers, retries_left=retries_left)
            if wait is None:
                return finish(spec, prepared, status, headers, body)
            retries_left -= 1
            time.sleep(wait)

    def _get(self, path: str) -> tuple[int, httpx.Headers, bytes]:
        return self._send("GET", Call(path=path, body=b"", headers={}))

    def health(self) -> bool:
        """Whether the server is live (``GET /v2/health/live``)."""
        return _probe_flag("/v2/health/live", "live", *self._get("/v2/health/live"))

    def ready(self) -> bool:
        """Whether the server is ready for calls (``GET /v2/health/ready``): False while it answers 503."""
        status, headers, body = self._get("/v2/health/ready")
        if status == 503:
            return False
        return _probe_flag("/v2/health/ready", "ready", status, headers, body)

    def metadata(self, model: str | None = None) -> dict[str, Any]:
        """A /v2 model's metadata (its inputs and outputs: names, datatypes, shapes), or with no model the
        server's (name, version, extensions)."""
        path = _metadata_path(model)
        return _probe_answer(path, *self._get(path))


class AsyncClient(AsyncModels):
    """:class:`Client` for asyncio: ``async with AsyncClient(url) as c: await c.attention(q, k, v)``."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        overload_retries: int = DEFAULT_OVERLOAD_RETRIES,
        most_retry_wait: float = DEFAULT_MOST_RETRY_WAIT_SECONDS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        _check_base_url(base_url)
        self._overload = OverloadRetries.checked(overload_retries, most_retry_wait)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=_headers(api_key),
            timeout=timeout,
            transport=transport or httpx.AsyncHTTPTransport(retries=retries),
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, call: Call) -> tuple[int, httpx.Headers, bytes]:
        stream = self._http.stream(method, call.path, content=call.body, headers=call.headers)
        try:
            async with stream as response:
                try:
                    body = await response.aread()
                except httpx.DecodingError as error:
                    raise _undecodable(response, error) from error
        except httpx.TransportError as error:
            raise _transport_error(error, method, str(self._http.base_url.join(call.path))) from error
        return response.status_code, response.headers, body

    async def _call(self, spec: ModelSpec[ResultT], arguments: dict[str, Any]) -> ResultT:
        prepared = prepare(spec, arguments)
        retries_left = self._overload.retries
        while True:
            status, headers, body = await self._send("POST", prepared.call)
            wait = self._overload.wait(status, headers, retries_left=retries_left)
            if wait is None:
                return finish(spec, prepared, status, headers, body)
            retries_left -= 1
            await asyncio.sleep(wait)

    async def _get(self, path: str) -> tuple[int, httpx.Headers, bytes]:
        return await self._send("GET", Call(path=path, body=b"", headers={}))

    async def health(self) -> bool:
        """As :meth:`Client.health`."""
        return _probe_flag("/v2/health/live", "live", *await self._get("/v2/health/live"))

    async def ready(self) -> bool:
        """As :meth:`Client.ready`."""
        status, headers, body = await self._get("/v2/health/ready")
        if status == 503:
            return False
        return _probe_flag("/v2/health/ready", "ready", status, headers, body)

    async def metadata(self, model: str | None = None) -> dict[str, Any]:
        """As :meth:`Client.metadata`."""
        path = _metadata_path(model)
        return _probe_answer(path, *await self._get(path))


__all__ = ["AsyncClient", "Client"]
