// Embeddable teaching widgets backed by the attention service. Dependency-free ES module:
//
//   <script type="module" src="http://HOST/static/widgets.js"></script>
//   <attention-heatmap data='{"tokens": ["the", "cat"], "query": [[0, 1], [1, 0]], ...}'></attention-heatmap>
//
// Attributes of every widget: `api` (the service's base URL; by default the origin this module came from),
// `data` (the example, as JSON) and `controls` (show the editors as well). Every number a widget shows is
// the service's answer; the widgets only lay it out (the likelihood widget's bigram logits aside).

import { ApiError, DEFAULT_BASE_URL, attention, logLikelihood, softmax } from "./client.js";

// ---------------------------------------------------------------------------------------------- helpers

/** Viridis (perceptually uniform, colour-blind safe) at t in [0, 1]: a polynomial fit of the matplotlib map. */
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

function h(tag, attributes = {}, ...children) {
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

function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

/** Numbers from "1 2, 3" text; what is not a number is kept as text so the service names the problem. */
function parseNumbers(text) {
  return text
    .trim()
    .split(/[\s,;]+/)
    .filter(Boolean)
    .map((word) => (/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(word) ? Number(word) : word));
}

function parseRows(text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean)
    .map(parseNumbers);
}

function rowsToText(rows) {
  return rows.map((row) => row.join(" ")).join("\n");
}

function words(text) {
  return text.trim().split(/\s+/).filter(Boolean);
}

/** A small seeded generator (mulberry32), so "random, seeded" examples are the same every time. */
function seededRandom(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let uid = 0;

const BASE_CSS = `
  :host { display: block; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
          color: #1b1b1f; --accent: #3b4cc0; --error: #a1001b; --muted: #5f6368; --line: #d8d8de; }
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
    border: 1px solid #9aa0a6; border-radius: 6px; padding: 4px 6px; background: #fff; color: inherit; max-width: 100%; }
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
  table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
  caption { text-align: left; font-weight: 600; padding-bottom: 4px; white-space: nowrap; }
  th { font-weight: 600; font-size: 13px; padding: 2px 6px; color: #333; }
  td { padding: 4px 6px; text-align: right; font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
`;

/** What every widget shares: a shadow root, the `api`/`data` attributes, requests that supersede each other,
 *  and error messages shown beside the control whose field the service blamed. */
class ServiceWidget extends HTMLElement {
  static observedAttributes = ["api", "data"];

  constructor() {
    super();
    this.attachShadow({ mode: "open" });
    this.errorSlots = new Map(); // request field -> { slot, control, label }
    this.pending = null;
    this.generation = 0;
  }

  get apiBase() {
    return this.getAttribute("api") || DEFAULT_BASE_URL;
  }

  get hasControls() {
    return this.hasAttribute("controls");
  }

  /**
   * The widget's data: the `data` attribute as given, or `example` when there is none. Given data is not
   * mixed with the example (the example's token labels would otherwise label the caller's numbers);
   * each widget supplies its own fallback for every optional field. Data missing a `required` field, or
   * not JSON, is reported and the example shown instead.
   */
  readData(example, required) {
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
    const missing = required.filter((name) => data?.[name] === undefined);
    if (data === null || typeof data !== "object" || missing.length) {
      this.dataError = `The data attribute needs ${required.join(", ")} (missing: ${missing.join(", ") || "all"}).`;
      return structuredClone(example);
    }
    return data;
  }

  connectedCallback() {
    if (!this.built) {
      this.built = true;
      this.build();
    }
    this.refresh();
  }

  attributeChangedCallback() {
    if (!this.built) return;
    this.build();
    this.refresh();
  }

  /** A labelled control with its error slot; `field` is the request field the service would blame. */
  control(labelText, input, { field = null, inline = false, hint = null } = {}) {
    const id = `w${++uid}`;
    input.id = id;
    const slot = h("p", { class: "error", id: `${id}-error`, role: "alert" });
    input.setAttribute("aria-describedby", `${id}-error`);
    if (field) this.errorSlots.set(field, { slot, control: input, label: labelText });
    const label = h("label", { for: id, text: labelText });
    const parts = inline && input.type === "checkbox" ? [input, label] : [label, input];
    return h("div", { class: `control${inline ? " inline" : ""}` }, ...parts, hint && h("span", { class: "muted", text: hint }), slot);
  }

  clearErrors() {
    for (const { slot, control } of this.errorSlots.values()) {
      slot.textContent = "";
      control.removeAttribute("aria-invalid");
    }
    this.generalError.textContent = "";
  }

  /** Puts each message beside the control of its field, in words ("Keys (K): …"); the rest goes below. */
  showError(error) {
    this.clearErrors();
    const fields = error instanceof ApiError ? Object.entries(error.fields) : [];
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
      const reason = error.status === 413 ? "The example is too large for the service. " : "";
      this.generalError.textContent = reason + error.message;
    } else if (unplaced.length) {
      this.generalError.textContent = unplaced.join(" ");
    }
  }

  /** Runs one round of requests; a newer round aborts the older one, and only the newest is shown. */
  async run(requests, show) {
    this.pending?.abort();
    const controller = new AbortController();
    this.pending = controller;
    const generation = ++this.generation;
    this.setAttribute("aria-busy", "true");
    try {
      const answers = await requests({ baseUrl: this.apiBase, signal: controller.signal });
      if (generation !== this.generation) return;
      this.clearErrors();
      this.output.classList.remove("stale");
      show(answers);
      this.dispatchEvent(new CustomEvent("answer", { detail: answers }));
    } catch (error) {
      if (error.name === "AbortError" || generation !== this.generation) return;
      this.output.classList.add("stale");
      this.showError(error);
    } finally {
      if (generation === this.generation) {
        this.removeAttribute("aria-busy");
        this.setAttribute("data-state", "ready");
      }
    }
  }

  /** Shadow root: styles, `body` (the controls and results of the widget) and the general error line. */
  frame(title, css, ...body) {
    this.generalError = h("p", { class: "error general", role: "alert" });
    if (this.dataError) this.generalError.textContent = this.dataError;
    this.shadowRoot.replaceChildren(
      h("style", { text: BASE_CSS + css }),
      h("section", { class: "card", "aria-label": title }, ...body, this.generalError),
    );
  }
}

