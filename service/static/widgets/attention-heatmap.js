// <attention-heatmap>: masked scaled dot-product attention, step by step: QKᵀ, scaled, masked, the weights
// (a heatmap) and the output. Every cell's full value shows on hover and on keyboard focus (matrix.js).

import { attention } from "../client.js";
import {
  debounce,
  FIELD,
  formatNumber,
  h,
  parseNumbers,
  readoutFor,
  ServiceWidget,
  seededRandom,
  words,
} from "./base.js";
import { cellOf, keepCellFocus, MATRIX_CSS, matrixTable, weightLegend } from "./matrix.js";

const WORKED_EXAMPLE = {
  query_tokens: ["q"],
  key_tokens: ["k₁", "k₂"],
  query: [[0, 1]],
  key: [
    [1, 0],
    [0, 1],
  ],
  value: [
    [6, 0],
    [0, 3],
  ],
  causal: false,
  causal_alignment: "lower_right",
  scale: null,
  visible: null,
};

const RANDOM_SENTENCE = ["the", "cat", "sat", "on", "the", "mat"];

// What one cell of each step is, for the line that shows the focused or hovered cell's value.
const CELL_NAMES = {
  raw: "Raw dot product",
  scaled: "Scaled score",
  masked: "Masked score",
  weights: "Weight",
  output: "Output",
};

const CSS = `${MATRIX_CSS}
  .keys { display: flex; flex-wrap: wrap; gap: 4px 12px; }
  .keys label { font-weight: 400; }
  .editors .buttons { align-items: center; }
`;

/** Rows of numbers, one per line of `text`. */
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

/** Masked scaled dot-product attention, step by step, from the service's answers. */
export class AttentionHeatmap extends ServiceWidget {
  static tag = "attention-heatmap";
  static title = "Attention";
  static css = CSS;
  static example = WORKED_EXAMPLE;
  static required = ["query", "key", "value"];
  static fields = {
    query: FIELD.vectorOrMatrix, // one query ([0, 1]), as /v1/attention takes it, is one row
    key: FIELD.matrix,
    value: FIELD.matrix,
    tokens: FIELD.words,
    query_tokens: FIELD.words,
    key_tokens: FIELD.words,
    causal: FIELD.boolean,
    causal_alignment: FIELD.text,
    scale: FIELD.number,
    visible: FIELD.flags,
  };

  initialState(data) {
    const tokens = data.tokens ?? null;
    const query = typeof data.query[0] === "number" ? [data.query] : data.query;
    return {
      queryTokens: data.query_tokens ?? tokens ?? query.map((_, i) => `q${i + 1}`),
      keyTokens: data.key_tokens ?? tokens ?? data.key.map((_, i) => `k${i + 1}`),
      query,
      key: data.key,
      value: data.value,
      causal: Boolean(data.causal),
      alignment: data.causal_alignment ?? "lower_right",
      scale: data.scale ?? null,
      visible: data.visible ?? null,
    };
  }

