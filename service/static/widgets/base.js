// What every widget shares: the life cycle, the shadow root, the `api`/`data`/`controls` attributes,
// requests that supersede each other, and error messages shown beside the control the service blamed.
// Also the small helpers the widgets draw with (h, viridis, formatNumber, …).
//
// The life cycle is the same for every widget, and the base class drives it:
//
//   build()   the `data` attribute (or the example) → this.state    on connect; when an attribute changes
//   render()  this.state → the card: the widget's controls, the output  after build; when the controls change
//   update()  this.state → a request to the service → show(answer)      after render; when a value changes
//
// A widget is a subclass that says what it is (static tag, title, css, example, required) and fills in
// four hooks: initialState(data), controls(), request() and show(answer). docs/design.md has an example.

import { ApiError, DEFAULT_BASE_URL } from "../client.js";

/** Viridis (perceptually uniform, colour-blind safe) at t in [0, 1]: a polynomial fit of matplotlib's. */
export function viridis(t) {
  const x = Math.min(1, Math.max(0, t));
  const c0 = [0.2777273272234177, 0.005407344544966578, 0.3340998053353061];
  const c1 = [0.1050930431085774, 1.404613529898575, 1.384590162594685];
  const c2 = [-0.3308618287255563, 0.214847559468213, 0.09509516302823659];
  const c3 = [-4.634230498983486, -5.799100973351585, -19.33244095627987];
  const c4 = [6.228269936347081, 14.17993336680509, 56.69055260068105];
  const c5 = [4.776384997670288, -13.74514537774601, -65.35303263337234];
  const c6 = [-5.435455855934631, 4.645852612178535, 26.3124352495832];
  const rgb = [0, 1, 2].map((i) => {
    const v = c0[i] + x * (c1[i] + x * (c2[i] + x * (c3[i] + x * (c4[i] + x * (c5[i] + x * c6[i])))));
    return Math.round(255 * Math.min(1, Math.max(0, v)));
  });
  return { background: `rgb(${rgb.join(", ")})`, text: x > 0.55 ? "#111" : "#fff" };
}

/** A number as shown: fixed digits, "−∞" for null (minus infinity by definition), no "-0.0000". */
export function formatNumber(value, digits = 4) {
  if (value === null || value === undefined) return "−∞";
  const text = value.toFixed(digits);
  return /^-0\.?0*$/.test(text) ? text.slice(1) : text.replace("-", "−");
}

/** An element: `text` sets its text, `on…` adds a listener, `true` is an empty attribute, false none. */
export function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.flat().filter((child) => child !== null && child !== undefined));
  return node;
}

/**
 * A small seeded generator (mulberry32): `() => number` in [0, 1), the same sequence for the same seed, so
 * "random, seeded" examples are the same every time and on every machine.
 */
