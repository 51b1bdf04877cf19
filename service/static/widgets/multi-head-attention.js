// <multi-head-attention>: a multi-head attention layer (Attention Is All You Need §3.2.2) on a few tokens:
// one heatmap of weights per head side by side, the heads' outputs concatenated, and the output projection.
// With grouped key/value heads (GQA) several query heads read one key/value head; the heads that share one
// are marked (the same colour, and a label that names the key/value head and its other readers).
//
// The token embeddings and projection weights are made up in the page from the seed (a word gets the same
// embedding wherever it stands); every number shown is the service's answer (/v1/multi-head-attention).

import { multiHeadAttention } from "../client.js";
import { block, formatNumber, h, readoutFor, ServiceWidget, streamSeed, wordHash, words } from "./base.js";
import { cellOf, keepCellFocus, MATRIX_CSS, matrixTable, weightLegend } from "./matrix.js";

const EXAMPLE = {
  tokens: ["the", "cat", "sat", "down"],
  num_heads: 4,
  num_kv_heads: 4,
  causal: true,
  seed: 1,
};

const HEAD_CHOICES = [2, 3, 4];
// One heatmap of tokens × tokens per head: beyond this many tokens they stop being readable, and a page of
// data with thousands of words would ask the browser for millions of cells (the service allows far more).
const MAX_TOKENS = 32;
const D_MODEL = 4; // the width of a token's embedding, and of the layer's output
const D_HEAD = 2; // d_k = d_v: the width of each head's queries, keys and values

// One colour per key/value head (Okabe–Ito: told apart with every common colour-vision deficiency); the
// label beside each heatmap says the same in words.
const KV_COLOURS = ["#e69f00", "#0072b2", "#009e73", "#cc79a7"];

// Which made-up numbers a stream of the generator draws: each matrix block has its own stream, so that a
// head's projection stays the same when the number of heads or key/value heads changes.
const STREAM = { embedding: 1, query: 2, key: 3, value: 4, output: 5 };

const CSS = `${MATRIX_CSS}
  .heads { display: flex; flex-wrap: wrap; gap: 10px; align-items: flex-start; margin: 6px 0 14px; }
  .head { border: 3px solid var(--kv); border-radius: 8px; padding: 4px; width: min-content;
          max-width: 100%; }
  .head td { min-width: 0; padding: 3px; font-size: 12px; }
  .head th { padding: 2px 4px; font-size: 12px; }
  .kv { display: flex; align-items: center; gap: 6px; font-size: 12px; color: #333; margin: 4px 0 0; }
  .swatch { width: 12px; height: 12px; border-radius: 2px; background: var(--kv); flex: none; }
  .head.shared .kv { font-weight: 600; }
  .groups { margin: 0 0 4px; }
  input[type=number] { width: 5.5em; }
`;

/** Blocks side by side: the rows of each, joined. */
function sideBySide(blocks, rows) {
  return Array.from({ length: rows }, (_, i) => blocks.flatMap((b) => b[i]));
}

/** A whole number from a text field, or null. */
function wholeNumber(text) {
  return /^\s*-?\d+\s*$/.test(text) ? Number(text) : null;
}

/** Key/value heads for a layer with grouped heads: half the query heads when that divides, else one (MQA). */
function groupedDefault(numHeads) {
  return numHeads % 2 === 0 && numHeads > 2 ? numHeads / 2 : 1;
}