  controls() {
    const s = this.state;
    const controls = [];
    const causal = h("input", {
      type: "checkbox",
      checked: s.causal,
      onchange: (event) => {
        this.state.causal = event.target.checked;
        this.update();
      },
    });
    controls.push(this.control("Causal mask", causal, { field: "causal", inline: true }));
    if (this.hasControls) {
      const option = (value, text) => h("option", { value, text, selected: s.alignment === value });
      const alignment = h(
        "select",
        {
          onchange: (event) => {
            this.state.alignment = event.target.value;
            this.update();
          },
        },
        option("lower_right", "lower right (last query sees every key)"),
        option("upper_left", "upper left (query i sees keys 0…i)"),
      );
      controls.push(this.control("Causal alignment", alignment, { field: "causal_alignment" }));
      const laterScale = this.updateLater(300);
      const scale = h("input", {
        type: "text",
        inputmode: "decimal",
        size: 8,
        placeholder: "1/√d_k",
        value: s.scale ?? "",
        oninput: (event) => {
          const text = event.target.value.trim();
          this.state.scale = text === "" ? null : this.readNumbers("scale", text)[0];
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
            this.update();
          },
        });
        return this.control(`${token} (${j + 1})`, box, { inline: true });
      }),
    );
    const maskSlot = h("p", { class: "error", role: "alert" });
    this.errorSlots.set("mask", { slot: maskSlot, control: visibleKeys, label: "Visible keys" });
    const editors = this.hasControls ? [this.editors()] : [];
    return [...editors, h("div", { class: "controls" }, ...controls, h("div", {}, visibleKeys, maskSlot))];
  }

  editors() {
    const s = this.state;
    const matrix = (name, label, rows, field) => {
      const rowCount = Math.max(2, rows.length);
      const attributes = { rows: rowCount, cols: 16, spellcheck: "false", "data-matrix": name };
      return this.control(label, h("textarea", { ...attributes, text: rowsToText(rows) }), { field });
    };
    const tokens = (which, size) =>
      h("input", { type: "text", value: s[`${which}Tokens`].join(" "), "data-tokens": which, size });
    const seed = h("input", { type: "number", value: 7, min: 0, step: 1, style: "width: 6em" });
    const dim = h("input", { type: "number", value: 4, min: 1, max: 16, step: 1, style: "width: 5em" });
    const random = () => {
      const d = Math.min(16, Math.max(1, Number(dim.value) || 4));
      this.loadExample(this.randomExample(Number(seed.value) || 0, d));
    };
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
        this.control("Query tokens (rows)", tokens("query", 24), { hint: "separated by spaces" }),
        this.control("Key tokens (columns)", tokens("key", 24)),
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
        h("button", {
          type: "button",
          text: "Worked example",
          onclick: () => this.loadExample(WORKED_EXAMPLE),
        }),
        this.control("Seed", seed, { inline: true }),
        this.control("d", dim, { inline: true }),
        h("button", { type: "button", text: "Random, seeded", onclick: random }),
      ),
    );
    const later = debounce(() => this.applyEditors(form), 400);
    form.addEventListener("input", () => {
      this.outdate(); // the matrices being typed are the state now, though read only when typing pauses
      later();
    });
    return form;
  }

  applyEditors(form) {
    const read = (name) =>
      this.readNumbers(name, form.querySelector(`[data-matrix=${name}]`).value, parseRows);
    const s = this.state;
    s.query = read("query");
    s.key = read("key");
    s.value = read("value");
    const queryTokens = words(form.querySelector("[data-tokens=query]").value);
    const keyTokens = words(form.querySelector("[data-tokens=key]").value);
    const keysChanged = keyTokens.length !== s.keyTokens.length || s.key.length !== s.keyTokens.length;
    s.queryTokens = queryTokens;
    s.keyTokens = keyTokens;
    if (keysChanged) {
      s.visible = null;
      this.renderKeepingFocus();
    }
    this.update();
  }

  /** A new card (one visibility toggle per key) without losing the editor the user is typing in. */
  renderKeepingFocus() {
    const active = this.shadowRoot.activeElement;
    const { matrix, tokens } = active?.dataset ?? {};
    const selector = matrix ? `[data-matrix=${matrix}]` : tokens ? `[data-tokens=${tokens}]` : null;
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
    const entry = () => Math.round((random() * 4 - 2) * 10) / 10;
    const matrix = (rows) => Array.from({ length: rows }, () => Array.from({ length: d }, entry));
    const n = RANDOM_SENTENCE.length;
    return {
      ...WORKED_EXAMPLE,
      query_tokens: RANDOM_SENTENCE,
      key_tokens: RANDOM_SENTENCE,
      query: matrix(n),
      key: matrix(n),
      value: matrix(n),
      causal: this.state.causal,
    };
  }

  loadExample(example) {
    this.inputProblems.clear(); // the editors are drawn anew from the example
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
    this.update();
  }

  isVisible(j) {
    return this.state.visible?.[j] ?? true;
  }

  request() {
    const s = this.state;
    const body = { query: s.query, key: s.key, value: s.value };
    const hidden = s.key.some((_, j) => !this.isVisible(j));
    const masked = {
      ...body,
      causal: s.causal,
      causal_alignment: s.alignment,
      empty_rows: "zero",
      include: ["weights", "scores"],
    };
    if (s.scale !== null) masked.scale = s.scale;
    if (hidden) masked.mask = s.query.map(() => s.key.map((_, j) => this.isVisible(j)));
    const scaled = { ...body, include: ["scores"] };
    if (s.scale !== null) scaled.scale = s.scale;
    // Raw dot products are the service's scores at scale 1 with nothing masked.
    const raw = { ...body, scale: 1, include: ["scores"] };
    return async (options) => {
      const [final, unmasked, dots] = await Promise.all([
        attention(masked, options),
        attention(scaled, options),
        attention(raw, options),
      ]);
      return { final, unmasked, dots };
    };
  }

  show({ final, unmasked, dots }) {
    const s = this.state;
    const label = (tokens, i, prefix) => tokens[i] ?? `${prefix}${i + 1}`;
    const rows = final.weights.map((_, i) => label(s.queryTokens, i, "q"));
    const keys = final.weights[0].map((_, j) => label(s.keyTokens, j, "k"));
    const dimensions = final.output[0].map((_, j) => `v${j + 1}`);
    const step = (name, caption, values, cols, colour) =>
      matrixTable({ name, caption, values, rows, cols, colour, corner: "query ╲ key" });
    const steps = [
      step("raw", "1 · Raw dot products Q·Kᵀ", dots.scores, keys),
      step("scaled", `2 · Scaled scores (× ${formatNumber(unmasked.scale)})`, unmasked.scores, keys),
      step("masked", "3 · Masked scores (hidden = −∞)", final.scores, keys),
      step("weights", "4 · Weights = softmax of each row", final.weights, keys, "unit"),
      matrixTable({
        name: "output",
        caption: "5 · Output = weights · V",
        values: final.output,
        rows,
        cols: dimensions,
        colour: "none",
        corner: "query",
      }),
    ];
    const empty = final.empty_rows.map((index) => rows[index[index.length - 1]]);
    const refocus = keepCellFocus(this.shadowRoot);
    const grid = h("div", { class: "grid" }, ...steps);
    const readout = readoutFor(grid, (element) => {
      const at = cellOf(element);
      return at && `${CELL_NAMES[at.matrix]} ${at.cell.title}`;
    });
    const intro =
      `Rows are queries, columns are keys; scale used: ${formatNumber(final.scale)}. Scores are coloured ` +
      "from their smallest to their largest value, weights from 0 to 1. Hover over a cell, or move to it " +
      "with Tab and the arrow keys, for its value.";
    this.output.replaceChildren(
      h("p", { class: "muted", text: intro }),
      grid,
      readout,
      weightLegend(),
      ...(empty.length
        ? [
            h("p", {
              class: "muted",
              text: `No visible key for ${empty.join(", ")}: its weights and output are zero.`,
            }),
          ]
        : []),
    );
    refocus();
  }
}
