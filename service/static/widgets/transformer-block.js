// <transformer-block>: one Transformer block on a few tokens, stage by stage: normalization, attention (one
// heatmap per head), the residual add, normalization, the feed-forward layer and its residual add, each stage
// a small table with its shape. Pre-norm (GPT-2, LLaMA) or post-norm (Attention Is All You Need §3.1), and
// the feed-forward layer's activation, are controls.
//
// The token embeddings and every weight are made up in the page from the seed; every number shown is the
// service's answer. The stages are the answers of the layers' own endpoints, each fed the answer before it
// (/v1/layer-norm, /v1/multi-head-attention, /v1/feed-forward); the residual stream h and the output are the
// answer of /v1/transformer-block to the whole block, which the stages add up to.

import { feedForward, layerNorm, multiHeadAttention, transformerBlock } from "../client.js";
import { block, h, readoutFor, ServiceWidget, streamSeed, wordHash, words } from "./base.js";
import { cellOf, keepCellFocus, MATRIX_CSS, matrixTable, weightLegend } from "./matrix.js";

const EXAMPLE = {
  tokens: ["the", "cat", "sat"],
  norm_position: "pre",
  activation: "gelu",
  norm: "layer",
  num_heads: 2,
  causal: true,
  seed: 1,
};

const ACTIVATIONS = ["relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu"];
const GATED = ["swiglu", "geglu"];
const HEAD_CHOICES = [1, 2, 4];
const NORMS = { layer: "LayerNorm", rms: "RMSNorm" };
// Each stage is a table per token: beyond this many tokens the page stops being readable.
const MAX_TOKENS = 16;
const D_MODEL = 4; // a token's width, in and out of the block (the residual stream)
const D_FF = 8; // the feed-forward layer's hidden width

// Which made-up numbers a stream of the generator draws: each matrix has its own, so that changing the
// activation or the norm position leaves the embeddings and the attention weights as they were.
const STREAM = { embedding: 1, w_q: 2, w_k: 3, w_v: 4, w_o: 5, w_1: 6, w_2: 7, w_3: 8, norm: 9 };

const CSS = `${MATRIX_CSS}
  .flow { display: flex; flex-direction: column; gap: 8px; }
  .stage { border-left: 4px solid var(--line); padding: 2px 0 6px 10px; }
  .stage.residual { border-left-color: var(--accent); }
  .stage h4 { margin: 0 0 4px; font-size: 14px; }
  .stage .shape { color: var(--muted); font-weight: 400; font-family: ui-monospace, monospace; }
  .heads { display: flex; flex-wrap: wrap; gap: 10px; }
  .stage td { min-width: 0; padding: 3px 5px; font-size: 12px; }
  .arrow { color: var(--muted); margin: 0 0 0 12px; font-size: 13px; }
`;

/** A select of `choices` (value → label), `selected` chosen, calling `change(value)`. */
function choose(choices, selected, change) {
  return h(
    "select",
    { onchange: (event) => change(event.target.value) },
    ...Object.entries(choices).map(([value, label]) =>
      h("option", { value, text: label, selected: value === String(selected) }),
    ),
  );
}

