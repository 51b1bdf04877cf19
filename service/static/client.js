// A small client for the attention service: one async function per model (written into models.js from the
// model declarations by `make openapi`, and exported here).
//
//   import { attention, softmax, logLikelihood, sample, ApiError } from "http://HOST/static/client.js";
//   const answer = await attention({ query: [0, 1], key: [[1, 0], [0, 1]], value: [[6, 0], [0, 3]] });
//
// Every function takes the request body (as in openapi.yaml) and options { baseUrl, apiKey, signal,
// overloadRetries, mostRetryWait, onRetry }, and resolves to the response body. `apiKey` is sent as
// `Authorization: Bearer <key>`, for a service that requires keys (API_KEYS); a key in a public page is
// public. A refused request (application/problem+json) rejects with an ApiError that carries the HTTP status,
// the messages per request field (`errors`) and the answer's Retry-After in seconds (`retryAfter`); any other
// failed answer (a proxy's page, a body that is not JSON or is cut short) with an ApiError of its HTTP
// status, and a service that cannot be reached with one of status 0. An overloaded service's refusal (503 or
// 429) whose Retry-After is at most `mostRetryWait` seconds (10) is sent again once that has passed (and up
// to a fifth of it more, at random, so that clients refused together do not all come back together),
// `overloadRetries` times (2): the service sheds load so that clients come back later, and every call is a
// pure function of its body. `onRetry({ wait, error })` is told before each wait (the widgets say the service
// is busy); aborting `signal` ends the call, waiting or not, with the abort's reason.

/** The service this module was served from: the default base URL of every call. */
export const DEFAULT_BASE_URL = new URL("..", import.meta.url).href.replace(/\/$/, "");
export const DEFAULT_OVERLOAD_RETRIES = 2;
export const DEFAULT_MOST_RETRY_WAIT = 10; // seconds
const OVERLOADED = new Set([429, 503]); // refusals sent again once their Retry-After has passed
const RETRY_JITTER = 0.2;
const LONGEST_TIMER_MS = 2 ** 31 - 1; // setTimeout's limit (about 24.8 days): a longer delay fires at once
// The three forms of an HTTP-date (RFC 9110, section 5.6.7), which a recipient must all accept; all in GMT.
const HTTP_DATE = [
  /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/, // Sun, 06 Nov 1994 08:49:37 GMT
  /^[A-Z][a-z]{5,8}, \d{2}-[A-Z][a-z]{2}-\d{2} \d{2}:\d{2}:\d{2} GMT$/, // Sunday, 06-Nov-94 08:49:37 GMT
  /^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}$/, // Sun Nov  6 08:49:37 1994
];

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
  if (!HTTP_DATE.some((form) => form.test(text))) return null;
  const when = Date.parse(text.endsWith(" GMT") ? text : `${text} GMT`);
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
    apiKey,
    signal,
    overloadRetries = DEFAULT_OVERLOAD_RETRIES,
    mostRetryWait = DEFAULT_MOST_RETRY_WAIT,
    onRetry,
  } = {},
) {
  if (!Number.isInteger(overloadRetries) || overloadRetries < 0) {
    throw new TypeError(`overloadRetries must be an integer >= 0, got ${overloadRetries}`);
  }
  if (!Number.isFinite(mostRetryWait) || mostRetryWait < 0) {
    throw new TypeError(`mostRetryWait must be a number of seconds >= 0, got ${mostRetryWait}`);
  }
  if (apiKey !== undefined && apiKey !== null && (typeof apiKey !== "string" || !apiKey.trim())) {
    throw new TypeError("apiKey must be a non-empty string (the key alone, without 'Bearer')");
  }
  // Outside the fetch's try: a body JSON cannot write (a BigInt, a cycle) rejects with JSON.stringify's own
  // TypeError, not as an unreachable service.
  const json = JSON.stringify(body);
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  if (apiKey) headers.Authorization = `Bearer ${apiKey.trim()}`;
  for (let retriesLeft = overloadRetries; ; retriesLeft -= 1) {
    try {
      return await postOnce(path, json, baseUrl, headers, signal);
    } catch (error) {
      const asked = error instanceof ApiError && OVERLOADED.has(error.status) ? error.retryAfter : null;
      if (asked === null || asked > mostRetryWait || retriesLeft <= 0) throw error;
      const wait = asked * (1 + RETRY_JITTER * Math.random());
      onRetry?.({ wait, error });
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
    const timer = setTimeout(
      () => {
        signal?.removeEventListener("abort", aborted);
        resolve();
      },
      Math.min(seconds * 1000, LONGEST_TIMER_MS),
    );
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

async function postOnce(path, json, baseUrl, headers, signal) {
  const url = `${baseUrl.replace(/\/$/, "")}${path}`;
  let response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers,
      body: json,
      signal,
    });
  } catch (error) {
    if (signal?.aborted) throw signal.reason ?? error; // as the wait rejects: whatever the abort gave
    if (error.name === "AbortError") throw error;
    throw new ApiError({
      status: 0,
      title: "Service unreachable",
      detail: `Could not reach the service at ${url}.`,
    });
  }
  const type = response.headers.get("Content-Type") || "";
  const retryAfter = retryAfterSeconds(response.headers.get("Retry-After"));
  // Every failure from here on is an ApiError with the HTTP status the answer came with: a body cut short
  // (fetch's "TypeError: terminated"), or labelled JSON and not JSON (a proxy's HTML page, cut-short JSON).
  let text;
  try {
    text = await response.text();
  } catch (error) {
    if (signal?.aborted) throw signal.reason ?? error;
    throw new ApiError({
      status: response.status,
      title: "Truncated answer",
      detail: `The service's answer (${response.status}) was cut short: ${error.message}.`,
      retryAfter,
    });
  }
  let answer = null;
  if (type.includes("json")) {
    try {
      answer = JSON.parse(text);
    } catch {
      answer = null; // labelled JSON, but not: described below by its status
    }
  }
  if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
    throw new ApiError({
      status: response.status,
      title: response.ok ? "Malformed answer" : response.statusText,
      detail: response.ok
        ? `The service answered ${response.status} without a JSON object: ${text.slice(0, 80)}`
        : `The service answered ${response.status}.`,
      retryAfter,
    });
  }
  if (response.ok) return answer;
  const problem = type.includes("application/problem+json") ? answer : {};
  throw new ApiError({
    // The HTTP status, never the body's: a 503 whose body says 200 is still an overloaded refusal.
    status: response.status,
    title: problem.title ?? response.statusText,
    detail: problem.detail ?? `The service answered ${response.status}.`,
    errors: problem.errors ?? {},
    type: problem.type,
    requestId: problem.request_id,
    retryAfter,
  });
}

// The model functions (attention, softmax, …), written from the model declarations.
export * from "./models.js";
