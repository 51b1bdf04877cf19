// A bigram model with add-α smoothing, learned in the page from a short text: the one computation the
// widgets do themselves (the service then scores a text with the logits it gives).

// The built-in text the bigram model learns from: short, plain sentences with repeated patterns.
export const CORPUS = `the cat sat on the mat . the dog sat on the rug .
the cat saw the dog . the dog saw the cat .
a cat sat on a mat . the bird sat on the roof . the cat ate the fish . the dog ate the bone .
the bird saw the cat on the roof . the cat sat on the sofa . the dog slept on the rug .
the sun is warm . the cat is warm on the mat . the dog is happy . the bird is small .`;

/** Lower-case words, numbers and punctuation marks, in order. */
export function tokenize(text) {
  return text.toLowerCase().match(/[a-z0-9']+|[.,!?;:]/g) ?? [];
}

/**
 * A bigram model with add-α smoothing, learned from `corpus`; the `extra` words join its vocabulary unseen.
 * `logitsAfter(word)` is the row of logits for the word that follows: log(count(word → v) + α) for each v.
 */
export function bigramModel(corpus, { extra = [], smoothing = 0.1 } = {}) {
  const training = tokenize(corpus);
  const vocabulary = [...new Set([...training, ...extra])];
  const index = new Map(vocabulary.map((word, i) => [word, i]));
  const counts = vocabulary.map(() => new Array(vocabulary.length).fill(0));
  for (let t = 1; t < training.length; t++) counts[index.get(training[t - 1])][index.get(training[t])] += 1;
  const logitsAfter = (word) => counts[index.get(word)].map((count) => Math.log(count + smoothing));
  return { vocabulary, index, logitsAfter };
}

/** What /v1/log-likelihood needs to score `tokens` under the bigram model of `corpus`. */
export function bigramLogits(corpus, tokens, smoothing = 0.1) {
  const { vocabulary, index, logitsAfter } = bigramModel(corpus, { extra: tokens, smoothing });
  return {
    vocabulary,
    logits: tokens.map((word) => logitsAfter(word)),
    targets: tokens.map((word) => index.get(word)),
  };
}

/**
 * The bigram model extended to a trigram one (order 3, the default) for generating text: `logits(context)`
 * is log(count(last two words → v) + α) for each word v of `vocabulary`, backing off to the bigram row of
 * the last word when that pair never occurred (so an unseen pair does not become a uniform guess); order 2
 * is the bigram model.
 */
export function ngramModel(corpus, { order = 3, smoothing = 0.1, extra = [] } = {}) {
  const bigram = bigramModel(corpus, { extra, smoothing });
  const { vocabulary, index } = bigram;
  const training = tokenize(corpus);
  const pairs = new Map(); // "w1 w2" → counts of the word after them, one per vocabulary entry
  for (let t = 2; t < training.length; t++) {
    const pair = `${training[t - 2]} ${training[t - 1]}`;
    if (!pairs.has(pair)) pairs.set(pair, new Array(vocabulary.length).fill(0));
    pairs.get(pair)[index.get(training[t])] += 1;
  }
  const logits = (context) => {
    const pair = order >= 3 && context.length >= 2 ? `${context.at(-2)} ${context.at(-1)}` : null;
    const counts = pair === null ? undefined : pairs.get(pair);
    return counts ? counts.map((count) => Math.log(count + smoothing)) : bigram.logitsAfter(context.at(-1));
  };
  return { vocabulary, logits };
}
