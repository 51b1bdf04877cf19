// <softmax-temperature>: a next-token distribution under a temperature slider (0 = greedy … 5), with top-k
// and top-p; the probabilities, entropy and argmax are the service's.

import { softmax } from "../client.js";
import { FIELD, formatNumber, h, ServiceWidget, words } from "./base.js";

const EXAMPLE = {
  tokens: ["mat", "rug", "sofa", "roof", "moon"],
  logits: [3.2, 2.5, 1.9, 0.4, -1.5],
  temperature: 1,
  top_k: null,
  top_p: null,
};

const CSS = `
  .summary { margin: 4px 0 10px; }
  .bars { display: grid; gap: 4px; }
  /* Minimums of 12em and two gaps (about 200 px): the rows fit a 300 px frame; tokens beyond 3em are cut. */
  .row { display: grid; grid-template-columns: minmax(3em, 8em) minmax(4em, 1fr) minmax(5em, 2fr);
         gap: 10px; align-items: center; }
  .row.head { font-size: 12px; color: var(--muted); }
  .row.top .token { font-weight: 700; }
  .row.excluded { color: var(--muted); }
  .token { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  .logit, .prob { position: relative; height: 22px; background: #f3f3f6; border-radius: 4px;
                  overflow: hidden; }
  .logit .bar { position: absolute; top: 0; bottom: 0; }
  .logit .bar.pos { background: #9ab0e8; } .logit .bar.neg { background: #e8b49a; }
  .logit::after { content: ""; position: absolute; left: 50%; top: 0; bottom: 0;
                  border-left: 1px solid #888; }
  .prob .bar { position: absolute; left: 0; top: 0; bottom: 0; background: #21918c; }
  .value { position: relative; padding: 0 6px; font-size: 12px; line-height: 22px;
           font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
  .prob .value { color: #111; background: rgba(255,255,255,0.75); border-radius: 3px; }
`;

/** A next-token distribution under a temperature slider (0 = greedy … 5), with top-k and top-p. */
export class SoftmaxTemperature extends ServiceWidget {
  static tag = "softmax-temperature";
  static title = "Softmax with temperature";
  static css = CSS;
  static example = EXAMPLE;
  static required = ["logits"];
  static fields = {
    logits: FIELD.vector, // one distribution: the widget draws one row of bars
    tokens: FIELD.words,
    temperature: FIELD.number,
    top_k: FIELD.integer,
    top_p: FIELD.number,
  };

  initialState(data) {
    return {
      tokens: data.tokens ?? data.logits.map((_, i) => `#${i}`),
      logits: data.logits,
      temperature: data.temperature ?? 1,
      top_k: data.top_k ?? null,
      top_p: data.top_p ?? null,
    };
  }

  controls() {
    const s = this.state;
    const later = this.updateLater(120);
    const spoken = (t) => (t === 0 ? "temperature 0, greedy" : `temperature ${t}`);
    const shown = h("output", { text: s.temperature.toFixed(2) });
    const slider = h("input", {
      type: "range",
      min: 0,
      max: 5,
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
    const optional = (key) => (event) => {
      const text = event.target.value.trim();
      s[key] = text === "" ? null : Number(text);
      later();
    };
    const number = (key, limits) =>
      h("input", {
        type: "number",
        ...limits,
        value: s[key] ?? "",
        placeholder: "off",
        style: "width: 6em",
        oninput: optional(key),
      });
    const topK = number("top_k", { min: 1, step: 1 });
    const topP = number("top_p", { min: 0.05, max: 1, step: 0.05 });
    const parts = [];
    if (this.hasControls) {
      const text = (values, read) =>
        h("input", { type: "text", size: 30, value: values.join(" "), oninput: read });
      const tokens = text(s.tokens, (event) => {
        s.tokens = words(event.target.value);
        later();
      });
      const logits = text(s.logits, (event) => {
        s.logits = this.readNumbers("logits", event.target.value);
        later();
      });
      parts.push(
        h(
          "div",
          { class: "controls" },
          this.control("Tokens", tokens, { hint: "separated by spaces" }),
          this.control("Logits", logits, { field: "logits" }),
        ),
      );
    }
    const temperature = this.control("Temperature", slider, {
      field: "temperature",
      hint: "0 = greedy (always the top token)",
    });
    temperature.querySelector("label").append(" ", shown);
    parts.push(
      h(
        "div",
        { class: "controls" },
        temperature,
        this.control("Top-k", topK, { field: "top_k" }),
        this.control("Top-p", topP, { field: "top_p" }),
      ),
    );
    return parts;
  }

  request() {
    const s = this.state;
    const body = { logits: s.logits, temperature: s.temperature, include: ["log_probabilities"] };
    if (s.top_k !== null) body.top_k = s.top_k;
    if (s.top_p !== null) body.top_p = s.top_p;
    return (options) => softmax(body, options);
  }

  show(answer) {
    const s = this.state;
    const span = Math.max(...s.logits.map((x) => Math.abs(x)), 1e-9);
    const label = (i) => s.tokens[i] ?? `#${i}`;
    const summary = h(
      "p",
      { class: "summary" },
      "Entropy ",
      h("strong", { class: "entropy", text: formatNumber(answer.entropy) }),
      " nats · most likely: ",
      h("strong", { class: "argmax", text: label(answer.argmax) }),
      ` · temperature ${formatNumber(answer.temperature, 2)}`,
    );
    const header = h(
      "div",
      { class: "row head", "aria-hidden": "true" },
      h("span", { text: "token" }),
      h("span", { text: "logit" }),
      h("span", { text: "probability" }),
    );
    const rows = answer.probabilities.map((p, i) => {
      const logit = s.logits[i];
      const excluded = answer.log_probabilities?.[i] === null;
      const side = logit < 0 ? "right: 50%" : "left: 50%";
      return h(
        "div",
        {
          class: `row${i === answer.argmax ? " top" : ""}${excluded ? " excluded" : ""}`,
          "data-token": label(i),
          title: `${label(i)}: logit ${logit}, probability ${p}`,
        },
        h("span", { class: "token", text: label(i) }),
        h(
          "span",
          { class: "logit" },
          h("span", {
            class: `bar ${logit < 0 ? "neg" : "pos"}`,
            style: `width: ${(50 * Math.abs(logit)) / span}%; ${side}`,
          }),
          h("span", { class: "value", text: String(logit) }),
        ),
        h(
          "span",
          { class: "prob" },
          h("span", { class: "bar", style: `width: ${100 * p}%` }),
          h("span", { class: "value probability", text: formatNumber(p) }),
        ),
      );
    });
    this.output.replaceChildren(summary, h("div", { class: "bars" }, header, ...rows));
  }
}
