// <text-generation>: a tiny n-gram model (learned in the page from a few sentences) writes text one token at
// a time, each token drawn by the service (/v1/sample) under temperature, top-k, top-p and min-p. Greedy
// decoding (temperature 0) falls into a loop; sampling varies with the seed. Each token is coloured by its
// probability, and hovering or focusing it shows the distribution it was drawn from (/v1/softmax with the
// same settings).

import { sample, softmax } from "../client.js";
import { debounce, FIELD, formatNumber, h, ServiceWidget, viridis } from "./base.js";
import { CORPUS, ngramModel, tokenize } from "./bigram.js";

const EXAMPLE = {
  prompt: "the cat",
  corpus: CORPUS,
  order: 3,
  smoothing: 0.1,
  temperature: 0,
  top_k: null,
  top_p: null,
  min_p: null,
  seed: 1,
  length: 24,
};

const MAX_LENGTH = 100;
// The largest seed /v1/sample takes (2^53 − 1, JavaScript's largest exact integer).
const MAX_SEED = Number.MAX_SAFE_INTEGER;

/** Step i's seed: seed + i, wrapping past MAX_SEED to 0, so that every seed the service takes works. */
export function stepSeed(seed, i) {
  return i <= MAX_SEED - seed ? seed + i : i - (MAX_SEED - seed) - 1;
}
const SHOWN_CHOICES = 8;

const CSS = `
  .text { font-size: 18px; line-height: 2.1; margin: 6px 0; }
  .tok { padding: 2px 5px; border-radius: 4px; cursor: default; }
  .prompt { color: #444; border: 1px dashed #999; }
  .tok.current { outline: 2px solid #111; }
  .loop { font-weight: 600; }
  .distribution { min-height: 3em; margin-top: 8px; }
  .choices { display: grid; gap: 3px; max-width: 34em; }
  .choice { display: grid; grid-template-columns: minmax(4em, 7em) 1fr; gap: 8px; align-items: center; }
  .choice.drawn .word { font-weight: 700; }
  .bar { position: relative; height: 20px; background: #f3f3f6; border-radius: 4px; overflow: hidden; }
  .bar span.fill { position: absolute; left: 0; top: 0; bottom: 0; background: #21918c; }
  .bar .value { position: relative; padding: 0 6px; font-size: 12px; line-height: 20px;
                font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
`;

/** Text generated token by token by the service from a tiny n-gram model, each token's distribution shown. */
export class TextGeneration extends ServiceWidget {
  static tag = "text-generation";
  static title = "Text generation: greedy decoding and sampling";
  static css = CSS;
  static example = EXAMPLE;
  static required = [];
  static fields = {
    prompt: FIELD.text,
    corpus: FIELD.text,
    order: FIELD.integer,
    smoothing: FIELD.positive, // add-α: log(0) would be −∞ for every word the context never saw followed
    temperature: FIELD.number,
    top_k: FIELD.integer,
    top_p: FIELD.number,
    min_p: FIELD.number,
    seed: FIELD.integer, // null: a fresh seed every step
    length: FIELD.integer,
  };

  initialState(data) {
    const pick = (key) => data[key] ?? EXAMPLE[key];
    return {
      prompt: pick("prompt"),
      corpus: pick("corpus"),
      order: pick("order"),
      smoothing: pick("smoothing"),
      temperature: pick("temperature"),
      top_k: data.top_k ?? null,
      top_p: data.top_p ?? null,
      min_p: data.min_p ?? null,
      seed: data.seed === undefined ? EXAMPLE.seed : data.seed, // null: a fresh seed for every step
      length: pick("length"),
    };
  }

