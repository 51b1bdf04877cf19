// <kv-cache>: generation step by step with a key/value cache. Each step appends the new token's key and
// value rows to the cache and asks the service (/v1/attention, causal, lower_right) for one attention row:
// the new token's query over every cached key. Grouped key/value heads (enable_gqa) make the cache hold
// fewer heads; a sliding window [left, 0] keeps only the last left + 1 tokens (a rolling cache: older rows
// are evicted). The queries, keys and values are seeded inputs made in the page; the weights and outputs
// are the service's.

import { attention } from "../client.js";
import { h, readoutFor, ServiceWidget, seededRandom } from "./base.js";
import { cellOf, keepCellFocus, MATRIX_CSS, matrixTable } from "./matrix.js";

const EXAMPLE = {
  tokens: ["the", "cat", "sat", "on", "the", "mat", "and", "then", "it", "slept"],
  num_heads: 4,
  num_kv_heads: 2,
  window: null,
  d_k: 2,
  seed: 1,
  steps: 3,
};

// Bounds of what the page makes up itself (the service has its own limits on what it is asked).
const MAX_TOKENS = 32;
const MAX_HEADS = 8;
const MAX_D = 8;
const MAX_WINDOW = 16;
const BYTES_PER_NUMBER = 8; // the service computes in float64
const PLAY_INTERVAL_MS = 700;

const SUBSCRIPTS = "₀₁₂₃₄₅₆₇₈₉";
const subscript = (n) => [...String(n)].map((digit) => SUBSCRIPTS[Number(digit)]).join("");

// What one cell of each table is, for the line that shows the focused or hovered cell's value.
const CELL_NAMES = { query: "Query", weights: "Weight", output: "Output" };

const CSS = `${MATRIX_CSS}
  .part { font-size: 14px; margin: 14px 0 6px; }
  .status { margin: 0 0 8px; }
  .buttons { display: flex; gap: 8px; align-items: flex-end; }
  button:disabled { border-color: var(--line); color: var(--muted); background: #f6f6f8; cursor: default; }
  button[aria-pressed=true] { background: #eef0fb; }
  td.evicted, th.evicted { color: var(--muted); text-decoration: line-through; background: #f3f3f6; }
  tr.newest th { color: var(--accent); }
  tr.newest td { box-shadow: inset 0 -2px 0 var(--accent); }
  .sizes td, .sizes th { text-align: right; }
  .sizes th[scope=row] { text-align: left; font-weight: 400; }
  .sizes tr.this th { font-weight: 700; }
  .bar { display: inline-block; width: min(160px, 18vw); height: 12px; background: #f3f3f6;
         border-radius: 3px; overflow: hidden; vertical-align: middle; }
  .bar span { display: block; height: 100%; background: #21918c; }
`;

/** "1 the", "2 cat", …: a token with its position, so that repeated words stay apart. */
function tokenLabel(tokens, i) {
  return `${i + 1} ${tokens[i]}`;
}

/** A whole number from `lo` to `hi`. */
function isCount(value, lo, hi) {
  return Number.isInteger(value) && value >= lo && value <= hi;
}