// --------------------------------------------------------------------------------- <attention-heatmap>

const WORKED_EXAMPLE = {
  query_tokens: ["q"],
  key_tokens: ["k₁", "k₂"],
  query: [[0, 1]],
  key: [[1, 0], [0, 1]],
  value: [[6, 0], [0, 3]],
  causal: false,
  causal_alignment: "lower_right",
  scale: null,
  visible: null,
};

const RANDOM_SENTENCE = ["the", "cat", "sat", "on", "the", "mat"];

/** Masked scaled dot-product attention, step by step: QKᵀ, scaled, masked, weights (a heatmap), output. */
export class AttentionHeatmap extends ServiceWidget {
  static observedAttributes = ["api", "data", "controls"];

  build() {
    const data = this.readData(WORKED_EXAMPLE, ["query", "key", "value"]);
    const tokens = data.tokens ?? null;
    this.state = {
      queryTokens: data.query_tokens ?? tokens ?? data.query.map((_, i) => `q${i + 1}`),
      keyTokens: data.key_tokens ?? tokens ?? data.key.map((_, i) => `k${i + 1}`),
      query: data.query,
      key: data.key,
      value: data.value,
      causal: Boolean(data.causal),
      alignment: data.causal_alignment ?? "lower_right",
      scale: data.scale ?? null,
      visible: data.visible ?? null,
    };
    this.output = h("div", { class: "steps", "aria-live": "polite" });
    this.render();
  }