/** One Transformer block on a few tokens, every stage from the service's answers. */
export class TransformerBlock extends ServiceWidget {
  static tag = "transformer-block";
  static title = "A Transformer block";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];

  initialState(data) {
    const tokens = Array.isArray(data.tokens) ? data.tokens.map(String) : EXAMPLE.tokens;
    if (data.tokens !== undefined && !Array.isArray(data.tokens)) {
      this.reportData(`The data's tokens are a list of words (["the", "cat"]): the example's are shown.`);
    }
    const pick = (key, allowed) => {
      const value = data[key] ?? EXAMPLE[key];
      if (allowed.includes(value)) return value;
      const given = JSON.stringify(value).slice(0, 20);
      this.reportData(
        `The data's ${key} is one of ${allowed.join(", ")} (not ${given}): ${EXAMPLE[key]} is shown.`,
      );
      return EXAMPLE[key];
    };
    return {
      tokens,
      normPosition: pick("norm_position", ["pre", "post"]),
      activation: pick("activation", ACTIVATIONS),
      norm: pick("norm", Object.keys(NORMS)),
      numHeads: pick("num_heads", HEAD_CHOICES),
      causal: Boolean(data.causal ?? EXAMPLE.causal),
      seed: Number.isInteger(data.seed) ? data.seed : EXAMPLE.seed,
    };
  }

  controls() {
    const s = this.state;
    const later = this.updateLater(300);
    const set =
      (key, convert = (value) => value) =>
      (value) => {
        s[key] = convert(value);
        this.update();
      };
    const tokens = h("input", {
      type: "text",
      size: 24,
      value: s.tokens.join(" "),
      oninput: (event) => {
        s.tokens = words(event.target.value);
        later();
      },
    });
    const causal = h("input", {
      type: "checkbox",
      checked: s.causal,
      onchange: (event) => set("causal")(event.target.checked),
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
    const activations = Object.fromEntries(ACTIVATIONS.map((name) => [name, name]));
    const heads = Object.fromEntries(HEAD_CHOICES.map((n) => [n, String(n)]));
    return [
      h(
        "div",
        { class: "controls" },
        this.control("Tokens", tokens, { field: "x", hint: "separated by spaces" }),
        this.control(
          "Normalization",
          choose(
            { pre: "pre-norm (GPT-2, LLaMA)", post: "post-norm (the 2017 paper)" },
            s.normPosition,
            set("normPosition"),
          ),
          { field: "norm_position" },
        ),
        this.control("Norm", choose(NORMS, s.norm, set("norm")), { field: "norm_1.kind" }),
        this.control("Activation", choose(activations, s.activation, set("activation")), {
          field: "feed_forward.activation",
        }),
        this.control("Heads", choose(heads, s.numHeads, set("numHeads", Number)), {
          field: "attention.num_heads",
        }),
        this.control("Causal mask", causal, { field: "attention.causal", inline: true }),
        this.control("Seed", seed, { hint: "of the made-up embeddings and weights" }),
      ),
    ];
  }

  /** The block's body, made up from the seed: embeddings per word, weights per matrix. */
  body() {
    const s = this.state;
    const seeded = (stream, rows, cols, spread) => block(streamSeed(s.seed, stream), rows, cols, spread);
    const norm = () => {
      const parts = { kind: s.norm, weight: seeded(STREAM.norm, 1, D_MODEL, 1)[0].map((w) => 1 + w / 4) };
      return s.norm === "layer" ? { ...parts, bias: seeded(STREAM.norm + 10, 1, D_MODEL, 0.2)[0] } : parts;
    };
    const feed = {
      w_1: seeded(STREAM.w_1, D_MODEL, D_FF, 1),
      w_2: seeded(STREAM.w_2, D_FF, D_MODEL, 0.5),
      activation: s.activation,
    };
    if (GATED.includes(s.activation)) feed.w_3 = seeded(STREAM.w_3, D_MODEL, D_FF, 1);
    return {
      x: s.tokens.map(
        (word) => block(streamSeed(s.seed, STREAM.embedding, wordHash(word)), 1, D_MODEL, 1)[0],
      ),
      attention: {
        w_q: seeded(STREAM.w_q, D_MODEL, D_MODEL, 1),
        w_k: seeded(STREAM.w_k, D_MODEL, D_MODEL, 1),
        w_v: seeded(STREAM.w_v, D_MODEL, D_MODEL, 1),
        w_o: seeded(STREAM.w_o, D_MODEL, D_MODEL, 0.5),
        num_heads: s.numHeads,
        causal: s.causal,
      },
      feed_forward: feed,
      norm_1: norm(),
      norm_2: norm(),
      norm_position: s.normPosition,
    };
  }

  request() {
    const s = this.state;
    if (!s.tokens.length) return "Type a few tokens, separated by spaces.";
    if (s.tokens.length > MAX_TOKENS) {
      return `The widget draws at most ${MAX_TOKENS} tokens (here ${s.tokens.length}): fewer, please.`;
    }
    const body = this.body();
    const tokens = [...s.tokens];
    return async (options) => {
      const whole = transformerBlock({ ...body, include: ["weights", "residual"] }, options);
      const attend = (query) =>
        multiHeadAttention({ query, ...body.attention, include: ["weights"] }, options);
      const feed = (x) => feedForward({ x, ...body.feed_forward, include: ["hidden"] }, options);
      const normalize = (x, norm) => layerNorm({ x, ...norm }, options);
      let stages;
      // `whole` is awaited beside the first stages (Promise.all), never after them: had they failed first
      // (a refusal, or the round aborted), its own rejection would go unhandled.
      if (body.norm_position === "pre") {
        const firstStages = async () => {
          const normed = await normalize(body.x, body.norm_1);
          return [normed, await attend(normed.output)];
        };
        const [[normed, attention], block] = await Promise.all([firstStages(), whole]);
        const normed2 = await normalize(block.residual, body.norm_2);
        const ff = await feed(normed2.output);
        stages = { normed, attention, block, normed2, ff };
      } else {
        const [attention, block] = await Promise.all([attend(body.x), whole]);
        const ff = await feed(block.residual);
        stages = { attention, block, ff };
      }
      // The answer travels with what was asked: the labels and shapes drawn are those of the request.
      return { ...stages, body, tokens };
    };
  }

  show({ normed, attention, block, normed2, ff, body, tokens }) {
    const n = tokens.length;
    const features = (prefix, count) => Array.from({ length: count }, (_, j) => `${prefix}${j + 1}`);
    const norm = NORMS[body.norm_1.kind];
    const stage = (
      name,
      title,
      values,
      { cols = features("d", D_MODEL), residual = false, note = null } = {},
    ) =>
      h(
        "section",
        { class: `stage${residual ? " residual" : ""}`, "data-stage": name },
        h("h4", {}, `${title} `, h("span", { class: "shape", text: `[${n} × ${values[0].length}]` })),
        note ? h("p", { class: "muted", text: note }) : null,
        matrixTable({ name, caption: title, values, rows: tokens, cols, colour: "none", corner: "token" }),
      );
    const heads = h(
      "section",
      { class: "stage", "data-stage": "weights" },
      h(
        "h4",
        {},
        "Attention weights, one heatmap per head ",
        h("span", { class: "shape", text: `[${block.weights.length} × ${n} × ${n}]` }),
      ),
      h(
        "div",
        { class: "heads" },
        ...block.weights.map((weights, i) =>
          matrixTable({
            name: `weights-${i}`,
            caption: `Head ${i}`,
            values: weights,
            rows: tokens,
            cols: tokens,
            colour: "unit",
            corner: "q ╲ k",
          }),
        ),
      ),
    );
    const x = stage("x", "x: the tokens' vectors (made up)", body.x);
    const activation = body.feed_forward.activation;
    const hidden = stage(
      "hidden",
      `Hidden: ${activation}(x · W₁)${GATED.includes(activation) ? " ⊙ (x · W₃)" : ""}`,
      ff.hidden,
      {
        cols: features("f", D_FF),
      },
    );
    const flow =
      body.norm_position === "pre"
        ? [
            x,
            stage("norm_1", `norm₁(x): ${norm}`, normed.output),
            heads,
            stage("attention", "Attention(norm₁(x))", attention.output),
            stage("residual", "h = x + attention", block.residual, { residual: true }),
            stage("norm_2", `norm₂(h): ${norm}`, normed2.output),
            hidden,
            stage("feed_forward", "FeedForward(norm₂(h))", ff.output),
            stage("output", "y = h + feed-forward", block.output, { residual: true }),
          ]
        : [
            x,
            heads,
            stage("attention", "Attention(x)", attention.output),
            stage("residual", `h = norm₁(x + attention): ${norm}`, block.residual, { residual: true }),
            hidden,
            stage("feed_forward", "FeedForward(h)", ff.output),
            stage("output", `y = norm₂(h + feed-forward): ${norm}`, block.output, { residual: true }),
          ];
    const refocus = keepCellFocus(this.shadowRoot);
    const area = h("div", { class: "flow" }, ...flow);
    const readout = readoutFor(area, (element) => {
      const at = cellOf(element);
      return at ? `${at.matrix}: ${at.cell.title}` : null;
    });
    const intro =
      body.norm_position === "pre"
        ? "Pre-norm: each sublayer reads a normalized copy of the residual stream and adds its result to it."
        : "Post-norm: each sublayer's result is added to its input, and the sum is normalized.";
    this.output.replaceChildren(
      h("p", {
        class: "muted",
        text: `${intro} Hover over a cell, or reach it with Tab and the arrow keys, for its value.`,
      }),
      area,
      readout,
      weightLegend(),
    );
    refocus();
  }
}