  controls() {
    const s = this.state;
    const later = debounce(() => this.update(), 150);
    const set = (key, read) => (event) => {
      s[key] = read(event.target.value);
      later();
    };
    const optionalNumber = (text) => (text.trim() === "" ? null : Number(text));
    const number = (key, limits, placeholder = "off") =>
      h("input", {
        type: "number",
        ...limits,
        value: s[key] ?? "",
        placeholder,
        style: "width: 7em",
        oninput: set(key, optionalNumber),
      });
    const shown = h("output", { text: s.temperature.toFixed(2) });
    const spoken = (t) => (t === 0 ? "temperature 0, greedy" : `temperature ${t}`);
    const slider = h("input", {
      type: "range",
      min: 0,
      max: 2,
      step: 0.05,
      value: s.temperature,
      "aria-valuetext": spoken(s.temperature),
      oninput: (event) => {
        s.temperature = Number(event.target.value);
        shown.textContent = s.temperature.toFixed(2);
        event.target.setAttribute("aria-valuetext", spoken(s.temperature));
        later();
      },
    });
    const temperature = this.control("Temperature", slider, {
      field: "temperature",
      hint: "0 = greedy (always the most likely word)",
    });
    temperature.querySelector("label").append(" ", shown);
    const prompt = h("input", { type: "text", size: 24, value: s.prompt, oninput: set("prompt", String) });
    const model = h(
      "select",
      { onchange: set("order", Number) },
      h("option", { value: 2, text: "bigram (one word of context)", selected: s.order === 2 }),
      h("option", { value: 3, text: "trigram (two words)", selected: s.order === 3 }),
    );
    const length = number("length", { min: 1, max: MAX_LENGTH, step: 1 }, "24");
    const seed = number("seed", { min: 0, step: 1 }, "fresh");
    const newSeed = h("button", {
      type: "button",
      text: "New seed",
      onclick: () => {
        s.seed = Math.floor(Math.random() * 1e9);
        seed.value = s.seed;
        this.update();
      },
    });
    return [
      h(
        "div",
        { class: "controls" },
        this.control("Prompt", prompt, { hint: "the first words" }),
        this.control("Model", model),
        this.control("Words to generate", length, { field: "length" }),
      ),
      h(
        "div",
        { class: "controls" },
        temperature,
        this.control("Top-k", number("top_k", { min: 1, step: 1 }), { field: "top_k" }),
        this.control("Top-p", number("top_p", { min: 0.05, max: 1, step: 0.05 }), { field: "top_p" }),
        this.control("Min-p", number("min_p", { min: 0, max: 1, step: 0.05 }), { field: "min_p" }),
        this.control("Seed", seed, { field: "seed", hint: "step i uses seed + i (past 2^53 − 1, from 0)" }),
        h("div", { class: "control" }, h("span", { text: "\u00a0" }), newSeed),
      ),
    ];
  }

  /** The options every step sends: the same for /v1/sample and for /v1/softmax's view of the step. */
  options() {
    const s = this.state;
    const body = { temperature: s.temperature };
    for (const key of ["top_k", "top_p", "min_p"]) if (s[key] !== null) body[key] = s[key];
    return body;
  }

  request() {
    const s = this.state;
    const prompt = tokenize(s.prompt);
    if (!prompt.length) return "Type a prompt: at least one word to start from.";
    const length = s.length ?? EXAMPLE.length;
    if (!Number.isInteger(length) || length < 1 || length > MAX_LENGTH) {
      return `Words to generate: a whole number from 1 to ${MAX_LENGTH}.`;
    }
    const model = ngramModel(s.corpus, { order: s.order, smoothing: s.smoothing, extra: prompt });
    const options = this.options();
    const seed = s.seed;
    return async (fetchOptions) => {
      const context = [...prompt];
      const steps = [];
      for (let i = 0; i < length; i++) {
        const logits = model.logits(context);
        const body = { logits, ...options };
        if (seed !== null) body.seed = Number.isSafeInteger(seed) && seed >= 0 ? stepSeed(seed, i) : seed;
        const drawn = await sample(body, fetchOptions);
        const token = drawn.tokens[0];
        steps.push({
          context: context.slice(-2),
          logits,
          token,
          logprob: drawn.logprobs[0],
          seed: drawn.seed,
        });
        context.push(model.vocabulary[token]);
      }
      // The distribution each token was drawn from, every step at once: softmax with the same settings.
      const shown = await softmax({ logits: steps.map((step) => step.logits), ...options }, fetchOptions);
      return { prompt, vocabulary: model.vocabulary, steps, probabilities: shown.probabilities };
    };
  }