  render() {
    this.errorSlots.clear();
    const s = this.state;
    const controls = [];
    const causal = h("input", {
      type: "checkbox",
      checked: s.causal,
      onchange: (event) => {
        this.state.causal = event.target.checked;
        this.refresh();
      },
    });
    controls.push(this.control("Causal mask", causal, { field: "causal", inline: true }));
    if (this.hasControls) {
      const alignment = h(
        "select",
        { onchange: (event) => ((this.state.alignment = event.target.value), this.refresh()) },
        h("option", { value: "lower_right", text: "lower right (last query sees every key)", selected: s.alignment === "lower_right" }),
        h("option", { value: "upper_left", text: "upper left (query i sees keys 0…i)", selected: s.alignment === "upper_left" }),
      );
      controls.push(this.control("Causal alignment", alignment, { field: "causal_alignment" }));
      const laterScale = debounce(() => this.refresh(), 300);
      const scale = h("input", {
        type: "text",
        inputmode: "decimal",
        size: 8,
        placeholder: "1/√d_k",
        value: s.scale ?? "",
        oninput: (event) => {
          const text = event.target.value.trim();
          this.state.scale = text === "" ? null : parseNumbers(text)[0];
          laterScale();
        },
      });
      controls.push(this.control("Scale", scale, { field: "scale", hint: "empty = 1/√d_k" }));
    }
    const visibleKeys = h(
      "fieldset",
      { class: "keys" },
      h("legend", { text: "Visible keys" }),
      ...s.keyTokens.map((token, j) => {
        const box = h("input", {
          type: "checkbox",
          checked: this.isVisible(j),
          "data-key": j,
          onchange: (event) => {
            const visible = s.keyTokens.map((_, k) => this.isVisible(k));
            visible[j] = event.target.checked;
            this.state.visible = visible;
            this.refresh();
          },
        });
        return this.control(`${token} (${j + 1})`, box, { inline: true });
      }),
    );
    const maskSlot = h("p", { class: "error", role: "alert" });
    this.errorSlots.set("mask", { slot: maskSlot, control: visibleKeys, label: "Visible keys" });
    const editors = this.hasControls ? this.editors() : [];
    this.frame(
      "Attention",
      ATTENTION_CSS,
      ...editors,
      h("div", { class: "controls" }, ...controls, h("div", {}, visibleKeys, maskSlot)),
      this.output,
    );
  }

  editors() {
    const s = this.state;
    const matrix = (name, label, rows, field) =>
      this.control(label, h("textarea", { rows: Math.max(2, rows.length), cols: 16, spellcheck: "false", "data-matrix": name, text: rowsToText(rows) }), {
        field,
      });
    const queryTokens = h("input", { type: "text", value: s.queryTokens.join(" "), "data-tokens": "query", size: 24 });
    const keyTokens = h("input", { type: "text", value: s.keyTokens.join(" "), "data-tokens": "key", size: 24 });
    const seed = h("input", { type: "number", value: 7, min: 0, step: 1, style: "width: 6em" });
    const dim = h("input", { type: "number", value: 4, min: 1, max: 16, step: 1, style: "width: 5em" });
    const form = h(
      "form",
      {
        class: "editors",
        onsubmit: (event) => {
          event.preventDefault();
          this.applyEditors(form);
        },
      },
      h(
        "div",
        { class: "controls" },
        this.control("Query tokens (rows)", queryTokens, { hint: "separated by spaces" }),
        this.control("Key tokens (columns)", keyTokens),
      ),
      h(
        "div",
        { class: "controls" },
        matrix("query", "Queries Q (one row per query)", s.query, "query"),
        matrix("key", "Keys K (one row per key)", s.key, "key"),
        matrix("value", "Values V (one row per key)", s.value, "value"),
      ),
      h(
        "div",
        { class: "controls buttons" },
        h("button", { type: "submit", text: "Compute" }),
        h("button", { type: "button", text: "Worked example", onclick: () => this.loadExample(WORKED_EXAMPLE) }),
        this.control("Seed", seed, { inline: true }),
        this.control("d", dim, { inline: true }),
        h("button", {
          type: "button",
          text: "Random, seeded",
          onclick: () => this.loadExample(this.randomExample(Number(seed.value) || 0, Math.min(16, Math.max(1, Number(dim.value) || 4)))),
        }),
      ),
    );
    form.addEventListener("input", debounce(() => this.applyEditors(form), 400));
    return [form];
  }

