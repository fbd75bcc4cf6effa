// The answer line (answer.js): the query, its strongest key and the word that key is a piece of, the
// weight, the layer and head; the folded model view's window of layers (fold.js); a model's notes (notes.js).
const test = require("node:test");
const assert = require("node:assert/strict");
const { attnlab } = require("./load.js");

const sequence = (tokens, special = tokens.map(() => false)) => ({ tokens, special, parts: tokens.map(() => "") });

test("a key's word: WordPiece's ## pieces, a byte-level tokenizer's pieces without a space, never Chinese", () => {
  const bert = sequence(["[CLS]", "the", "token", "##izer", "##s", "work", "[SEP]"], [true, false, false, false, false, false, true]);
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((j) => attnlab.wordOf(bert, j)), ["", "tokenizers", "tokenizers", "tokenizers", "", ""]);
  const gpt = sequence(["<s>", "The", " tok", "en", "izer", ",", " ok"], [true, false, false, false, false, false, false]);
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((j) => attnlab.wordOf(gpt, j)), ["", "tokenizer", "tokenizer", "tokenizer", "", ""]);
  const chinese = sequence(["[CLS]", "小", "明", "是"], [true, false, false, false]);
  assert.deepEqual([1, 2].map((j) => attnlab.wordOf(chinese, j)), ["", ""]);
  const bytes = { ...sequence(["\ufffd", "\ufffd"]), parts: ["好", "好"] };
  assert.equal(attnlab.wordOf(bytes, 1), "好"); // a character's byte pieces: the character
});

test("the answer line names the query's largest weight, its word, the weight to 4 decimals, the layer and head", () => {
  const seq = sequence(["a", " tok", "en", " b"]);
  const w = Float64Array.from([1, 0, 0, 0, 0.1, 0.2, 0.6, 0.1, 0.25, 0.25, 0.25, 0.25, 0.05, 0.7, 0.2, 0.05]); // 4 × 4
  const args = { w, S: 4, rowSeq: seq, colSeq: seq, layer: "layer 3", head: 2 };
  assert.equal(attnlab.answerText({ ...args, i: 3 }), " b →  tok (token), 0.7000, layer 3, head 2");
  assert.equal(attnlab.answerText({ ...args, i: 1 }), " tok → en (token), 0.6000, layer 3, head 2");
  assert.equal(attnlab.answerText({ ...args, i: 0, layer: "" }), "a → a, 1.0000, head 2"); // a single trace: no layer
  const masked = Float64Array.from([NaN, NaN, NaN, NaN, ...w.slice(4)]);
  assert.equal(attnlab.answerText({ ...args, w: masked, i: 0 }), ""); // no weight: no line
});

test("a folded model view shows the layer on show and two either side, inside the model", () => {
  assert.deepEqual(attnlab.foldedLayers(30, 16), [14, 15, 16, 17, 18]);
  assert.deepEqual(attnlab.foldedLayers(30, 0), [0, 1, 2, 3, 4]);
  assert.deepEqual(attnlab.foldedLayers(30, 29), [25, 26, 27, 28, 29]);
  assert.deepEqual(attnlab.foldedLayers(3, 1), [0, 1, 2]);
});

test("a model's notes read in the page's language: their numbers and names kept, another note as it is", () => {
  const { noteText, useLanguage } = attnlab;
  useLanguage("zh");
  try {
    assert.equal(noteText("Q4_1, dequantized to float32"), "Q4_1，反量化为 float32");
    assert.equal(noteText("cut to its first 512 of 600 tokens (the model's positions)"),
      "截取了 600 个词元中的前 512 个（模型的位置数）");
    assert.equal(noteText("the text as a user's message in the model's chat template"), "文本作为用户的一条消息，放进模型的聊天模板");
    assert.equal(noteText("something else"), "something else");
  } finally {
    useLanguage("en");
  }
  assert.equal(noteText("Q4_1, dequantized to float32"), "Q4_1, dequantized to float32");
});
