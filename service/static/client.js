// A small client for the attention service: one async function per model (written into models.js from the
// model declarations by `make openapi`, and exported here).
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

/** POST `body` as JSON to `path`; the answer, or an ApiError. The model functions (models.js) call it. */
export async function postJson(path, body, { baseUrl = DEFAULT_BASE_URL, signal } = {}) {
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

// The model functions (attention, softmax, …), written from the model declarations.
export * from "./models.js";
