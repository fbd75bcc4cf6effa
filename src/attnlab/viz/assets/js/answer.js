// attnlab view: the answer line, above the fold: what the view on show says, in one line, e.g.
// "她 → 小, 0.9998, layer 1, head 0": the query, its strongest key (with the word that key is a piece
// of, where a tokenizer split a word), the weight, the layer and the head. Redrawn with the view.
(function (AL) {
  "use strict";
  const { $, t, layerName, tokenLabel } = AL;
  const LETTER_OR_DIGIT = /^[\p{L}\p{N}]/u, ENDS_LETTER_OR_DIGIT = /[\p{L}\p{N}]$/u, HAN = /\p{Script=Han}/u;
  // the word token j of `seq` is a piece of, or "" where it is a word of its own: WordPiece's "##"
  // continuations (BERT), a byte-level or SentencePiece tokenizer's pieces that do not start with a space
  // (GPT-2, Llama: a word starts with " ", "Ġ" or "▁"), a character's byte pieces (its `parts`); a Chinese
  // character is never joined to the next (no word boundaries are known there)
  function wordOf(seq, j) {
    const tokens = seq.tokens, n = tokens.length, special = (i) => Boolean(seq.special?.[i]);
    if (seq.parts?.[j]) return seq.parts[j];
    if (special(j)) return "";
    const wordPiece = tokens.some((x) => x.startsWith("##"));
    const spaced = !wordPiece && tokens.some((x) => /^[ Ġ▁]/.test(x));
    const joins = (i) => { // whether token i continues the word of token i − 1
      if (i <= 0 || i >= n || special(i) || special(i - 1) || HAN.test(tokens[i])) return false;
      if (wordPiece) return tokens[i].startsWith("##");
      return spaced && LETTER_OR_DIGIT.test(tokens[i]) && ENDS_LETTER_OR_DIGIT.test(tokens[i - 1]);
    };
    let first = j, last = j;
    while (joins(first)) first--;
    while (joins(last + 1)) last++;
    if (first === last) return "";
    const pieces = tokens.slice(first, last + 1).map((x, k) => (wordPiece && k > 0 ? x.slice(2) : x));
    return pieces.join("").replace(/^[ Ġ▁]+/, "").trim();
  }
  // the line's text for query i of a head's weights w (L × S, row by row), or "" where the row has no weight
  function answerText({ w, i, S, rowSeq, colSeq, layer, head }) {
    let best = -1;
    for (let j = 0; j < S; j++) if (Number.isFinite(w[i * S + j]) && (best < 0 || w[i * S + j] > w[i * S + best])) best = j;
    if (best < 0) return "";
    const word = wordOf(colSeq, best), key = tokenLabel(colSeq, best);
    const keyText = word && word !== key.trim() ? t("{0} ({1})", key, word) : key;
    const where = layer ? t("{0}, head {1}", layerName(layer), head) : t("head {0}", head);
    return [`${tokenLabel(rowSeq, i)} → ${keyText}`, w[i * S + best].toFixed(4), where].join(t(", "));
  }
  function mountAnswer(app) {
    const line = $("answer");
    app.store.register(["layer", "head", "query", "scale"], (state) => {
      const { layer, rowSeq, colSeq, S } = app.shown(state);
      const text = answerText({ w: app.weights(state.head, state), i: state.query, S, rowSeq, colSeq, layer: layer.name,
        head: state.head });
      $("answer-text").textContent = text;
      line.hidden = text === "";
    });
  }
  Object.assign(AL, { wordOf, answerText, mountAnswer });
})(globalThis.attnlab ??= {});
