// A small client for the attention service: one async function per endpoint.
//
//   import { attention, softmax, logLikelihood, sample, ApiError } from "http://HOST/static/client.js";
//   const answer = await attention({ query: [0, 1], key: [[1, 0], [0, 1]], value: [[6, 0], [0, 3]] });
//
// Every function takes the request body (as in openapi.yaml) and options { baseUrl, signal }, and resolves
// to the response body. A refused request (application/problem+json) rejects with an ApiError that carries
// the HTTP status and the messages per request field (`errors`); a service that cannot be reached rejects
// with an ApiError of status 0.

/** The service this module was served from: the default base URL of every call. */
export const DEFAULT_BASE_URL = new URL("..", import.meta.url).href.replace(/\/$/, "");

/**
 * A refused request: `status`, `title`, `detail`, `type`, `requestId` and `errors` ({ field: [messages] }),
 * named as in the problem+json document (and as the Python client's ApiError).
 */
export class ApiError extends Error {
  constructor({ status, title, detail, errors = {}, type = "about:blank", requestId }) {
    super(detail || title || `The service answered ${status}.`);
    this.name = "ApiError";
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.type = type;
    this.errors = errors;
    this.requestId = requestId;
  }

  /** Deprecated: the former name of `errors`. */
  get fields() {
    return this.errors;
  }

  /** The messages about one request field (an empty list when there are none). */
  messagesFor(field) {
    return this.errors[field] ?? [];
  }
}

async function post(path, body, { baseUrl = DEFAULT_BASE_URL, signal } = {}) {
  const url = `${baseUrl.replace(/\/$/, "")}${path}`;
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(body),
      signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError({
      status: 0,
      title: "Service unreachable",
      detail: `Could not reach the service at ${url}.`,
    });
  }
  const type = response.headers.get("Content-Type") || "";
  const answer = type.includes("json") ? await response.json() : null;
  if (response.ok && answer !== null) return answer;
  if (answer !== null && type.includes("application/problem+json")) {
    throw new ApiError({
      status: answer.status ?? response.status,
      title: answer.title,
      detail: answer.detail,
      errors: answer.errors ?? {},
      type: answer.type,
      requestId: answer.request_id,
    });
  }
  throw new ApiError({
    status: response.status,
    title: response.statusText,
    detail: `The service answered ${response.status}.`,
  });
}

/**
 * POST /v1/attention: {query, key, value, mask?, bias?, causal?, causal_alignment?, scale?, window?,
 * softcap?, rotary?, enable_gqa?, alibi_slopes?, empty_rows?, include?, precision?}.
 */
export function attention(body, options) {
  return post("/v1/attention", body, options);
}

/** POST /v1/softmax: {logits, temperature?, mask?, top_k?, top_p?, min_p?, include?, precision?}. */
export function softmax(body, options) {
  return post("/v1/softmax", body, options);
}

/**
 * POST /v1/log-likelihood:
 * {logits, targets, shift?, ignore_index?, temperature?, top_logprobs?, precision?}.
 */
export function logLikelihood(body, options) {
  return post("/v1/log-likelihood", body, options);
}

/**
 * POST /v1/multi-head-attention: {query, key?, value?, w_q, w_k, w_v, w_o, b_q?, b_k?, b_v?, b_o?, num_heads,
 * num_kv_heads?, mask?, bias?, causal?, causal_alignment?, scale?, window?, softcap?, rotary?, alibi_slopes?,
 * empty_rows?, include?, precision?}, answering {output} and, on request (include), the per-head weights and
 * scores, the head outputs before w_o, and the projected q, k, v.
 */
export function multiHeadAttention(body, options) {
  return post("/v1/multi-head-attention", body, options);
}

/**
 * POST /v1/positional-encoding: {kind: "sinusoidal", positions? | length?, d_model, base?, precision?}
 * answering {encoding}, or {kind: "rotary", x, positions?, base?, style?, dim?, include?, precision?}
 * answering {output} (and cos/sin on request).
 */
export function positionalEncoding(body, options) {
  return post("/v1/positional-encoding", body, options);
}

/**
 * POST /v1/sample: {logits, temperature?, mask?, top_k?, top_p?, min_p?, num_samples?, seed?}, answering
 * {tokens, logprobs, seed}. The same request with the same seed draws the same tokens; without a seed the
 * service picks one and returns it (at most 2^53 - 1, so a JavaScript number holds it exactly).
 */
export function sample(body, options) {
  return post("/v1/sample", body, options);
}