export function seededRandom(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** One 32-bit number from several: the seed of one stream of made-up numbers (FNV-1a over the parts). */
export function streamSeed(...parts) {
  let hash = 0x811c9dc5;
  for (const part of parts) {
    hash ^= part >>> 0;
    hash = Math.imul(hash, 0x01000193);
    hash ^= hash >>> 15;
  }
  return hash >>> 0;
}

/** A word as a 32-bit number (FNV-1a over its UTF-16 code units), so that a word has one embedding. */
export function wordHash(word) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < word.length; i++) hash = Math.imul(hash ^ word.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/** `rows × cols` numbers in [−spread, spread], two decimals, from one stream. */
export function block(seed, rows, cols, spread) {
  const random = seededRandom(seed);
  const entry = () => Math.round((random() * 2 - 1) * spread * 100) / 100;
  return Array.from({ length: rows }, () => Array.from({ length: cols }, entry));
}

export function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/**
 * Numbers from "1 2, 3" text; what is not a number is kept as text so the service names the problem. A
 * number too large for a double (1e999) is Infinity here, which JSON would send as null: the widgets ask
 * `ServiceWidget.readNumbers` instead, which says so beside the field.
 */
export function parseNumbers(text) {
  return numberWords(text).map((word) => (NUMBER.test(word) ? Number(word) : word));
}

const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;

function numberWords(text) {
  return text
    .trim()
    .split(/[\s,;]+/)
    .filter(Boolean);
}

/** A number a request can carry: JSON has no Infinity or NaN (JSON.stringify writes them as null). */
function isFiniteNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

/** A non-empty list `depth` deep with finite numbers at the bottom: 1 is [2, 1], 2 is [[1, 0], [0, 1]]. */
function isNumbers(value, depth) {
  if (!Array.isArray(value) || value.length === 0) return false;
  return depth === 1 ? value.every(isFiniteNumber) : value.every((row) => isNumbers(row, depth - 1));
}

/**
 * What a `data` field may be, for a widget's static `fields` ({ name: FIELD.kind }): `says` is how the card
 * words it, `test` checks a value. readData checks every field given against it, so that data of the wrong
 * type or shape is reported rather than breaking the widget when it draws.
 */
export const FIELD = {
  text: { says: "a string", test: (value) => typeof value === "string" },
  boolean: { says: "true or false", test: (value) => typeof value === "boolean" },
  number: { says: "a number", test: isFiniteNumber },
  positive: { says: "a number greater than 0", test: (value) => isFiniteNumber(value) && value > 0 },
  integer: { says: "a whole number", test: Number.isSafeInteger },
  words: {
    says: 'a list of words (["the", "cat"])',
    test: (value) => Array.isArray(value) && value.every((word) => typeof word === "string"),
  },
  flags: {
    says: "a list of true or false",
    test: (value) => Array.isArray(value) && value.every((flag) => typeof flag === "boolean"),
  },
  vector: { says: "a non-empty list of numbers ([2, 1])", test: (value) => isNumbers(value, 1) },
  matrix: {
    says: "a non-empty list of rows of numbers ([[1, 0], [0, 1]])",
    test: (value) => isNumbers(value, 2),
  },
  vectorOrMatrix: {
    says: "a list of numbers ([0, 1]) or of rows of numbers ([[0, 1], [1, 0]])",
    test: (value) => isNumbers(value, 1) || isNumbers(value, 2),
  },
  indices: {
    says: "a non-empty list of whole numbers ([0, 2])",
    test: (value) => Array.isArray(value) && value.length > 0 && value.every(Number.isSafeInteger),
  },
};

/** A value as the card quotes it: JSON, shortened, with the numbers JSON cannot write (1e999) as numbers. */
function quoted(value) {
  const text = JSON.stringify(value, (_, v) =>
    typeof v === "number" && !Number.isFinite(v) ? String(v) : v,
  );
  return text.length > 40 ? `${text.slice(0, 40)}…` : text;
}

export function words(text) {
  return text.trim().split(/\s+/).filter(Boolean);
}

/**
 * A status line that says what `describe(element)` returns for the element under the keyboard focus or the
 * pointer inside `area` (null: keep the line as it is), so that focus shows what hover shows.
 */
export function readoutFor(area, describe) {
  const line = h("p", { class: "readout", role: "status" });
  const show = (event) => {
    const text = describe(event.target);
    if (text) line.textContent = text;
  };
  area.addEventListener("focusin", show);
  area.addEventListener("mouseover", show);
  return line;
}

const BASE_CSS = `
  :host { display: block; color: #1b1b1f;
          font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
          --accent: #3b4cc0; --error: #a1001b; --muted: #5f6368; --line: #d8d8de; }
  :host([hidden]) { display: none; }
  * { box-sizing: border-box; }
  .card { border: 1px solid var(--line); border-radius: 10px; padding: 14px; background: #fff; }
  .controls { display: flex; flex-wrap: wrap; gap: 10px 18px; align-items: flex-start; margin-bottom: 12px; }
  .control { display: flex; flex-direction: column; gap: 3px; min-width: 0; max-width: 100%; }
  .control.inline { flex-direction: row; align-items: center; gap: 6px; }
  label, legend { font-weight: 600; font-size: 13px; }
  fieldset { border: 1px solid var(--line); border-radius: 8px; padding: 6px 10px; margin: 0; }
  input, select, textarea, button { font: inherit; font-size: 14px; }
  input[type=text], input[type=number], textarea, select {
    border: 1px solid #9aa0a6; border-radius: 6px; padding: 4px 6px; background: #fff; color: inherit;
    max-width: 100%; }
  textarea { font-family: ui-monospace, "DejaVu Sans Mono", monospace; resize: vertical; }
  input[type=range] { width: min(320px, 70vw); accent-color: var(--accent); }
  button { border: 1px solid var(--accent); color: var(--accent); background: #fff; border-radius: 6px;
           padding: 4px 10px; cursor: pointer; }
  button:hover { background: #eef0fb; }
  :focus-visible { outline: 3px solid #f0a500; outline-offset: 2px; }
  [aria-invalid=true] { border-color: var(--error); }
  .error { color: var(--error); font-size: 13px; margin: 2px 0 0; max-width: 42em; }
  .error:empty { display: none; }
  .error::before { content: "⚠ "; }
  .muted { color: var(--muted); font-size: 13px; }
  .stale { opacity: 0.45; }
  .scroll { overflow-x: auto; max-width: 100%; }
  .readout { min-height: 1.45em; margin: 10px 0 0; font-variant-numeric: tabular-nums; }
  table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  caption { text-align: left; font-weight: 600; padding-bottom: 4px; white-space: nowrap; }
  th { font-weight: 600; font-size: 13px; padding: 2px 6px; color: #333; }
  td { padding: 4px 6px; text-align: right; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
       font-size: 13px; }
`;

/** The base of every widget: see the life cycle at the top of this file. */
export class ServiceWidget extends HTMLElement {
  static observedAttributes = ["api", "data", "controls"];
  /** The element's name, e.g. "attention-heatmap" (defineWidget registers it). */
  static tag = "";
  /** The card's accessible name. */
  static title = "";
  /** The widget's own styles, added to the shared ones. */
  static css = "";
  /** What the widget shows without a `data` attribute. */
  static example = {};
  /** The `data` fields without which the example is shown instead (with a message saying why). */
  static required = [];
  /**
   * What each `data` field must be ({ name: FIELD.kind }): one given otherwise is reported and the example
   * shown instead. null stands for "not given" in a field that is not required.
   */
  static fields = {};
  /** Fields that make sense only together ([["logits", "targets"]]): one without the others is reported. */
  static together = [];

  constructor() {
    super();
    this.attachShadow({ mode: "open" });
    this.errorSlots = new Map(); // request field -> { slot, control, label }
    this.pending = null; // the AbortController of the round of requests in flight
    this.generation = 0; // rounds started; only the newest one's answer is shown
    this.controlCount = 0; // ids of controls; ids are scoped to this shadow root
    this.state = null; // null until the first build
    this.inputProblems = new Map(); // request field -> what is wrong with what was typed there
  }

  get apiBase() {
    return this.getAttribute("api") || DEFAULT_BASE_URL;
  }

  get hasControls() {
    return this.hasAttribute("controls");
  }

  connectedCallback() {
    if (this.state === null) this.build();
    this.update();
  }

  /** Taken out of the page: the requests in flight (and their waits to ask again) stop. */
  disconnectedCallback() {
    this.pending?.abort();
    this.pending = null;
  }

  attributeChangedCallback() {
    if (this.state === null) return; // the first connect builds with every attribute already set
    this.build();
    this.update();
  }

  // --------------------------------------------------------------------------------------- life cycle

  /** The `data` attribute (or the example) becomes this.state; then the card is drawn anew. */
  build() {
    this.inputProblems.clear(); // the editors are drawn anew from the data
    this.state = this.initialState(this.readData());
    this.render();
  }

  /** The card from this.state: the widget's controls, an empty output and the general error line. */
  render() {
    this.errorSlots.clear();
    // The output outlives a new card: what it shows stays, faded, until the next answer replaces it.
    this.output ??= h("div", { class: "output", "aria-live": "polite" });
    if (this.output.childElementCount) this.output.classList.add("stale");
    this.generalError = h("p", { class: "error general", role: "alert" });
    // What is wrong with the data attribute stays said while the example's answers come and go.
    const dataError = h("p", { class: "error data", role: "alert", text: this.dataError ?? "" });
    const { title, css } = this.constructor;
    this.shadowRoot.replaceChildren(
      h("style", { text: BASE_CSS + css }),
      h(
        "section",
        { class: "card", "aria-label": title },
        ...this.controls(),
        this.output,
        dataError,
        this.generalError,
      ),
    );
  }

  /**
   * Asks the service what the state needs and shows the answer. A newer update (or a change of state,
   * see outdate) aborts an older one still in flight, and only the answer to the newest state is shown;
   * `request()` may instead return a sentence saying why there is nothing to ask, shown in its place.
   */
  update() {
    this.pending?.abort();
    this.pending = null;
    const generation = ++this.generation;
    if (this.inputProblems.size) {
      // What was typed cannot be sent as it is (a number out of range): said beside its field, not asked.
      this.output.classList.add("stale");
      this.placeMessages(Object.fromEntries([...this.inputProblems].map(([f, m]) => [f, [m]])), "");
      this.settle();
      return;
    }
    let ask;
    try {
      ask = this.request();
    } catch (error) {
      this.fail(error);
      return;
    }
    if (typeof ask === "string") {
      this.output.replaceChildren();
      this.output.classList.remove("stale");
      this.clearErrors();
      this.generalError.textContent = ask;
      this.settle();
      return;
    }
    const controller = new AbortController();
    this.pending = controller;
    this.setAttribute("aria-busy", "true");
    // An overloaded service says when to ask again: the card says the service is busy meanwhile, rather
    // than leave an earlier error (a field the user has since fixed) beside a faded answer.
    const onRetry = ({ wait }) => {
      if (generation !== this.generation) return;
      this.clearErrors();
      this.generalError.textContent = `The service is busy; asking again in ${Math.ceil(wait)} s.`;
    };
    // One catch for the request and for drawing its answer: an answer the widget cannot draw (data of a shape
    // it does not take) is said in the card and settles it, as a refusal does, rather than throw unseen.
    ask({ baseUrl: this.apiBase, signal: controller.signal, onRetry })
      .then((answer) => {
        if (generation !== this.generation) return false;
        this.clearErrors();
        this.output.classList.remove("stale");
        this.show(answer);
        this.settle();
        return answer;
      })
      .then(
        (answer) => answer !== false && this.dispatchEvent(new CustomEvent("answer", { detail: answer })),
        (error) => {
          if (error?.name === "AbortError" || generation !== this.generation) return;
          this.fail(error, controller);
        },
      );
  }

  /** The round failed (a refusal, or the widget could not draw): said in the card; the widget settles. */
  fail(error, controller = null) {
    controller?.abort(); // the round's other requests, if any (attention-heatmap asks three at once)
    this.output.classList.add("stale");
    this.showError(error);
    this.settle();
  }

  /**
   * `() => void` that updates after `ms` without another call (for typing and dragging). Each call outdates
   * the answer in flight at once: it answers a state the user has already left, so it is dropped, not shown
   * (shown, it would claim a temperature the slider no longer has, until the debounced update answers).
   */
  updateLater(ms) {
    const later = debounce(() => this.update(), ms);
    return () => {
      this.outdate();
      later();
    };
  }

  /** The state changed and its update is yet to come: the answer in flight is for an old state. */
  outdate() {
    this.pending?.abort();
    this.pending = null;
    this.generation++;
    this.output.classList.add("stale");
    this.setAttribute("aria-busy", "true");
  }

  /** No request in flight: the widget shows what it will show until the next update. */
  settle() {
    this.pending = null;
    this.removeAttribute("aria-busy");
    this.setAttribute("data-state", "ready");
  }

  // ------------------------------------------------------------------------------ hooks of a widget

  /** this.state from the data (given, or the example): each widget supplies a fallback per optional field. */
  initialState(data) {
    return data;
  }

  /** The nodes above the output: editors, sliders, toggles (built with this.control for their errors). */
  controls() {
    return [];
  }

  /** `(options) => Promise<answer>` for the state (options: { baseUrl, signal }), or why nothing is asked. */
  request() {
    throw new Error(`${this.constructor.name} has no request()`);
  }

  /** Draws the answer into this.output. */
  show(_answer) {
    throw new Error(`${this.constructor.name} has no show()`);
  }

  // ------------------------------------------------------------------------------ helpers for widgets

  /**
   * The widget's data: the `data` attribute as given, or the example when there is none. Given data is not
   * mixed with the example (the example's token labels would otherwise label the caller's numbers). Data
   * that is not a JSON object, or misses a required field, is reported (on a line of its own, which answers
   * do not clear) and the example shown instead.
   */
  readData() {
    const { example, required, fields, together } = this.constructor;
    this.dataError = null;
    const raw = this.getAttribute("data");
    if (!raw) return structuredClone(example);
    let data;
    try {
      data = JSON.parse(raw);
    } catch {
      this.dataError = `The data attribute is not valid JSON: ${raw.slice(0, 60)}…`;
      return structuredClone(example);
    }
    if (data === null || typeof data !== "object" || Array.isArray(data)) {
      this.dataError = `The data attribute must be a JSON object ({…}), not ${raw.slice(0, 60)}.`;
      return structuredClone(example);
    }
    const missing = required.filter((name) => data[name] === undefined);
    if (missing.length) {
      this.dataError = `The data attribute needs ${required.join(", ")} (missing: ${missing.join(", ")}).`;
      return structuredClone(example);
    }
    const given = (name) => data[name] !== undefined && data[name] !== null;
    const wrong = Object.entries(fields).filter(
      ([name, kind]) => (given(name) || required.includes(name)) && !kind.test(data[name]),
    );
    const alone = together.filter((names) => names.some(given) && !names.every(given));
    if (wrong.length || alone.length) {
      const said = [
        ...wrong.map(([name, kind]) => `${name} must be ${kind.says}, not ${quoted(data[name])}`),
        ...alone.map(
          (names) =>
            `${names.join(" and ")} go together (missing: ${names.filter((n) => !given(n)).join(", ")})`,
        ),
      ];
      this.dataError = `The data's ${said.join("; its ")}. The example is shown instead.`;
      return structuredClone(example);
    }
    return data;
  }

  /**
   * Numbers typed into the control of request field `field` (parse: text → numbers, or rows of them). A
   * number too large for a double (1e999 is Infinity, which JSON sends as null) is said beside the field
   * until the text is fixed, and nothing is asked meanwhile (see update).
   */
  readNumbers(field, text, parse = parseNumbers) {
    const values = parse(text);
    const huge = numberWords(text).find((word) => NUMBER.test(word) && !Number.isFinite(Number(word)));
    if (huge !== undefined) {
      const shown = huge.length > 24 ? `${huge.slice(0, 24)}…` : huge;
      this.inputProblems.set(field, `${shown} is out of range: a number's magnitude must be below 1.8e308.`);
    } else {
      this.inputProblems.delete(field);
    }
    return values;
  }

  /** For initialState: says on the data line that a field of the data was not used, and what is shown. */
  reportData(message) {
    this.dataError = this.dataError ? `${this.dataError} ${message}` : message;
  }

  /** A labelled control with its error slot; `field` is the request field the service would blame. */
  control(labelText, input, { field = null, inline = false, hint = null } = {}) {
    const id = `control-${++this.controlCount}`;
    input.id = id;
    const slot = h("p", { class: "error", id: `${id}-error`, role: "alert" });
    input.setAttribute("aria-describedby", `${id}-error`);
    if (field) this.errorSlots.set(field, { slot, control: input, label: labelText });
    const label = h("label", { for: id, text: labelText });
    const parts = inline && input.type === "checkbox" ? [input, label] : [label, input];
    const note = hint && h("span", { class: "muted", text: hint });
    return h("div", { class: `control${inline ? " inline" : ""}` }, ...parts, note, slot);
  }

  clearErrors() {
    for (const { slot, control } of this.errorSlots.values()) {
      slot.textContent = "";
      control.removeAttribute("aria-invalid");
    }
    this.generalError.textContent = "";
  }

  /**
   * Puts each message of a refusal beside the control of its field; any other failure (the widget could not
   * draw an answer) is said below, as such.
   */
  showError(error) {
    if (!(error instanceof ApiError)) {
      this.placeMessages({}, `The widget could not draw this answer: ${error?.message ?? error}`);
      return;
    }
    const reason = error.status === 413 ? "The example is too large for the service. " : "";
    this.placeMessages(error.errors, reason + error.message);
  }

  /** Each field's messages beside its control, in words ("Keys (K): …"), the rest (or `otherwise`) below. */
  placeMessages(errors, otherwise) {
    this.clearErrors();
    const fields = Object.entries(errors);
    const unplaced = [];
    for (const [field, messages] of fields) {
      const target = this.errorSlots.get(field) ?? this.errorSlots.get(field.split(".")[0]);
      if (target) {
        target.slot.textContent = `${target.label}: ${messages.join(" ")}`;
        target.control.setAttribute("aria-invalid", "true");
      } else {
        unplaced.push(`${field}: ${messages.join(" ")}`);
      }
    }
    if (!fields.length) {
      this.generalError.textContent = otherwise;
    } else if (unplaced.length) {
      this.generalError.textContent = unplaced.join(" ");
    }
  }
}

/** Registers a widget class under its tag, unless a widget of that name is already defined. */
export function defineWidget(widget) {
  if (!customElements.get(widget.tag)) customElements.define(widget.tag, widget);
}