  applyEditors(form) {
    const read = (name) => parseRows(form.querySelector(`[data-matrix=${name}]`).value);
    this.state.query = read("query");
    this.state.key = read("key");
    this.state.value = read("value");
    const queryTokens = words(form.querySelector("[data-tokens=query]").value);
    const keyTokens = words(form.querySelector("[data-tokens=key]").value);
    const keysChanged = keyTokens.length !== this.state.keyTokens.length || this.state.key.length !== this.state.keyTokens.length;
    this.state.queryTokens = queryTokens;
    this.state.keyTokens = keyTokens;
    if (keysChanged) {
      this.state.visible = null;
      this.renderKeepingFocus();
    }
    this.refresh();
  }

  renderKeepingFocus() {
    const active = this.shadowRoot.activeElement;
    const selector = active?.dataset.matrix ? `[data-matrix=${active.dataset.matrix}]` : active?.dataset.tokens ? `[data-tokens=${active.dataset.tokens}]` : null;
    const caret = active?.selectionStart;
    this.render();
    if (selector) {
      const again = this.shadowRoot.querySelector(selector);
      again.focus();
      if (caret !== undefined) again.setSelectionRange(caret, caret);
    }
  }

  randomExample(seed, d) {
    const random = seededRandom(seed);
    const matrix = (rows) => Array.from({ length: rows }, () => Array.from({ length: d }, () => Math.round((random() * 4 - 2) * 10) / 10));
    const n = RANDOM_SENTENCE.length;
    return { ...WORKED_EXAMPLE, query_tokens: RANDOM_SENTENCE, key_tokens: RANDOM_SENTENCE, query: matrix(n), key: matrix(n), value: matrix(n), causal: this.state.causal };
  }

  loadExample(example) {
    this.state = {
      ...this.state,
      queryTokens: [...example.query_tokens],
      keyTokens: [...example.key_tokens],
      query: example.query,
      key: example.key,
      value: example.value,
      scale: null,
      visible: null,
    };
    this.render();
    this.refresh();
  }

  isVisible(j) {
    return this.state.visible?.[j] ?? true;
  }

  label(tokens, i, prefix) {
    return tokens[i] ?? `${prefix}${i + 1}`;
  }

  refresh() {
    const s = this.state;
    const body = { query: s.query, key: s.key, value: s.value };
    const hidden = s.key.some((_, j) => !this.isVisible(j));
    const masked = { ...body, causal: s.causal, causal_alignment: s.alignment, empty_rows: "zero", include: ["weights", "scores"] };
    if (s.scale !== null) masked.scale = s.scale;
    if (hidden) masked.mask = s.query.map(() => s.key.map((_, j) => this.isVisible(j)));
    const scaled = { ...body, include: ["scores"] };
    if (s.scale !== null) scaled.scale = s.scale;
    // Raw dot products are the service's scores at scale 1 with nothing masked.
    const raw = { ...body, scale: 1, include: ["scores"] };
    this.run(
      async (options) => {
        const [final, unmasked, dots] = await Promise.all([attention(masked, options), attention(scaled, options), attention(raw, options)]);
        return { final, unmasked, dots };
      },
      (answers) => this.show(answers),
    );
  }

  show({ final, unmasked, dots }) {
    const s = this.state;
    const rows = final.weights.map((_, i) => this.label(s.queryTokens, i, "q"));
    const cols = final.weights[0].map((_, j) => this.label(s.keyTokens, j, "k"));
    const scale = formatNumber(final.scale);
    const steps = [
      matrixTable("raw", "1 · Raw dot products Q·Kᵀ", dots.scores, rows, cols),
      matrixTable("scaled", `2 · Scaled scores (× ${formatNumber(unmasked.scale)})`, unmasked.scores, rows, cols),
      matrixTable("masked", "3 · Masked scores (hidden = −∞)", final.scores, rows, cols),
      matrixTable("weights", "4 · Weights = softmax of each row", final.weights, rows, cols, { heat: true }),
      matrixTable(
        "output",
        "5 · Output = weights · V",
        final.output,
        rows,
        final.output[0].map((_, j) => `v${j + 1}`),
      ),
    ];
    const empty = final.empty_rows.map((index) => rows[index[index.length - 1]]);
    this.output.replaceChildren(
      h("p", { class: "muted", text: `Rows are queries, columns are keys; scale used: ${scale}. Scores are coloured from their smallest to their largest value, weights from 0 to 1. Hover a cell for its value.` }),
      h("div", { class: "grid" }, ...steps),
      h("div", { class: "legend", "aria-hidden": "true" }, h("span", { text: "weight 0" }), h("span", { class: "ramp" }), h("span", { text: "1" })),
      ...(empty.length ? [h("p", { class: "muted", text: `No visible key for ${empty.join(", ")}: its weights and output are zero.` })] : []),
    );
  }
}

