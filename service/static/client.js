// A small client for the attention service: one async function per model (written into models.js from the
// model declarations by `make openapi`, and exported here).
//
//   import { attention, softmax, logLikelihood, sample, ApiError } from "http://HOST/static/client.js";
//   const answer = await attention({ query: [0, 1], key: [[1, 0], [0, 1]], value: [[6, 0], [0, 3]] });
//
// Every function takes the request body (as in openapi.yaml) and options { baseUrl, signal, overloadRetries,
// mostRetryWait }, and resolves to the response body. A refused request (application/problem+json) rejects
// with an ApiError that carries the HTTP status, the messages per request field (`errors`) and the answer's
// Retry-After in seconds (`retryAfter`); a service that cannot be reached rejects with an ApiError of
// status 0. An overloaded service's refusal (503 or 429) whose Retry-After is at most `mostRetryWait` seconds
// (10) is sent again once that has passed, `overloadRetries` times (2): the service sheds load so that
// clients come back later, and every call is a pure function of its body. Aborting `signal` ends the wait.

/** The service this module was served from: the default base URL of every call. */
export const DEFAULT_BASE_URL = new URL("..", import.meta.url).href.replace(/\/$/, "");
export const DEFAULT_OVERLOAD_RETRIES = 2;
export const DEFAULT_MOST_RETRY_WAIT = 10; // seconds
const OVERLOADED = new Set([429, 503]); // refusals sent again once their Retry-After has passed

/**
 * A refused request: `status`, `title`, `detail`, `type`, `requestId` and `errors` ({ field: [messages] }),
 * named as in the problem+json document (and as the Python client's ApiError), and `retryAfter`: the
 * answer's Retry-After in seconds, or null.
 */
export class ApiError extends Error {
  constructor({ status, title, detail, errors = {}, type = "about:blank", requestId, retryAfter = null }) {
    super(detail || title || `The service answered ${status}.`);
    this.name = "ApiError";
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.type = type;
    this.errors = errors;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
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

/** A Retry-After header in seconds from now (delta-seconds, or an HTTP-date: one past is 0), or null. */
export function retryAfterSeconds(value) {
  const text = (value ?? "").trim();
  if (/^[0-9]+$/.test(text)) return Number(text);
  const when = text.endsWith(" GMT") ? Date.parse(text) : NaN;
  return Number.isNaN(when) ? null : Math.max(0, (when - Date.now()) / 1000);
}

/**
 * POST `body` as JSON to `path`; the answer, or an ApiError. An overloaded service's refusal is sent again
 * as the module's comment says. The model functions (models.js) call it.
 */
export async function postJson(
  path,
  body,
  {
    baseUrl = DEFAULT_BASE_URL,
    signal,
    overloadRetries = DEFAULT_OVERLOAD_RETRIES,
    mostRetryWait = DEFAULT_MOST_RETRY_WAIT,
  } = {},
) {
  for (let retriesLeft = overloadRetries; ; retriesLeft -= 1) {
    try {
      return await postOnce(path, body, baseUrl, signal);
    } catch (error) {
      const wait = error instanceof ApiError && OVERLOADED.has(error.status) ? error.retryAfter : null;
      if (wait === null || wait > mostRetryWait || retriesLeft <= 0) throw error;
      await sleep(wait, signal);
    }
  }
}

/** Resolves after `seconds`; rejects with the abort's reason as soon as `signal` is aborted. */
function sleep(seconds, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const aborted = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }, seconds * 1000);
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

async function postOnce(path, body, baseUrl, signal) {
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
      retryAfter: retryAfterSeconds(response.headers.get("Retry-After")),
    });
  }
  throw new ApiError({
    status: response.status,
    title: response.statusText,
    detail: `The service answered ${response.status}.`,
    retryAfter: retryAfterSeconds(response.headers.get("Retry-After")),
  });
}

// The model functions (attention, softmax, …), written from the model declarations.
export * from "./models.js";