/** Generation with a key/value cache, one step at a time, every attention row from the service. */
export class KvCache extends ServiceWidget {
  static tag = "kv-cache";
  static title = "The key/value cache, step by step";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];

  constructor() {
    super();
    this.playing = false;
    this.timer = null;
  }

  /** Taken out of the page: a run being played stops, and (the base class) the step in flight is aborted. */
  disconnectedCallback() {
    this.stopPlaying();
    super.disconnectedCallback();
  }

  /** New data is a new run: a run being played stops. */
  build() {
    if (this.state !== null) this.stopPlaying();
    super.build();
  }

  initialState(data) {
    const pick = (key) => (data[key] === undefined ? EXAMPLE[key] : data[key]);
    const tokens = Array.isArray(data.tokens) ? data.tokens.slice(0, MAX_TOKENS).map(String) : EXAMPLE.tokens;
    if (data.tokens !== undefined && !Array.isArray(data.tokens)) {
      this.reportData(`The data's tokens are a list of words (["the", "cat"]): the example's are shown.`);
    } else if (data.tokens?.length > MAX_TOKENS) {
      this.reportData(`The widget generates at most ${MAX_TOKENS} tokens: the first ${MAX_TOKENS} are used.`);
    }
    const heads = pick("num_heads");
    const window = Array.isArray(data.window) ? data.window[0] : pick("window");
    const steps = Number.isInteger(data.steps) ? data.steps : EXAMPLE.steps;
    return {
      tokens,
      heads,
      kvHeads: data.num_kv_heads ?? heads,
      window,
      d: pick("d_k"),
      seed: pick("seed"),
      steps: Math.min(tokens.length, Math.max(0, steps)),
    };
  }

  controls() {
    const s = this.state;
    const kvChoices = [...new Set([s.heads, s.kvHeads, ...divisors(s.heads)])]
      .filter((n) => Number.isInteger(n) && n > 0)
      .sort((a, b) => b - a);
    const kvName = (n) => {
      if (n === s.heads) return `${n}: one per query head (multi-head)`;
      if (n === 1) return "1: all query heads share it (multi-query)";
      if (s.heads % n !== 0) return `${n}: does not divide ${s.heads}`;
      return `${n}: ${s.heads / n} query heads share each (grouped-query)`;
    };
    const kvHeads = h(
      "select",
      {
        onchange: (event) => {
          s.kvHeads = Number(event.target.value);
          this.update();
        },
      },
      ...kvChoices.map((n) => h("option", { value: n, text: kvName(n), selected: n === s.kvHeads })),
    );
    const windows = [null, 1, 2, 3, 4];
    if (!windows.includes(s.window)) windows.push(s.window);
    const windowName = (w) =>
      w === null
        ? "none: keep every token"
        : `${w} earlier token${w === 1 ? "" : "s"} (keep the last ${w + 1})`;
    const window = h(
      "select",
      {
        onchange: (event) => {
          s.window = event.target.value === "" ? null : Number(event.target.value);
          this.update();
        },
      },
      ...windows.map((w) => h("option", { value: w ?? "", text: windowName(w), selected: w === s.window })),
    );
    this.stepButton = h("button", { type: "button", text: "Step", onclick: () => this.advance() });
    this.playButton = h("button", {
      type: "button",
      text: "Play",
      "aria-pressed": "false",
      onclick: () => (this.playing ? this.stopPlaying() : this.play()),
    });
    this.resetButton = h("button", { type: "button", text: "Reset", onclick: () => this.reset() });
    this.syncButtons();
    const rows = [
      h(
        "div",
        { class: "controls" },
        this.control(`Key/value heads (of ${s.heads} query heads)`, kvHeads, { field: "key" }),
        this.control("Sliding window", window, { field: "window", hint: "earlier tokens each query sees" }),
        h(
          "div",
          { class: "buttons", role: "group", "aria-label": "generation" },
          this.stepButton,
          this.playButton,
          this.resetButton,
        ),
      ),
    ];
    if (this.hasControls) {
      const later = this.updateLater(300);
      const number = (key, limits) =>
        h("input", {
          type: "number",
          step: 1,
          ...limits,
          value: s[key],
          style: "width: 6em",
          oninput: (event) => {
            s[key] = event.target.value.trim() === "" ? null : Number(event.target.value);
            later();
          },
        });
      rows.push(
        h(
          "div",
          { class: "controls" },
          this.control("Seed", number("seed", { min: 0 }), { hint: "of the made-up q, k, v rows" }),
          this.control("d_k", number("d", { min: 1, max: MAX_D }), { field: "query", hint: `1 to ${MAX_D}` }),
        ),
      );
    }
    return rows;
  }

  // ------------------------------------------------------------------------------------------ stepping

  /** One more token: its key and value join the cache, and its query asks for one attention row. */
  advance() {
    if (this.state.steps >= this.state.tokens.length || this.problem()) return;
    this.state.steps += 1;
    this.syncButtons();
    this.update();
  }

  /** Back to an empty cache; a step in flight is aborted (update() aborts the request it supersedes). */
  reset() {
    this.stopPlaying();
    this.state.steps = 0;
    this.syncButtons();
    this.update();
  }

  play() {
    if (this.state.steps >= this.state.tokens.length) this.state.steps = 0;
    this.playing = true;
    this.syncButtons();
    this.advance();
  }

  stopPlaying() {
    this.playing = false;
    clearTimeout(this.timer);
    this.timer = null;
    this.syncButtons();
  }

  /** After an answer is drawn while playing: the next step a moment later, until the last token. */
  continuePlaying() {
    if (!this.playing) return;
    clearTimeout(this.timer);
    if (this.state.steps >= this.state.tokens.length) {
      this.stopPlaying();
      return;
    }
    this.timer = setTimeout(() => this.advance(), PLAY_INTERVAL_MS);
  }

  syncButtons() {
    if (!this.stepButton) return;
    const done = this.state.steps >= this.state.tokens.length;
    // While the card says what is wrong with the state there is no step to take: Step and Play would count
    // steps that nothing shows, and Play would read "Pause" with nothing playing.
    const blocked = this.problem() !== null;
    // A disabled button loses the keyboard focus (to the page's body): after the last step, the keyboard
    // user pressing Step lands on Reset, what the status line offers next.
    const stranded = (done || blocked) && this.shadowRoot.activeElement === this.stepButton;
    this.stepButton.disabled = done || blocked;
    this.playButton.disabled = blocked;
    if (stranded) this.resetButton.focus();
    this.playButton.textContent = this.playing ? "Pause" : "Play";
    this.playButton.setAttribute("aria-pressed", String(this.playing));
  }

  /** A state with a problem stops a run being played (its message replaces the steps). */
  update() {
    if (this.playing && this.problem()) this.stopPlaying();
    this.syncButtons();
    super.update();
  }

  showError(error) {
    this.stopPlaying();
    super.showError(error);
  }

  // ------------------------------------------------------------------------------------------ the request

  /** Why the state cannot be shown (a sentence), or null. */
  problem() {
    const s = this.state;
    if (!s.tokens.length) return "The data's tokens are empty: at least one token to generate.";
    if (!isCount(s.heads, 1, MAX_HEADS))
      return `Query heads (num_heads): a whole number from 1 to ${MAX_HEADS}.`;
    if (!isCount(s.kvHeads, 1, MAX_HEADS)) {
      return `Key/value heads (num_kv_heads): a whole number from 1 to ${MAX_HEADS}.`;
    }
    if (!isCount(s.d, 1, MAX_D)) return `d_k: a whole number from 1 to ${MAX_D}.`;
    if (!isCount(s.seed, 0, 2 ** 32 - 1)) return "Seed: a whole number from 0 to 4294967295.";
    if (s.window !== null && !isCount(s.window, 0, MAX_WINDOW)) {
      return `Sliding window: none, or a whole number from 0 to ${MAX_WINDOW}.`;
    }
    return null;
  }

  /**
   * The made-up rows of every token, the same for the same seed, heads and d_k: per token, a query row per
   * query head, then a key row and a value row per key/value head (as many as the larger head count, so
   * that changing the key/value heads keeps the queries and the first heads' keys and values).
   */
  inputs() {
    const s = this.state;
    const random = seededRandom(s.seed);
    const entry = () => Math.round((random() * 4 - 2) * 10) / 10;
    const rows = (count) => Array.from({ length: count }, () => Array.from({ length: s.d }, entry));
    const kvCount = Math.max(s.heads, s.kvHeads);
    return s.tokens.map(() => ({ query: rows(s.heads), key: rows(kvCount), value: rows(kvCount) }));
  }

  request() {
    const problem = this.problem();
    if (problem) return problem;
    const s = this.state;
    const config = { tokens: s.tokens, heads: s.heads, kvHeads: s.kvHeads, window: s.window, d: s.d };
    const step = s.steps;
    const rows = this.inputs().slice(0, step);
    // A rolling cache under a window [left, 0]: only the last left + 1 tokens are kept.
    const start = s.window === null ? 0 : Math.max(0, step - (s.window + 1));
    const answer = { config, step, start, rows, body: null, result: null };
    if (step === 0) return async () => answer; // an empty cache: nothing to ask
    const cached = (which) =>
      Array.from({ length: s.kvHeads }, (_, head) => rows.slice(start).map((row) => row[which][head]));
    const body = {
      query: rows[step - 1].query.map((row) => [row]), // [H_q, 1, d_k]: the new token's query only
      key: cached("key"), // [H_kv, kept, d_k]
      value: cached("value"), // [H_kv, kept, d_v]
      causal: true,
      causal_alignment: "lower_right", // the one query row is the last position of the cache
      enable_gqa: true,
      include: ["weights"],
    };
    if (s.window !== null) body.window = [s.window, 0];
    return async (options) => ({ ...answer, body, result: await attention(body, options) });
  }

  // ------------------------------------------------------------------------------------------ the answer

  show(answer) {
    const { config, step, start } = answer;
    const refocus = keepCellFocus(this.shadowRoot);
    const kept = step - start;
    const parts = [h("p", { class: "status", "data-step": step, text: this.statusLine(answer) })];
    parts.push(this.sizes(config, step, kept));
    if (step > 0) {
      const area = h(
        "div",
        {},
        h("h3", { class: "part", text: `The cache: ${kept} token${kept === 1 ? "" : "s"} held` }),
        h("div", { class: "grid" }, ...this.cacheTables(answer)),
        h("h3", { class: "part", text: `This step: ${tokenLabel(config.tokens, step - 1)}` }),
        h("div", { class: "grid" }, ...this.stepTables(answer)),
      );
      const readout = readoutFor(area, (element) => {
        const at = cellOf(element);
        if (!at) return null;
        const name = at.matrix.startsWith("cache") ? "Cached" : CELL_NAMES[at.matrix];
        return `${name} ${at.cell.title}`;
      });
      parts.push(area, readout);
    }
    this.output.replaceChildren(...parts);
    refocus();
    this.syncButtons();
    this.continuePlaying();
  }

  statusLine({ config, step, start }) {
    const total = config.tokens.length;
    if (step === 0) {
      return (
        `The cache is empty (0 of ${total} tokens generated). Press Step: the first token's key and value ` +
        "go into the cache, and its query attends over them."
      );
    }
    const kept = step - start;
    const evicted = start ? `; the window has evicted ${start}` : "";
    const end = step === total ? " That was the last token: Reset starts again." : "";
    return (
      `Step ${step} of ${total}: “${config.tokens[step - 1]}” appended its key and value, and its query ` +
      `attends over the ${kept} cached token${kept === 1 ? "" : "s"}${evicted}.${end}`
    );
  }

  /**
   * The cache's size, in tokens and bytes (2 · H_kv · d_k · 8 bytes per token for one layer in float64), next
   * to what it would hold with a key/value head per query head, and without the window.
   */
  sizes(config, step, kept) {
    const perToken = (kvHeads) => 2 * kvHeads * config.d * BYTES_PER_NUMBER;
    const rows = [{ name: "this", label: "This cache", tokens: kept, kvHeads: config.kvHeads }];
    const grouped = config.kvHeads < config.heads;
    const windowed = config.window !== null;
    if (grouped) {
      rows.push({
        name: "no-gqa",
        label: "One key/value head per query head",
        tokens: kept,
        kvHeads: config.heads,
      });
    }
    if (windowed) rows.push({ name: "no-window", label: "No window", tokens: step, kvHeads: config.kvHeads });
    if (grouped && windowed) {
      rows.push({
        name: "full",
        label: "Neither (every token, every head)",
        tokens: step,
        kvHeads: config.heads,
      });
    }
    const largest = Math.max(1, ...rows.map((row) => row.tokens * perToken(row.kvHeads)));
    const table = h(
      "table",
      { class: "sizes" },
      h("caption", { text: "The cache's size (one layer, float64)" }),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col", text: "" }),
          h("th", { scope: "col", text: "tokens" }),
          h("th", { scope: "col", text: "key/value heads" }),
          h("th", { scope: "col", text: "bytes per token" }),
          h("th", { scope: "col", text: "bytes" }),
          h("th", { scope: "col", text: "" }),
        ),
      ),
      h(
        "tbody",
        {},
        ...rows.map((row) => {
          const bytes = row.tokens * perToken(row.kvHeads);
          return h(
            "tr",
            {
              class: row.name,
              "data-size": row.name,
              "data-tokens": row.tokens,
              "data-kv-heads": row.kvHeads,
              "data-bytes": bytes,
            },
            h("th", { scope: "row", text: row.label }),
            h("td", { text: row.tokens }),
            h("td", { text: row.kvHeads }),
            h("td", { text: perToken(row.kvHeads).toLocaleString("en") }),
            h("td", { text: bytes.toLocaleString("en") }),
            h(
              "td",
              { "aria-hidden": "true" },
              h("span", { class: "bar" }, h("span", { style: `width: ${(100 * bytes) / largest}%` })),
            ),
          );
        }),
      ),
    );
    const formula =
      "Bytes per token = 2 (a key and a value) · H_kv · d_k · 8 bytes = " +
      `2 · ${config.kvHeads} · ${config.d} · 8 = ${perToken(config.kvHeads)}, for one layer; ` +
      "a model multiplies it by its layers. " +
      (windowed ? `The window [${config.window}, 0] caps the cache at ${config.window + 1} tokens.` : "");
    return h(
      "div",
      {},
      h("div", { class: "scroll" }, table),
      h("p", { class: "muted formula", text: formula }),
    );
  }

  /** One table per key/value head: a row per generated token (keys, then values); evicted rows struck out. */
  cacheTables({ config, step, start, rows }) {
    const labels = rows.map((_, i) => tokenLabel(config.tokens, i));
    const cols = [
      ...Array.from({ length: config.d }, (_, j) => `k${subscript(j + 1)}`),
      ...Array.from({ length: config.d }, (_, j) => `v${subscript(j + 1)}`),
    ];
    const group = config.heads / config.kvHeads;
    return Array.from({ length: config.kvHeads }, (_, head) => {
      const readers = Array.from({ length: config.heads }, (_, i) => i).filter(
        (i) => Math.floor(i / group) === head,
      );
      const readBy = `query ${plural(readers.length, "head")} ${readers.join(", ")}`;
      const table = matrixTable({
        name: `cache-${head}`,
        caption: `Key/value head ${head} (read by ${readBy})`,
        values: rows.map((row) => [...row.key[head], ...row.value[head]]),
        rows: labels,
        cols,
        colour: "none",
        corner: "token",
      });
      const bodyRows = table.querySelectorAll("tbody tr");
      bodyRows.forEach((tr, i) => {
        if (i === step - 1) tr.classList.add("newest");
        if (i >= start) return;
        tr.querySelector("th").classList.add("evicted");
        for (const td of tr.querySelectorAll("td")) {
          td.classList.add("evicted");
          td.textContent = "—";
          td.title = `${labels[i]} → ${cols[Number(td.dataset.col)]}: evicted (outside the window)`;
        }
      });
      return table;
    });
  }

  /** The new token's query per head (made up), and the service's weights over the cache and output. */
  stepTables({ config, step, start, rows, result }) {
    const group = config.heads / config.kvHeads;
    const heads = Array.from(
      { length: config.heads },
      // From 0, as <multi-head-attention> numbers them: query head i reads key/value head i // group.
      (_, i) => `head ${i}${config.kvHeads < config.heads ? ` (kv ${Math.floor(i / group)})` : ""}`,
    );
    const dims = (letter) => Array.from({ length: config.d }, (_, j) => `${letter}${subscript(j + 1)}`);
    const keys = Array.from({ length: step - start }, (_, j) => tokenLabel(config.tokens, start + j));
    return [
      matrixTable({
        name: "query",
        caption: "Its query (made up)",
        values: rows[step - 1].query,
        rows: heads,
        cols: dims("q"),
        colour: "none",
        corner: "query head",
      }),
      matrixTable({
        name: "weights",
        caption: "Weights over the cache (service)",
        values: result.weights.map((perHead) => perHead[0]),
        rows: heads,
        cols: keys,
        colour: "unit",
        corner: "head ╲ key",
      }),
      matrixTable({
        name: "output",
        caption: "Output = weights · V (service)",
        values: result.output.map((perHead) => perHead[0]),
        rows: heads,
        cols: dims("o"),
        colour: "none",
        corner: "query head",
      }),
    ];
  }
}

/** The noun for a count: "head" for 1, "heads" for 2 (the caller writes the number, or the list). */
function plural(count, noun) {
  return `${noun}${count === 1 ? "" : "s"}`;
}

/**
 * The numbers that divide n, largest first; none unless n is a head count the widget takes (a huge n from the
 * data would otherwise build an array of n numbers before problem() could refuse it).
 */
function divisors(n) {
  if (!isCount(n, 1, MAX_HEADS)) return [];
  return Array.from({ length: n }, (_, i) => n - i).filter((d) => n % d === 0);
}