function matrixTable(name, caption, values, rows, cols, { heat = false } = {}) {
  const finite = values.flat().filter((v) => v !== null);
  const lo = heat ? 0 : Math.min(...finite);
  const hi = heat ? 1 : Math.max(...finite);
  const cell = (value, i, j) => {
    const td = h("td", { text: formatNumber(value), title: `${rows[i]} → ${cols[j]}: ${value === null ? "−∞ (hidden)" : value}` });
    if (value === null) {
      td.className = "masked";
    } else if (name !== "output") {
      const colour = viridis(hi > lo ? (value - lo) / (hi - lo) : heat ? value : 0.5);
      td.style.background = colour.background;
      td.style.color = colour.text;
    }
    return td;
  };
  return h(
    "div",
    { class: `step scroll step-${name}` },
    h(
      "table",
      { "data-matrix": name },
      h("caption", { text: caption }),
      h("thead", {}, h("tr", {}, h("th", { scope: "col", class: "corner", text: name === "output" ? "query" : "query ╲ key" }), ...cols.map((c) => h("th", { scope: "col", text: c })))),
      h(
        "tbody",
        {},
        ...values.map((row, i) => h("tr", {}, h("th", { scope: "row", text: rows[i] }), ...row.map((value, j) => cell(value, i, j)))),
      ),
    ),
  );
}

const ATTENTION_CSS = `
  .grid { display: flex; flex-wrap: wrap; gap: 16px 22px; align-items: flex-start; }
  .step td { min-width: 4.2em; border: 1px solid #fff; }
  td.masked { background: repeating-linear-gradient(45deg, #eee, #eee 4px, #ddd 4px, #ddd 8px); color: #555; }
  .corner { color: var(--muted); font-weight: 400; }
  .keys { display: flex; flex-wrap: wrap; gap: 4px 12px; }
  .keys label { font-weight: 400; }
  .legend { display: flex; align-items: center; gap: 6px; margin-top: 10px; font-size: 12px; color: var(--muted); }
  .ramp { width: 160px; height: 10px; border-radius: 3px;
          background: linear-gradient(90deg, #440154, #3b528b, #21918c, #5ec962, #fde725); }
  .editors .buttons { align-items: center; }
`;

// ------------------------------------------------------------------------------- <softmax-temperature>

const SOFTMAX_EXAMPLE = {
  tokens: ["mat", "rug", "sofa", "roof", "moon"],
  logits: [3.2, 2.5, 1.9, 0.4, -1.5],
  temperature: 1,
  top_k: null,
  top_p: null,
};

/** A next-token distribution under a temperature slider (0 = greedy … 5), with top-k and top-p. */
export class SoftmaxTemperature extends ServiceWidget {
  static observedAttributes = ["api", "data", "controls"];