/** A multi-head attention layer on a few tokens, from the service's answer. */
export class MultiHeadAttention extends ServiceWidget {
  static tag = "multi-head-attention";
  static title = "Multi-head attention";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];

  initialState(data) {
    const pick = (key) => data[key] ?? EXAMPLE[key];
    const numHeads = HEAD_CHOICES.includes(data.num_heads) ? data.num_heads : EXAMPLE.num_heads;
    if (data.num_heads !== undefined && numHeads !== data.num_heads) {
      const given = JSON.stringify(data.num_heads).slice(0, 20);
      this.reportData(`The data's num_heads is 2, 3 or 4 (not ${given}): ${numHeads} heads are shown.`);
    }
    const kv = data.num_kv_heads ?? numHeads;
    const tokens = Array.isArray(data.tokens) ? data.tokens.map(String) : EXAMPLE.tokens;
    if (data.tokens !== undefined && !Array.isArray(data.tokens)) {
      this.reportData(`The data's tokens are a list of words (["the", "cat"]): the example's are shown.`);
    }
    return {
      tokens,
      numHeads,
      gqa: kv !== numHeads,
      // As typed: the service names what is wrong with it (not a whole number, or not dividing the heads).
      kvText: String(kv === numHeads ? groupedDefault(numHeads) : kv),
      causal: Boolean(pick("causal")),
      seed: Number.isInteger(data.seed) ? data.seed : EXAMPLE.seed,
    };
  }

  /** The key/value heads the request asks for: as many as query heads without GQA, else the typed text. */
  get kvHeads() {
    const s = this.state;
    if (!s.gqa) return s.numHeads;
    return wholeNumber(s.kvText) ?? s.kvText;
  }

  controls() {
    const s = this.state;
    const later = this.updateLater(300);
    const tokens = h("input", {
      type: "text",
      size: 28,
      value: s.tokens.join(" "),
      oninput: (event) => {
        s.tokens = words(event.target.value);
        later();
      },
    });
    const heads = h(
      "select",
      {
        onchange: (event) => {
          s.numHeads = Number(event.target.value);
          s.kvText = String(groupedDefault(s.numHeads));
          this.kvInput.value = s.kvText;
          this.kvInput.max = s.numHeads;
          this.update();
        },
      },
      ...HEAD_CHOICES.map((n) => h("option", { value: n, text: String(n), selected: n === s.numHeads })),
    );
    this.kvInput = h("input", {
      type: "number",
      min: 1,
      max: s.numHeads,
      step: 1,
      value: s.kvText,
      disabled: !s.gqa,
      oninput: (event) => {
        s.kvText = event.target.value;
        later();
      },
    });
    const gqa = h("input", {
      type: "checkbox",
      checked: s.gqa,
      onchange: (event) => {
        s.gqa = event.target.checked;
        this.kvInput.disabled = !s.gqa;
        this.update();
      },
    });
    const causal = h("input", {
      type: "checkbox",
      checked: s.causal,
      onchange: (event) => {
        s.causal = event.target.checked;
        this.update();
      },
    });
    const seed = h("input", {
      type: "number",
      min: 0,
      step: 1,
      value: s.seed,
      oninput: (event) => {
        s.seed = Math.trunc(Number(event.target.value)) || 0;
        later();
      },
    });
    return [
      h(
        "div",
        { class: "controls" },
        this.control("Tokens", tokens, { field: "query", hint: "separated by spaces" }),
        this.control("Heads", heads, { field: "num_heads" }),
        this.control("Grouped key/value heads (GQA)", gqa, { inline: true }),
        this.control("Key/value heads", this.kvInput, {
          field: "num_kv_heads",
          hint: "must divide the heads",
        }),
        this.control("Causal mask", causal, { field: "causal", inline: true }),
        this.control("Seed", seed, { hint: "of the made-up embeddings and weights" }),
      ),
    ];
  }

  /** The layer's inputs, made up from the seed: embeddings per word, projections per head. */
  inputs() {
    const s = this.state;
    const heads = s.numHeads;
    const kv = this.kvHeads;
    // A count the service will refuse (not dividing the heads, or not a count) still needs arrays of some
    // shape to send; one key/value head's are small whatever was typed.
    const kvCount = Number.isInteger(kv) && kv >= 1 && kv <= heads ? kv : 1;
    // The first query head of each group keeps the key/value projection it had with a head of its own.
    const groupSize = Math.max(1, Math.floor(heads / kvCount));
    const projection = (stream, count, index) =>
      sideBySide(
        Array.from({ length: count }, (_, i) =>
          block(streamSeed(s.seed, stream, index(i)), D_MODEL, D_HEAD, 1.5),
        ),
        D_MODEL,
      );
    return {
      query: s.tokens.map(
        (word) => block(streamSeed(s.seed, STREAM.embedding, wordHash(word)), 1, D_MODEL, 1)[0],
      ),
      w_q: projection(STREAM.query, heads, (i) => i),
      w_k: projection(STREAM.key, kvCount, (g) => g * groupSize),
      w_v: projection(STREAM.value, kvCount, (g) => g * groupSize),
      w_o: Array.from({ length: heads }, (_, i) =>
        block(streamSeed(s.seed, STREAM.output, i), D_HEAD, D_MODEL, 1),
      ).flat(),
    };
  }

  request() {
    const s = this.state;
    if (!s.tokens.length) return "Type a few tokens, separated by spaces.";
    if (s.tokens.length > MAX_TOKENS) {
      return `The widget draws at most ${MAX_TOKENS} tokens (here ${s.tokens.length}): fewer, please.`;
    }
    const body = {
      ...this.inputs(),
      num_heads: s.numHeads,
      num_kv_heads: this.kvHeads,
      causal: s.causal,
      include: ["weights", "heads"],
    };
    const tokens = [...s.tokens];
    // The answer travels with what was asked: the labels and the grouping drawn are those of the request.
    return async (options) => ({ layer: await multiHeadAttention(body, options), body, tokens });
  }

  show({ layer: answer, body, tokens }) {
    const heads = body.num_heads;
    const kvHeads = body.num_kv_heads;
    const groupSize = heads / kvHeads;
    const rows = tokens;
    const readers = (g) =>
      Array.from({ length: heads }, (_, i) => i).filter((i) => Math.floor(i / groupSize) === g);
    const panels = answer.weights.map((weights, i) => {
      const g = Math.floor(i / groupSize);
      const others = readers(g).filter((j) => j !== i);
      const kvText = others.length
        ? `key/value head ${g}, shared with head ${others.join(", ")}`
        : `key/value head ${g}, its own`;
      return h(
        "div",
        {
          class: `head${others.length ? " shared" : ""}`,
          "data-head": i,
          "data-kv-head": g,
          style: `--kv: ${KV_COLOURS[g % KV_COLOURS.length]}`,
        },
        matrixTable({
          name: `weights-${i}`,
          caption: `Head ${i}`,
          values: weights,
          rows,
          cols: rows,
          colour: "unit",
          corner: "q ╲ k",
        }),
        h("p", { class: "kv" }, h("span", { class: "swatch", "aria-hidden": "true" }), kvText),
      );
    });
    const concatenated = answer.output.map((_, t) => answer.heads.flatMap((head) => head[t]));
    const headColumns = answer.heads.flatMap((head, i) => head[0].map((_, j) => `h${i}·${j + 1}`));
    const groups = Array.from(
      { length: kvHeads },
      (_, g) => `heads ${readers(g).join(", ")} read key/value head ${g}`,
    );
    const summary =
      kvHeads === heads
        ? `${heads} query heads, each with its own key/value head (multi-head attention).`
        : `${heads} query heads share ${kvHeads} key/value head${kvHeads > 1 ? "s" : ""} ` +
          `(${kvHeads === 1 ? "multi-query" : "grouped-query"} attention): ${groups.join("; ")}.`;
    const refocus = keepCellFocus(this.shadowRoot);
    const area = h(
      "div",
      {},
      h("div", { class: "heads" }, ...panels),
      h(
        "div",
        { class: "grid" },
        matrixTable({
          name: "heads",
          caption: "The heads' outputs, concatenated",
          values: concatenated,
          rows,
          cols: headColumns,
          colour: "none",
          corner: "token",
        }),
        matrixTable({
          name: "output",
          caption: "Output = concatenation · W_o",
          values: answer.output,
          rows,
          cols: answer.output[0].map((_, j) => `y${j + 1}`),
          colour: "none",
          corner: "token",
        }),
      ),
    );
    const readout = readoutFor(area, (element) => {
      const at = cellOf(element);
      if (!at) return null;
      const [kind, head] = at.matrix.split("-");
      const what = { weights: `Head ${head} weight`, heads: "Head output", output: "Output" }[kind];
      return `${what} ${at.cell.title}`;
    });
    const intro =
      `Each head projects the tokens to its own queries, keys and values (d_k = ${D_HEAD}), scales their ` +
      `dot products by ${formatNumber(answer.scale)} and takes a softmax per row: the weights of each ` +
      "query (q, a row) over the keys (k, the columns), coloured from 0 to 1. Hover over a cell, or move " +
      "to it with Tab and the arrow keys, for its value.";
    this.output.replaceChildren(
      h("p", { class: "muted", text: intro }),
      h("p", { class: "groups", text: summary }),
      area,
      readout,
      weightLegend(),
    );
    refocus();
  }
}
