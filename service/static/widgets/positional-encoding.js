// <positional-encoding>: how a model is told where each token is, in three views, every number the service's:
//
//   1. the sinusoidal table of Attention Is All You Need §3.5 as a heatmap (positions × dimensions);
//   2. rotary (RoPE): one vector x placed at positions 0 … n − 1, and how one pair of its dimensions turns
//      with the position (points on a circle: the service's rotated coordinates);
//   3. why rotary: the same q at every position and the same k at every position give scores q·k that
//      depend on the distance i − j only (equal along each diagonal), which adding the table does not.
//
// The vectors x, q and k are generated in the page from a seed; the tables and scores are the service's.

import { attention, positionalEncoding } from "../client.js";
import { formatNumber, h, parseNumbers, readoutFor, ServiceWidget, seededRandom, viridis } from "./base.js";
import { cellOf, keepCellFocus, MATRIX_CSS, matrixTable } from "./matrix.js";

const EXAMPLE = { length: 8, d_model: 8, base: 10000, style: "half", pair: 0, seed: 1 };

// The tables draw one cell per number: beyond this many positions or dimensions they stop being readable
// (the service itself allows far larger tables).
const MAX_SHOWN = 32;

const SVG_NS = "http://www.w3.org/2000/svg";

const CSS = `${MATRIX_CSS}
  .controls input[type=number] { width: 6.5em; }
  th.corner { white-space: nowrap; }
  .part + .part { margin-top: 18px; border-top: 1px solid var(--line); padding-top: 10px; }
  h3 { font-size: 15px; margin: 0 0 4px; }
  .part > p.muted { margin: 0 0 8px; max-width: 60em; }
  .rotation { display: flex; flex-wrap: wrap; gap: 12px 22px; align-items: flex-start; }
  svg.circle { width: 220px; height: 220px; flex: none; }
  .orbit { fill: none; stroke: #9aa0a6; stroke-width: 1.2; stroke-dasharray: 4 3; }
  .axis { stroke: #d0d0d6; stroke-width: 1; }
  .spoke { stroke-width: 1.8; }
  .point { stroke: #fff; stroke-width: 1.5; }
  .point.current { stroke: #111; stroke-width: 3; }
  .label { font-size: 12px; text-anchor: middle; dominant-baseline: central; fill: #333; }
`;