  build() {
    this.errorSlots.clear();
    const data = this.readData(SOFTMAX_EXAMPLE, ["logits"]);
    this.state = {
      tokens: data.tokens ?? data.logits.map((_, i) => `#${i}`),
      logits: data.logits,
      temperature: data.temperature ?? 1,
      top_k: data.top_k ?? null,
      top_p: data.top_p ?? null,
    };
    const s = this.state;
    this.output = h("div", { class: "bars", "aria-live": "polite" });
    const later = debounce(() => this.refresh(), 120);
    const shown = h("output", { text: s.temperature.toFixed(2) });
    const slider = h("input", {
      type: "range",
      min: 0,
      max: 5,
      step: 0.05,
      value: s.temperature,
      "aria-valuetext": `temperature ${s.temperature}`,
      oninput: (event) => {
        s.temperature = Number(event.target.value);
        shown.textContent = s.temperature.toFixed(2);
        event.target.setAttribute("aria-valuetext", s.temperature === 0 ? "temperature 0, greedy" : `temperature ${s.temperature}`);
        later();
      },
    });
    const optional = (key, parse) => (event) => {
      const text = event.target.value.trim();
      s[key] = text === "" ? null : parse(text);
      later();
    };
    const topK = h("input", { type: "number", min: 1, step: 1, value: s.top_k ?? "", placeholder: "off", style: "width: 6em", oninput: optional("top_k", Number) });
    const topP = h("input", { type: "number", min: 0.05, max: 1, step: 0.05, value: s.top_p ?? "", placeholder: "off", style: "width: 6em", oninput: optional("top_p", Number) });
    const editors = [];
    if (this.hasControls) {
      const tokens = h("input", { type: "text", size: 30, value: s.tokens.join(" "), oninput: (event) => ((s.tokens = words(event.target.value)), later()) });
      const logits = h("input", { type: "text", size: 30, value: s.logits.join(" "), oninput: (event) => ((s.logits = parseNumbers(event.target.value)), later()) });
      editors.push(
        h("div", { class: "controls" }, this.control("Tokens", tokens, { hint: "separated by spaces" }), this.control("Logits", logits, { field: "logits" })),
      );
    }
    const temperatureControl = this.control("Temperature", slider, { field: "temperature", hint: "0 = greedy (always the top token)" });
    temperatureControl.querySelector("label").append(" ", shown);
    this.summary = h("p", { class: "summary", "aria-live": "polite" });
    this.frame(
      "Softmax with temperature",
      SOFTMAX_CSS,
      ...editors,
      h("div", { class: "controls" }, temperatureControl, this.control("Top-k", topK, { field: "top_k" }), this.control("Top-p", topP, { field: "top_p" })),
      this.summary,
      this.output,
    );
  }

  refresh() {
    const s = this.state;
    const body = { logits: s.logits, temperature: s.temperature, include: ["log_probabilities"] };
    if (s.top_k !== null) body.top_k = s.top_k;
    if (s.top_p !== null) body.top_p = s.top_p;
    this.run((options) => softmax(body, options), (answer) => this.show(answer));
  }

  show(answer) {
    const s = this.state;
    const span = Math.max(...s.logits.map((x) => Math.abs(x)), 1e-9);
    const label = (i) => s.tokens[i] ?? `#${i}`;
    this.summary.replaceChildren(
      "Entropy ",
      h("strong", { class: "entropy", text: formatNumber(answer.entropy) }),
      " nats · most likely: ",
      h("strong", { class: "argmax", text: label(answer.argmax) }),
      ` · temperature ${formatNumber(answer.temperature, 2)}`,
    );
    const header = h("div", { class: "row head", "aria-hidden": "true" }, h("span", { text: "token" }), h("span", { text: "logit" }), h("span", { text: "probability" }));
    const rows = answer.probabilities.map((p, i) => {
      const logit = s.logits[i];
      const excluded = answer.log_probabilities?.[i] === null;
      return h(
        "div",
        { class: `row${i === answer.argmax ? " top" : ""}${excluded ? " excluded" : ""}`, "data-token": label(i), title: `${label(i)}: logit ${logit}, probability ${p}` },
        h("span", { class: "token", text: label(i) }),
        h(
          "span",
          { class: "logit" },
          h("span", { class: `bar ${logit < 0 ? "neg" : "pos"}`, style: `width: ${(50 * Math.abs(logit)) / span}%; ${logit < 0 ? "right: 50%" : "left: 50%"}` }),
          h("span", { class: "value", text: String(logit) }),
        ),
        h("span", { class: "prob" }, h("span", { class: "bar", style: `width: ${100 * p}%` }), h("span", { class: "value probability", text: formatNumber(p) })),
      );
    });
    this.output.replaceChildren(header, ...rows);
  }
}

