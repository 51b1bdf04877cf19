// <token-likelihood>: a text coloured by how likely each next token was (GLTR-style), with mean NLL and
// perplexity from /v1/log-likelihood; the logits are the caller's, or a bigram model's of a short text.

import { logLikelihood } from "../client.js";
import { FIELD, formatNumber, h, readoutFor, ServiceWidget, viridis } from "./base.js";
import { bigramLogits, CORPUS, tokenize } from "./bigram.js";

const EXAMPLE = { text: "the cat sat on the rug .", corpus: CORPUS, smoothing: 0.1 };

const RANK_BUCKETS = [
  { most: 1, label: "top 1", shade: 1.0 },
  { most: 3, label: "top 3", shade: 0.72 },
  { most: 10, label: "top 10", shade: 0.45 },
  { most: Infinity, label: "rank > 10", shade: 0.0 },
];

const CSS = `
  .text { font-size: 18px; line-height: 2.1; margin: 6px 0; }
  .tok { padding: 2px 5px; border-radius: 4px; }
  .unscored { background: #eee; color: #444; border: 1px dashed #999; }
  .legend { display: flex; flex-wrap: wrap; gap: 6px; font-size: 12px; }
  .legend .key { padding: 1px 6px; border-radius: 4px; }
  .stats { display: flex; flex-wrap: wrap; gap: 8px 24px; margin: 12px 0 0; }
  .stat dt { font-size: 12px; color: var(--muted); }
  .stat dd { margin: 0; font-weight: 700; font-variant-numeric: tabular-nums; }
`;

/** A text coloured by how likely each next token was (GLTR-style), with mean NLL and perplexity. */
export class TokenLikelihood extends ServiceWidget {
  static tag = "token-likelihood";
  static title = "Token likelihood";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];
  static fields = {
    text: FIELD.text,
    corpus: FIELD.text,
    smoothing: FIELD.positive, // add-α: log(0) would be −∞ for every pair the corpus never has
    logits: FIELD.matrix,
    targets: FIELD.indices,
    tokens: FIELD.words,
    vocabulary: FIELD.words,
  };
  static together = [["logits", "targets"]];

  /** Either the logits and targets themselves, or a text scored by the bigram model of `corpus`. */
  initialState(data) {
    return {
      ...data,
      text: data.text ?? (data.logits ? undefined : EXAMPLE.text),
      corpus: data.corpus ?? CORPUS,
      smoothing: data.smoothing ?? EXAMPLE.smoothing,
    };
  }

  controls() {
    if (!this.hasControls || this.state.logits) return [];
    const later = this.updateLater(300);
    const text = h("textarea", {
      rows: 2,
      cols: 48,
      text: this.state.text,
      // Read the value now: once dispatch ends, an event from a shadow tree no longer has a target.
      oninput: (event) => {
        this.state.text = event.target.value;
        later();
      },
    });
    const control = this.control("Text", text, {
      field: "targets",
      hint: "scored by a bigram model of the built-in text",
    });
    this.errorSlots.set("logits", this.errorSlots.get("targets"));
    return [control];
  }

  /** The tokens to colour, the vocabulary to name the model's guesses with, and the request's body. */
  scoring() {
    const s = this.state;
    if (s.logits) {
      const tokens = s.tokens ?? s.targets.map(String);
      return { tokens, vocabulary: s.vocabulary ?? null, logits: s.logits, targets: s.targets };
    }
    const tokens = tokenize(s.text);
    return { tokens, ...bigramLogits(s.corpus, tokens, s.smoothing) };
  }

  request() {
    const { tokens, vocabulary, logits, targets } = this.scoring();
    // With the causal shift the first token is never scored: one token leaves nothing to ask about.
    if (tokens.length < 2) return "Type at least two words: the first one is only context.";
    this.scored = { tokens, vocabulary }; // what the newest request scores (only its answer is shown)
    const body = { logits, targets, shift: true, top_logprobs: 3 };
    return (options) => logLikelihood(body, options);
  }

  show(answer) {
    const { tokens, vocabulary } = this.scored;
    const name = (id) => vocabulary?.[id] ?? `#${id}`;
    const spans = tokens.map((token, t) => {
      const rank = answer.ranks[t];
      if (rank === null) {
        return h("span", {
          class: "tok unscored",
          title: `${token}: the first token is not scored`,
          text: token,
        });
      }
      const bucket = RANK_BUCKETS.find((b) => rank <= b.most);
      const colour = viridis(bucket.shade);
      const guesses = (answer.top_logprobs?.[t] ?? [])
        .map((guess) => `${name(guess.token)} (${formatNumber(guess.logprob, 2)})`)
        .join(", ");
      const logprob = formatNumber(answer.token_logprobs[t]);
      return h("span", {
        class: "tok",
        tabindex: 0,
        "data-rank": rank,
        style: `background: ${colour.background}; color: ${colour.text}`,
        title: `${token}: rank ${rank}, log-probability ${logprob}; the model expected ${guesses}`,
        text: token,
      });
    });
    const stat = (label, value, cls) =>
      h("div", { class: "stat" }, h("dt", { text: label }), h("dd", { class: cls, text: value }));
    const key = (b) => {
      const colour = viridis(b.shade);
      return h("span", {
        class: "key",
        style: `background: ${colour.background}; color: ${colour.text}`,
        text: b.label,
      });
    };
    const text = h("p", { class: "text" }, ...spans.flatMap((span) => [span, " "]));
    // What a token's title says shows on keyboard focus too (the scored tokens are Tab stops).
    const readout = readoutFor(text, (element) =>
      element.classList?.contains("tok") ? element.title : null,
    );
    this.output.replaceChildren(
      text,
      readout,
      h(
        "div",
        { class: "legend" },
        ...RANK_BUCKETS.map(key),
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
