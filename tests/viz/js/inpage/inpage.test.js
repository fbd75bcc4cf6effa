// The page that runs its model (attnlab view --in-browser): its tokenizer's ids and tokens against attnlab's
// tokenizer, its forward against attnlab's NumPy forward on the weights the page stores (hidden states, every
// layer's q, k, v and weights, with heads ablated and other scales), and the page's JSON it draws against
// viz._page_data's: cases written by tests/viz/test_inpage.py (the JSON named by ATTNLAB_INPAGE_CASES).
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");

const JS = path.join(__dirname, "..", "..", "..", "..", "src", "attnlab", "viz", "assets", "js");
for (const name of ["core", "i18n", "decoding", "inpage_tokenizer", "inpage_model", "inpage_main"]) {
  require(path.join(JS, `${name}.js`));
}
const AL = globalThis.attnlab;
const cases = JSON.parse(fs.readFileSync(process.env.ATTNLAB_INPAGE_CASES, "utf-8"));
const TOLERANCE = 1e-5;

// the largest |x − y| / max(1, |y|) of two arrays of one length
function worst(x, y) {
  assert.equal(x.length, y.length);
  let most = 0;
  for (let n = 0; n < y.length; n++) most = Math.max(most, Math.abs(x[n] - y[n]) / Math.max(1, Math.abs(y[n])));
  return most;
}

for (const { name, spec, cases: texts } of cases.tokenizers) {
  test(`the page's tokenizer gives ${name}'s ids and tokens for ${texts.length} texts`, () => {
    const tokenizer = AL.createTokenizer(spec);
    for (const c of texts) {
      const ids = tokenizer.encode(c.text);
      assert.deepEqual(ids, c.ids, JSON.stringify(c.text));
      assert.deepEqual(ids.map((id) => AL.shownToken(spec, tokenizer, id)), c.tokens, JSON.stringify(c.text));
    }
  });
}

for (const { name, spec, forwards } of cases.models) {
  test(`the page's forward of ${name} is NumPy's within ${TOLERANCE}: hidden states, q, k, v, weights`, () => {
    const model = AL.createModel(spec), tokenizer = AL.createTokenizer(spec.tokenizer);
    for (const c of forwards) {
      const what = `${c.text} ×${c.multiplier} ablated [${c.ablated}]`;
      assert.deepEqual(tokenizer.encode(c.text), c.ids, what);
      const run = model.forward(c.ids, { multiplier: c.multiplier, ablated: new Set(c.ablated) });
      c.hidden.forEach((y, n) => assert.ok(worst(run.hidden[n], y) <= TOLERANCE, `${what}: hidden state ${n}`));
      c.layers.forEach((y, l) => {
        const got = { Q: run.layers[l].q, K: run.layers[l].k, V: run.layers[l].v, weights: run.layers[l].weights };
        for (const key of ["Q", "K", "V", "weights"]) assert.ok(worst(got[key], y[key]) <= TOLERANCE, `${what}: layer ${l} ${key}`);
      });
    }
  });
}

test("an ablated head changes the answer, and the scale moves it (builtin:coref, 她)", { skip: !cases.page }, () => {
  const spec = cases.page.spec, model = AL.createModel(spec), tokenizer = AL.createTokenizer(spec.tokenizer);
  const ids = tokenizer.encode(cases.page.text), L = ids.length;
  const she = ids.map((id) => AL.shownToken(spec.tokenizer, tokenizer, id)).lastIndexOf("她");
  const view = { layer: 1, head: 0, query: she };
  const plain = AL.answerOf(model.forward(ids), view, L);
  const flat = AL.answerOf(model.forward(ids, { multiplier: 0.01 }), view, L);
  assert.ok(plain.weight > 0.9 && flat.weight < plain.weight / 2, `${plain.weight} ${flat.weight}`);
  const ablated = model.forward(ids, { ablated: new Set(["0,0", "0,1", "0,2", "0,3"]) });
  assert.notEqual(AL.answerOf(ablated, view, L).weight, plain.weight);
});

test("the page's JSON of a forward is viz._page_data's of NumPy's trace (float64): names, tokens, numbers", { skip: !cases.page }, () => {
  const { spec, text, expected, skeleton } = cases.page;
  const model = AL.createModel(spec), tokenizer = AL.createTokenizer(spec.tokenizer);
  const ids = tokenizer.encode(text);
  const page = AL.tracePage(skeleton, tokenizer, spec.tokenizer, ids, model.forward(ids), expected.opens, []);
  assert.deepEqual(Object.keys(page).sort(), Object.keys(expected).sort());
  assert.deepEqual(page.sequences, expected.sequences);
  for (const key of ["model", "architecture", "kv_heads", "opens", "random_seed", "notes", "image", "lang"]) {
    assert.deepEqual(page[key], expected[key], key);
  }
  page.layers.forEach((layer, l) => {
    const want = expected.layers[l];
    for (const [key, value] of Object.entries(want)) {
      if (["q", "k", "v"].includes(key)) {
        assert.ok(worst(AL.decode(layer[key], layer.dtype), AL.decode(value, want.dtype)) <= 1e-9, `layer ${l} ${key}`);
      } else if (key === "scores") assert.equal(layer.scores, null); // the page computes them from q and k
      else if (key === "scale") assert.ok(Math.abs(layer.scale - value) < 1e-15);
      else assert.deepEqual(layer[key], value, `layer ${l} ${key}`);
    }
  });
});
