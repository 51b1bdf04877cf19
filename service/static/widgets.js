// Embeddable teaching widgets backed by the attention service: ES modules without dependencies or a build
// step. Loading this one defines every widget:
//
//   <script type="module" src="http://HOST/static/widgets.js"></script>
//   <attention-heatmap data='{"tokens": ["the", "cat"], "query": [[0, 1], [1, 0]], ...}'></attention-heatmap>
//
// Attributes of every widget: `api` (the service's base URL; by default the origin this module came from),
// `data` (the example, as JSON) and `controls` (show the editors as well). Every number a widget shows is
// the service's answer; the widgets only lay it out (the likelihood widget's bigram logits aside).
// Each widget is its own module under widgets/, on the life cycle of widgets/base.js.

import { AttentionHeatmap } from "./widgets/attention-heatmap.js";
import { defineWidget } from "./widgets/base.js";
import { KvCache } from "./widgets/kv-cache.js";
import { MultiHeadAttention } from "./widgets/multi-head-attention.js";
import { PositionalEncoding } from "./widgets/positional-encoding.js";
import { SoftmaxTemperature } from "./widgets/softmax-temperature.js";
import { TextGeneration } from "./widgets/text-generation.js";
import { TokenLikelihood } from "./widgets/token-likelihood.js";
import { TransformerBlock } from "./widgets/transformer-block.js";

export { defineWidget, formatNumber, readoutFor, ServiceWidget, viridis } from "./widgets/base.js";
export { bigramLogits, bigramModel, ngramModel } from "./widgets/bigram.js";
export { matrixTable } from "./widgets/matrix.js";
export {
  AttentionHeatmap,
  KvCache,
  MultiHeadAttention,
  PositionalEncoding,
  SoftmaxTemperature,
  TextGeneration,
  TokenLikelihood,
  TransformerBlock,
};

for (const widget of [
  AttentionHeatmap,
  SoftmaxTemperature,
  TokenLikelihood,
  TextGeneration,
  MultiHeadAttention,
  PositionalEncoding,
  KvCache,
  TransformerBlock,
])
  defineWidget(widget);