/** An SVG element (h() makes HTML ones): attributes as given, children appended. */
function svg(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

/** A number typed into a control: empty is null; what is not a number is kept, for the service to name. */
function typedNumber(text) {
  return text.trim() === "" ? null : parseNumbers(text)[0];
}

/** The two features that rotary rotates together as pair i of d: i and i + d/2, or 2i and 2i + 1. */
function pairFeatures(style, pair, d) {
  return style === "interleaved" ? [2 * pair, 2 * pair + 1] : [pair, pair + d / 2];
}

/** Sinusoidal and rotary positional encodings, and why rotary makes q·k depend on the distance only. */
export class PositionalEncoding extends ServiceWidget {
  static tag = "positional-encoding";
  static title = "Positional encodings: sinusoidal and rotary";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];

  initialState(data) {
    const pick = (key) => (data[key] === undefined ? EXAMPLE[key] : data[key]);
    return {
      length: pick("length"),
      d_model: pick("d_model"),
      base: pick("base"),
      style: pick("style"),
      pair: pick("pair"),
      seed: pick("seed"),
    };
  }

  controls() {
    const s = this.state;
    const later = this.updateLater(300);
    const number = (key, limits) =>
      h("input", {
        type: "number",
        ...limits,
        value: s[key] ?? "",
        oninput: (event) => {
          s[key] = typedNumber(event.target.value);
          later();
        },
      });
    const option = (value, text) => h("option", { value, text, selected: s.style === value });
    const style = h(
      "select",
      {
        onchange: (event) => {
          s.style = event.target.value;
          this.update();
        },
      },
      option("half", "half (GPT-NeoX, Llama): i with i + d/2"),
      option("interleaved", "interleaved (GPT-J, RoFormer): 2i with 2i + 1"),
    );
    const laterPair = this.updateLater(120);
    // Its range follows d_model once the service has accepted one (show() sets max and the text).
    this.pairSlider = h("input", {
      type: "range",
      min: 0,
      max: Math.max(0, Math.floor((Number(s.d_model) || 2) / 2) - 1),
      step: 1,
      value: s.pair,
      oninput: (event) => {
        s.pair = Number(event.target.value);
        laterPair();
      },
    });
    this.pairText = h("span", { class: "muted" });
    const pairControl = this.control("Pair i", this.pairSlider);
    pairControl.insertBefore(this.pairText, pairControl.lastChild); // before its error slot
    return [
      h(
        "div",
        { class: "controls" },
        this.control("Positions (length)", number("length", { min: 1, max: MAX_SHOWN, step: 1 }), {
          field: "length",
        }),
        this.control("Dimensions (d_model)", number("d_model", { min: 2, max: MAX_SHOWN, step: 2 }), {
          field: "d_model",
          hint: "even: sin and cos pairs",
        }),
        this.control("Base", number("base", { step: "any" }), { field: "base" }),
        this.control("Rotary style", style, { field: "style" }),
        pairControl,
        this.control("Seed", number("seed", { min: 0, step: 1 }), { hint: "of x, q and k" }),
      ),
    ];
  }

  request() {
    const { length, d_model, base, style, seed } = this.state;
    if ([length, d_model].some((size) => typeof size === "number" && size > MAX_SHOWN)) {
      return `The widget draws at most ${MAX_SHOWN} positions and ${MAX_SHOWN} dimensions.`;
    }
    return async (options) => {
      // The table first: it checks length, d_model and base, so their errors land beside their controls.
      const table = await positionalEncoding({ kind: "sinusoidal", length, d_model, base }, options);
      const encoding = table.encoding;
      const n = encoding.length;
      const d = encoding[0].length;
      const random = seededRandom(Number(seed) || 0);
      const vector = () => Array.from({ length: d }, () => Math.round((random() * 4 - 2) * 10) / 10);
      const [x, q, k] = [vector(), vector(), vector()];
      const everywhere = (row) => Array.from({ length: n }, () => row);
      // Then the rotation of x (which checks the style), then both score matrices at once.
      const rotated = await positionalEncoding(
        { kind: "rotary", x: everywhere(x), base, style, include: ["tables"] },
        options,
      );
      const scores = (query, key, more = {}) =>
        attention({ query, key, value: key, scale: 1, include: ["scores"], ...more }, options);
      const added = (vector) => encoding.map((row) => row.map((value, j) => vector[j] + value));
      const [withRotary, withAdded] = await Promise.all([
        scores(everywhere(q), everywhere(k), { rotary: { base, style } }),
        scores(added(q), added(k)),
      ]);
      return { encoding, n, d, base, style, x, q, k, rotated, withRotary, withAdded };
    };
  }

  show(answer) {
    const { n, d, style } = answer;
    const pair = Math.min(Math.max(0, Math.round(Number(this.state.pair)) || 0), d / 2 - 1);
    const [a, b] = pairFeatures(style, pair, d);
    this.pairSlider.max = d / 2 - 1;
    this.pairSlider.value = pair;
    const pairWords = `pair ${pair}: dimensions ${a} and ${b}`;
    this.pairSlider.setAttribute("aria-valuetext", pairWords);
    this.pairText.textContent = `dimensions ${a} and ${b}`;
    const positions = Array.from({ length: n }, (_, p) => `${p}`);
    const refocus = keepCellFocus(this.shadowRoot);
    this.output.replaceChildren(
      this.tablePart(answer, positions),
      this.rotationPart(answer, positions, pair, a, b),
      this.distancePart(answer, positions),
    );
    refocus();
  }

  tablePart({ encoding, d }, positions) {
    const table = matrixTable({
      name: "encoding",
      caption: `PE: ${positions.length} positions × ${d} dimensions`,
      values: encoding,
      rows: positions,
      cols: Array.from({ length: d }, (_, j) => `${j}`),
      corner: "pos ╲ dim",
    });
    const base = formatBase(this.state.base);
    const readout = readoutFor(table, (element) => {
      const at = cellOf(element);
      if (!at) return null;
      const [p, j] = [Number(at.cell.dataset.row), Number(at.cell.dataset.col)];
      const f = j % 2 ? "cos" : "sin";
      return `PE(${p}, ${j}) = ${f}(${p} / ${base}^(${j - (j % 2)}/${d})) = ${encoding[p][j]}`;
    });
    return h(
      "div",
      { class: "part" },
      h("h3", { text: "1 · The sinusoidal table (Attention Is All You Need, §3.5)" }),
      h("p", {
        class: "muted",
        text:
          "PE(pos, 2i) = sin(pos / base^(2i/d_model)) in the even columns, PE(pos, 2i+1) = cos(…) in the " +
          "odd ones: the first columns change fast with the position, the last ones slowly. Coloured from " +
          "the smallest value to the largest; hover over a cell, or move to it with Tab and the arrow keys.",
      }),
      table,
      readout,
    );
  }

  rotationPart({ rotated, n, d, style }, positions, pair, a, b) {
    const rows = rotated.output.map((row, p) => [row[a], row[b], rotated.cos[p][pair], rotated.sin[p][pair]]);
    const table = matrixTable({
      name: "pair",
      caption: `x at each position: dimensions ${a} and ${b}`,
      values: rows,
      rows: positions,
      cols: [`x${a}`, `x${b}`, `cos pθ${pair}`, `sin pθ${pair}`],
      colour: "none",
      corner: "pos",
    });
    const circle = rotationCircle(rows, pair, a, b);
    const names = [`x${a}`, `x${b}`, `cos(p·θ${pair})`, `sin(p·θ${pair})`];
    const readout = readoutFor(table, (element) => {
      const at = cellOf(element);
      if (!at) return null;
      const [p, c] = [Number(at.cell.dataset.row), Number(at.cell.dataset.col)];
      return `Position ${p}: ${names[c]} = ${rows[p][c]}`;
    });
    // The point of the row under focus or the pointer stands out on the circle.
    const mark = (event) => {
      const at = cellOf(event.target);
      if (!at) return;
      for (const point of circle.querySelectorAll(".point")) {
        point.classList.toggle("current", point.dataset.position === at.cell.dataset.row);
      }
    };
    table.addEventListener("focusin", mark);
    table.addEventListener("mouseover", mark);
    const styleWords = style === "interleaved" ? "interleaved style" : "half style";
    return h(
      "div",
      { class: "part" },
      h("h3", { text: "2 · Rotary (RoPE): a pair of dimensions turns with the position" }),
      h("p", {
        class: "muted",
        text:
          `One vector x (d = ${d}, seeded) at positions 0 … ${n - 1}. Rotary turns each pair i of its ` +
          `dimensions by the angle p·θᵢ, θᵢ = base^(−2i/d); shown: pair ${pair}, dimensions ${a} and ${b} ` +
          `(${styleWords}). Each point is the service's rotated (x${a}, x${b}) at position p: the pair ` +
          "keeps its length and only turns. Low pairs turn fast, high pairs slowly.",
      }),
      h("div", { class: "rotation" }, circle, table),
      readout,
    );
  }

  distancePart({ withRotary, withAdded }, positions) {
    const grid = h(
      "div",
      { class: "grid" },
      matrixTable({
        name: "rotary-scores",
        caption: "Rotary: q·k, equal along each diagonal",
        values: withRotary.scores,
        rows: positions,
        cols: positions,
        corner: "i ╲ j",
      }),
      matrixTable({
        name: "added-scores",
        caption: "Sinusoidal added: (q + PE)·(k + PE)",
        values: withAdded.scores,
        rows: positions,
        cols: positions,
        corner: "i ╲ j",
      }),
    );
    const readout = readoutFor(grid, (element) => {
      const at = cellOf(element);
      if (!at) return null;
      const [i, j] = [Number(at.cell.dataset.row), Number(at.cell.dataset.col)];
      const rotary = at.matrix === "rotary-scores";
      const [what, value] = rotary
        ? [`Rotary q at ${i} · k at ${j}`, withRotary.scores[i][j]]
        : [`(q + PE(${i})) · (k + PE(${j}))`, withAdded.scores[i][j]];
      return `${what} (distance i − j = ${i - j}): ${value}`;
    });
    return h(
      "div",
      { class: "part" },
      h("h3", { text: "3 · With rotary, q·k depends on the distance only" }),
      h("p", {
        class: "muted",
        text:
          "The same query q at every position i and the same key k at every position j; the scores q·k " +
          "(scale 1) are /v1/attention's with its rotary option. Each diagonal (one distance i − j) holds " +
          "one value: rotating both by their positions leaves only the difference of the angles. Adding " +
          "the sinusoidal table to q and k instead (no rotary) gives scores that change along the " +
          "diagonals: they depend on where the pair sits, not only on how far apart.",
      }),
      grid,
      readout,
    );
  }
}

