"""``Client`` and ``AsyncClient``: one method per model, NumPy arrays in and out, binary tensors on the wire.

Every call computes a pure function of its inputs, so retrying one whose connection failed is safe: the
transport retries connection errors (``retries`` times) and nothing else; an answer, even an error, is
never retried.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Literal

import httpx
from numpy.typing import ArrayLike, NDArray

from attention_client._errors import MalformedAnswerError
from attention_client._protocol import (
    Call,
    Outputs,
    ResultT,
    bool_tensor,
    float_tensor,
    infer_call,
    int_tensor,
    malformed_answer,
    read_result,
)
from attention_client._results import AttentionResult, LikelihoodResult, SampleResult, SoftmaxResult

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_SECONDS = 60.0
DEFAULT_RETRIES = 2

Precision = Literal["float64", "float32"]
AttentionOutput = Literal["weights", "scores", "logsumexp"]
DEFAULT_INCLUDE: tuple[AttentionOutput, ...] = ("weights",)  # as /v1


def _attention_call(
    query: ArrayLike,
    key: ArrayLike,
    value: ArrayLike,
    *,
    mask: ArrayLike | None,
    bias: ArrayLike | None,
    causal: bool,
    causal_alignment: str,
    scale: float | None,
    empty_rows: str,
    include: Collection[AttentionOutput],
    precision: Precision | None,
) -> Call:
    tensors = [float_tensor("query", query), float_tensor("key", key), float_tensor("value", value)]
    if mask is not None:
        tensors.append(bool_tensor("mask", mask))
    if bias is not None:
        tensors.append(float_tensor("bias", bias))
    parameters = {
        "causal": causal,
        "causal_alignment": causal_alignment,
        "scale": scale,
        "empty_rows": empty_rows,
        "precision": precision,
    }
    outputs = ["output", *(name for name in ("weights", "scores", "logsumexp") if name in include)]
    return infer_call("attention", tensors, parameters, [*outputs, "scale", "empty_rows"])


def _attention_result(outputs: dict[str, NDArray[Any]]) -> AttentionResult:
    return AttentionResult(
        output=outputs["output"],
        weights=outputs.get("weights"),
        scores=outputs.get("scores"),
        logsumexp=outputs.get("logsumexp"),
        scale=float(outputs["scale"]),
        empty_rows=outputs["empty_rows"],
    )


def _softmax_call(
    logits: ArrayLike,
    *,
    mask: ArrayLike | None,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    log_probabilities: bool,
    precision: Precision | None,
) -> Call:
    tensors = [float_tensor("logits", logits)]
    if mask is not None:
        tensors.append(bool_tensor("mask", mask))
    parameters = {
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
        "precision": precision,
    }
    outputs = ["probabilities", "entropy", "argmax", "temperature"]
    if log_probabilities:
        outputs.append("log_probabilities")
    return infer_call("softmax", tensors, parameters, outputs)


def _softmax_result(outputs: dict[str, NDArray[Any]]) -> SoftmaxResult:
    return SoftmaxResult(
        probabilities=outputs["probabilities"],
        log_probabilities=outputs.get("log_probabilities"),
        entropy=outputs["entropy"],
        argmax=outputs["argmax"],
        temperature=float(outputs["temperature"]),
    )


def _sample_call(
    logits: ArrayLike,
    *,
    mask: ArrayLike | None,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    min_p: float | None,
    num_samples: int,
    seed: int | None,
) -> Call:
    tensors = [float_tensor("logits", logits)]
    if mask is not None:
        tensors.append(bool_tensor("mask", mask))
    parameters = {
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
        "num_samples": int(num_samples),
        "seed": None if seed is None else int(seed),
    }
    return infer_call("sample", tensors, parameters, ["tokens", "logprobs", "seed"])


def _sample_result(outputs: dict[str, NDArray[Any]]) -> SampleResult:
    return SampleResult(tokens=outputs["tokens"], logprobs=outputs["logprobs"], seed=int(outputs["seed"]))


def _likelihood_call(
    logits: ArrayLike,
    targets: ArrayLike,
    *,
    shift: bool,
    ignore_index: int,
    temperature: float,
    top_logprobs: int,
    precision: Precision | None,
) -> Call:
    tensors = [float_tensor("logits", logits), int_tensor("targets", targets)]
    parameters = {
        "shift": shift,
        "ignore_index": int(ignore_index),
        "temperature": temperature,
        "top_logprobs": int(top_logprobs),
        "precision": precision,
    }
    return infer_call("log-likelihood", tensors, parameters, None)  # the defaults: every output there is


def _likelihood_result(outputs: dict[str, NDArray[Any]]) -> LikelihoodResult:
    return LikelihoodResult(
        token_logprobs=outputs["token_logprobs"],
        ranks=outputs["ranks"],
        log_likelihood=outputs["log_likelihood"],
        num_tokens=outputs["num_tokens"],
        mean_nll=outputs["mean_nll"],
        perplexity=outputs["perplexity"],
        is_greedy=outputs["is_greedy"],
        top_logprobs=outputs.get("top_logprobs"),
        top_tokens=outputs.get("top_tokens"),
    )


def _undecodable(response: httpx.Response, error: httpx.DecodingError) -> MalformedAnswerError:
    """A body that does not decode as its ``Content-Encoding`` says (a proxy's broken gzip)."""
    return malformed_answer(response.status_code, response.headers, b"", f"its body does not decode: {error}")


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client:
    """A connection pool to one service: ``with Client(url) as c: c.attention(q, k, v)``.

    ``timeout`` bounds each call (seconds: connect, each read and write); ``retries`` retries a call whose
    connection could not be made. Errors the service answers raise :class:`ApiError`.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
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

    def _send(self, call: Call, build: Callable[[Outputs], ResultT]) -> ResultT:
        with self._http.stream("POST", call.path, content=call.body, headers=call.headers) as response:
            try:
                body = response.read()
            except httpx.DecodingError as error:
                raise _undecodable(response, error) from error
        return read_result(response.status_code, response.headers, body, build)

    def attention(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        causal: bool = False,
        causal_alignment: str = "lower_right",
        scale: float | None = None,
        empty_rows: str = "error",
        include: Collection[AttentionOutput] = DEFAULT_INCLUDE,
        precision: Precision | None = None,
    ) -> AttentionResult:
        """``softmax(Q Kᵀ · scale + bias, over visible keys) @ V``; float32 inputs are answered in float32."""
        call = _attention_call(
            query,
            key,
            value,
            mask=mask,
            bias=bias,
            causal=causal,
            causal_alignment=causal_alignment,
            scale=scale,
            empty_rows=empty_rows,
            include=include,
            precision=precision,
        )
        return self._send(call, _attention_result)

    def softmax(
        self,
        logits: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        log_probabilities: bool = False,
        precision: Precision | None = None,
    ) -> SoftmaxResult:
        """Probabilities over the last axis after mask, temperature, top-k, top-p and min-p."""
        call = _softmax_call(
            logits,
            mask=mask,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            log_probabilities=log_probabilities,
            precision=precision,
        )
        return self._send(call, _softmax_result)

    def sample(
        self,
        logits: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        num_samples: int = 1,
        seed: int | None = None,
    ) -> SampleResult:
        """``num_samples`` tokens drawn from each row of ``logits`` (the distribution :meth:`softmax` shows
        for the same options); the same ``seed`` draws the same tokens, and ``None`` lets the service pick
        one, which the result holds."""
        call = _sample_call(
            logits,
            mask=mask,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            num_samples=num_samples,
            seed=seed,
        )
        return self._send(call, _sample_result)

    def log_likelihood(
        self,
        logits: ArrayLike,
        targets: ArrayLike,
        *,
        shift: bool = False,
        ignore_index: int = -100,
        temperature: float = 1.0,
        top_logprobs: int = 0,
        precision: Precision | None = None,
    ) -> LikelihoodResult:
        """Per-token log-probabilities and ranks of ``targets``, and per-sequence totals."""
        call = _likelihood_call(
            logits,
            targets,
            shift=shift,
            ignore_index=ignore_index,
            temperature=temperature,
            top_logprobs=top_logprobs,
            precision=precision,
        )
        return self._send(call, _likelihood_result)


class AsyncClient:
    """:class:`Client` for asyncio: ``async with AsyncClient(url) as c: await c.attention(q, k, v)``."""

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
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

    async def _send(self, call: Call, build: Callable[[Outputs], ResultT]) -> ResultT:
        async with self._http.stream("POST", call.path, content=call.body, headers=call.headers) as response:
            try:
                body = await response.aread()
            except httpx.DecodingError as error:
                raise _undecodable(response, error) from error
        return read_result(response.status_code, response.headers, body, build)

    async def attention(
        self,
        query: ArrayLike,
        key: ArrayLike,
        value: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        bias: ArrayLike | None = None,
        causal: bool = False,
        causal_alignment: str = "lower_right",
        scale: float | None = None,
        empty_rows: str = "error",
        include: Collection[AttentionOutput] = DEFAULT_INCLUDE,
        precision: Precision | None = None,
    ) -> AttentionResult:
        """As :meth:`Client.attention`."""
        call = _attention_call(
            query,
            key,
            value,
            mask=mask,
            bias=bias,
            causal=causal,
            causal_alignment=causal_alignment,
            scale=scale,
            empty_rows=empty_rows,
            include=include,
            precision=precision,
        )
        return await self._send(call, _attention_result)

    async def softmax(
        self,
        logits: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        log_probabilities: bool = False,
        precision: Precision | None = None,
    ) -> SoftmaxResult:
        """As :meth:`Client.softmax`."""
        call = _softmax_call(
            logits,
            mask=mask,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            log_probabilities=log_probabilities,
            precision=precision,
        )
        return await self._send(call, _softmax_result)

    async def sample(
        self,
        logits: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        min_p: float | None = None,
        num_samples: int = 1,
        seed: int | None = None,
    ) -> SampleResult:
        """As :meth:`Client.sample`."""
        call = _sample_call(
            logits,
            mask=mask,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            num_samples=num_samples,
            seed=seed,
        )
        return await self._send(call, _sample_result)

    async def log_likelihood(
        self,
        logits: ArrayLike,
        targets: ArrayLike,
        *,
        shift: bool = False,
        ignore_index: int = -100,
        temperature: float = 1.0,
        top_logprobs: int = 0,
        precision: Precision | None = None,
    ) -> LikelihoodResult:
        """As :meth:`Client.log_likelihood`."""
        call = _likelihood_call(
            logits,
            targets,
            shift=shift,
            ignore_index=ignore_index,
            temperature=temperature,
            top_logprobs=top_logprobs,
            precision=precision,
        )
        return await self._send(call, _likelihood_result)


__all__ = ["AsyncClient", "Client"]