const SOFTMAX_CSS = `
  .summary { margin: 4px 0 10px; }
  .bars { display: grid; gap: 4px; }
  .row { display: grid; grid-template-columns: minmax(4em, 8em) minmax(6em, 1fr) minmax(8em, 2fr); gap: 10px; align-items: center; }
  .row.head { font-size: 12px; color: var(--muted); }
  .row.top .token { font-weight: 700; }
  .row.excluded { color: var(--muted); }
  .token { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .logit, .prob { position: relative; height: 22px; background: #f3f3f6; border-radius: 4px; overflow: hidden; }
  .logit .bar { position: absolute; top: 0; bottom: 0; }
  .logit .bar.pos { background: #9ab0e8; } .logit .bar.neg { background: #e8b49a; }
  .logit::after { content: ""; position: absolute; left: 50%; top: 0; bottom: 0; border-left: 1px solid #888; }
  .prob .bar { position: absolute; left: 0; top: 0; bottom: 0; background: #21918c; }
  .value { position: relative; padding: 0 6px; font-size: 12px; line-height: 22px; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
  .prob .value { color: #111; background: rgba(255,255,255,0.75); border-radius: 3px; }
`;

// ----------------------------------------------------------------------------------- <token-likelihood>

// The built-in text the bigram model learns from: short, plain sentences with repeated patterns.
const CORPUS = `the cat sat on the mat . the dog sat on the rug . the cat saw the dog . the dog saw the cat .
a cat sat on a mat . the bird sat on the roof . the cat ate the fish . the dog ate the bone .
the bird saw the cat on the roof . the cat sat on the sofa . the dog slept on the rug .
the sun is warm . the cat is warm on the mat . the dog is happy . the bird is small .`;

const LIKELIHOOD_EXAMPLE = { text: "the cat sat on the rug .", corpus: CORPUS, smoothing: 0.1 };