/** The base as the formula shows it (10000, not 10000.0000). */
function formatBase(base) {
  return typeof base === "number" && Number.isInteger(base) ? `${base}` : formatNumber(Number(base));
}

/**
 * The rotated pair at each position as points on a circle (y up; the largest radius drawn as 100 units),
 * each joined to the origin and labelled by its position; the coordinates are the service's (data-x and
 * data-y hold them in full).
 */
function rotationCircle(rows, pair, a, b) {
  const radius = Math.max(...rows.map(([x, y]) => Math.hypot(x, y))) || 1;
  const last = Math.max(1, rows.length - 1);
  const marks = rows.map(([x, y], p) => {
    const [cx, cy] = [(100 * x) / radius, (-100 * y) / radius];
    const colour = viridis((p / last) * 0.85).background;
    return svg(
      "g",
      {},
      svg("line", { class: "spoke", x1: 0, y1: 0, x2: cx, y2: cy, stroke: colour }),
      svg(
        "circle",
        { class: "point", cx, cy, r: 7, fill: colour, "data-position": p, "data-x": x, "data-y": y },
        svg("title", {}, `position ${p}: (${formatNumber(x)}, ${formatNumber(y)})`),
      ),
      svg("text", { class: "label", x: cx * 1.22, y: cy * 1.22 }, `${p}`),
    );
  });
  return svg(
    "svg",
    {
      class: "circle",
      viewBox: "-140 -140 280 280",
      role: "img",
      "aria-label":
        `Pair ${pair} of x, dimensions ${a} (across) and ${b} (up), at each position: points on a circle ` +
        "turning with the position. The table beside lists the coordinates.",
    },
    svg("circle", { class: "orbit", cx: 0, cy: 0, r: 100 }),
    svg("line", { class: "axis", x1: -130, y1: 0, x2: 130, y2: 0 }),
    svg("line", { class: "axis", x1: 0, y1: -130, x2: 0, y2: 130 }),
    ...marks,
  );
}