  show(answer) {
    const { prompt, vocabulary, steps, probabilities } = answer;
    const panel = h("div", { class: "distribution", "aria-live": "polite" });
    const spans = [];
    const reveal = (i) => {
      for (const span of spans) span.classList.toggle("current", Number(span.dataset.step) === i);
      panel.replaceChildren(...this.distribution(steps[i], probabilities[i], vocabulary, i));
    };
    const move = (from, to) => {
      const target = spans[Math.max(0, Math.min(spans.length - 1, to))];
      spans[from].tabIndex = -1;
      target.tabIndex = 0;
      target.focus();
    };
    steps.forEach((step, i) => {
      const probability = Math.exp(step.logprob);
      const colour = viridis(probability);
      const word = vocabulary[step.token];
      const span = h("span", {
        class: "tok",
        tabindex: i === 0 ? 0 : -1,
        "data-step": i,
        "data-probability": probability,
        style: `background: ${colour.background}; color: ${colour.text}`,
        "aria-label": `${word}, probability ${formatNumber(probability, 3)}`,
        text: word,
        onmouseenter: () => reveal(i),
        onfocus: () => reveal(i),
        onkeydown: (event) => {
          const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: spans.length - 1 }[event.key];
          if (to === undefined) return;
          event.preventDefault();
          move(i, to);
        },
      });
      spans.push(span);
    });
    const words = prompt.map((word) => h("span", { class: "tok prompt", text: word }));
    const loop = this.loopNote(steps.map((step) => vocabulary[step.token]));
    const first = steps[0].seed;
    const last = steps.at(-1).seed;
    const seeds =
      this.state.seed === null
        ? `fresh seeds (the first: ${first})`
        : `seeds ${first} to ${last}${last < first ? ` (after ${MAX_SEED}, from 0)` : ""}`;
    panel.append(
      h("span", {
        class: "muted",
        text: "Hover over or focus a generated word to see what else the model might have said.",
      }),
    );
    this.output.replaceChildren(
      h(
        "p",
        { class: "text", role: "group", "aria-label": "generated text" },
        ...[...words, ...spans].flatMap((span) => [span, " "]),
      ),
      h(
        "p",
        { class: "muted summary" },
        `${steps.length} words drawn by /v1/sample with ${seeds}; colour = probability of the word drawn.`,
      ),
      loop,
      panel,
    );
  }

  /** "Greedy decoding is repeating itself" when the generated words end in two copies of the same run. */
  loopNote(words) {
    for (let period = 1; period <= words.length / 2; period++) {
      const tail = words.slice(-period).join(" ");
      if (words.slice(-2 * period, -period).join(" ") === tail) {
        return h("p", { class: "loop", text: `Repeating itself: “${tail}” over and over.` });
      }
    }
    return null;
  }

  /** The step's distribution: its most probable words with the probabilities /v1/softmax gives. */
  distribution(step, probabilities, vocabulary, i) {
    const order = probabilities.map((_, id) => id).filter((id) => probabilities[id] > 0);
    order.sort((a, b) => probabilities[b] - probabilities[a] || a - b);
    const kept = order.length;
    const listed = order.slice(0, SHOWN_CHOICES);
    if (!listed.includes(step.token)) listed.push(step.token);
    const rows = listed.map((id) =>
      h(
        "div",
        { class: `choice${id === step.token ? " drawn" : ""}`, "data-token": vocabulary[id] },
        h("span", { class: "word", text: vocabulary[id] }),
        h(
          "span",
          { class: "bar" },
          h("span", { class: "fill", style: `width: ${100 * probabilities[id]}%` }),
          h("span", { class: "value probability", text: formatNumber(probabilities[id]) }),
        ),
      ),
    );
    const cut = vocabulary.length - kept;
    return [
      h(
        "p",
        { class: "step" },
        `Word ${i + 1}, after “${step.context.join(" ")}”: drew “${vocabulary[step.token]}”`,
        ` (probability ${formatNumber(Math.exp(step.logprob))}, seed ${step.seed}).`,
        ` ${kept} of ${vocabulary.length} words could be drawn${cut ? `; ${cut} had no chance` : ""}.`,
      ),
      h("div", { class: "choices" }, ...rows),
    ];
  }
}