function tokenize(text) {
  return text.toLowerCase().match(/[a-z0-9']+|[.,!?;:]/g) ?? [];
}

/** Logits of a bigram model with add-α smoothing: row t holds log(count(token t → v) + α) over the vocabulary. */
export function bigramLogits(corpus, tokens, smoothing = 0.1) {
  const training = tokenize(corpus);
  const vocabulary = [...new Set([...training, ...tokens])];
  const index = new Map(vocabulary.map((word, i) => [word, i]));
  const counts = vocabulary.map(() => new Array(vocabulary.length).fill(0));
  for (let t = 1; t < training.length; t++) counts[index.get(training[t - 1])][index.get(training[t])] += 1;
  const logits = tokens.map((word) => counts[index.get(word)].map((count) => Math.log(count + smoothing)));
  return { vocabulary, logits, targets: tokens.map((word) => index.get(word)) };
}

const RANK_BUCKETS = [
  { most: 1, label: "top 1", shade: 1.0 },
  { most: 3, label: "top 3", shade: 0.72 },
  { most: 10, label: "top 10", shade: 0.45 },
  { most: Infinity, label: "rank > 10", shade: 0.0 },
];

/** A text coloured by how likely each next token was (GLTR-style), with mean NLL and perplexity. */
export class TokenLikelihood extends ServiceWidget {
  static observedAttributes = ["api", "data", "controls"];

  build() {
    this.errorSlots.clear();
    // Either the logits and targets themselves, or a text scored by the built-in bigram model.
    const data = this.readData(LIKELIHOOD_EXAMPLE, []);
    this.state = {
      ...data,
      text: data.text ?? (data.logits ? undefined : LIKELIHOOD_EXAMPLE.text),
      corpus: data.corpus ?? CORPUS,
      smoothing: data.smoothing ?? LIKELIHOOD_EXAMPLE.smoothing,
    };
    this.output = h("div", { class: "result", "aria-live": "polite" });
    const editors = [];
    if (this.hasControls && !data.logits) {
      const later = debounce(() => this.refresh(), 300);
      const text = h("textarea", {
        rows: 2,
        cols: 48,
        text: this.state.text,
        // Read the value now: once dispatch ends, an event from a shadow tree no longer has a target.
        oninput: (event) => ((this.state.text = event.target.value), later()),
      });
      editors.push(this.control("Text", text, { field: "targets", hint: "scored by a bigram model of the built-in text" }));
      this.errorSlots.set("logits", this.errorSlots.get("targets"));
    }
    this.frame("Token likelihood", LIKELIHOOD_CSS, ...editors, this.output);
  }

  request() {
    const s = this.state;
    if (s.logits) return { tokens: s.tokens ?? s.targets.map(String), vocabulary: s.vocabulary ?? null, logits: s.logits, targets: s.targets };
    const tokens = tokenize(s.text);
    return { tokens, ...bigramLogits(s.corpus ?? CORPUS, tokens, s.smoothing ?? 0.1) };
  }

  refresh() {
    const { tokens, vocabulary, logits, targets } = this.request();
    if (tokens.length < 2) {
      // With the causal shift the first token is never scored: one token leaves nothing to ask about.
      this.output.replaceChildren();
      this.generalError.textContent = "Type at least two words: the first one is only context.";
      return;
    }
    const body = { logits, targets, shift: true, top_logprobs: 3 };
    this.run((options) => logLikelihood(body, options), (answer) => this.show(answer, tokens, vocabulary));
  }

  show(answer, tokens, vocabulary) {
    const name = (id) => vocabulary?.[id] ?? `#${id}`;
    const spans = tokens.map((token, t) => {
      const rank = answer.ranks[t];
      if (rank === null) return h("span", { class: "tok unscored", title: `${token}: the first token is not scored`, text: token });
      const bucket = RANK_BUCKETS.find((b) => rank <= b.most);
      const colour = viridis(bucket.shade);
      const guesses = (answer.top_logprobs?.[t] ?? []).map((g) => `${name(g.token)} (${formatNumber(g.logprob, 2)})`).join(", ");
      return h("span", {
        class: "tok",
        tabindex: 0,
        "data-rank": rank,
        style: `background: ${colour.background}; color: ${colour.text}`,
        title: `${token}: rank ${rank}, log-probability ${formatNumber(answer.token_logprobs[t])}; the model expected ${guesses}`,
        text: token,
      });
    });
    const stat = (label, value, cls) => h("div", { class: "stat" }, h("dt", { text: label }), h("dd", { class: cls, text: value }));
    this.output.replaceChildren(
      h("p", { class: "text" }, ...spans.flatMap((span) => [span, " "])),
      h(
        "div",
        { class: "legend" },
        ...RANK_BUCKETS.map((b) => {
          const colour = viridis(b.shade);
          return h("span", { class: "key", style: `background: ${colour.background}; color: ${colour.text}`, text: b.label });
        }),
        h("span", { class: "key unscored", text: "not scored" }),
      ),
      h(
        "dl",
        { class: "stats" },
        stat("mean NLL", `${formatNumber(answer.mean_nll)} nats`, "mean-nll"),
        stat("perplexity", formatNumber(answer.perplexity), "perplexity"),
        stat("log-likelihood", formatNumber(answer.log_likelihood), "log-likelihood"),
        stat("tokens scored", String(answer.num_tokens), "num-tokens"),
      ),
    );
  }
}

const LIKELIHOOD_CSS = `
  .text { font-size: 18px; line-height: 2.1; margin: 6px 0; }
  .tok { padding: 2px 5px; border-radius: 4px; }
  .unscored { background: #eee; color: #444; border: 1px dashed #999; }
  .legend { display: flex; flex-wrap: wrap; gap: 6px; font-size: 12px; }
  .legend .key { padding: 1px 6px; border-radius: 4px; }
  .stats { display: flex; flex-wrap: wrap; gap: 8px 24px; margin: 12px 0 0; }
  .stat dt { font-size: 12px; color: var(--muted); }
  .stat dd { margin: 0; font-weight: 700; font-variant-numeric: tabular-nums; }
`;

// ------------------------------------------------------------------------------------------ registration

for (const [name, widget] of [
  ["attention-heatmap", AttentionHeatmap],
  ["softmax-temperature", SoftmaxTemperature],
  ["token-likelihood", TokenLikelihood],
]) {
  if (!customElements.get(name)) customElements.define(name, widget);
}
