// The score rules and the softmax: a layer of the page's JSON (q, k, v and maybe the scores, the masks
// as runs, softcap, bias, sinks), its weights as the page computes them, against NumPy's
// softmax(softcap(scale · q·kᵀ) + bias) over the unmasked keys with the sink in the sum, and against
// the engine's own weights for traces of attnlab.
const test = require("node:test");
const assert = require("node:assert/strict");
const { attnlab, cases, close, number } = require("./load.js");

const { maths } = cases();

for (const c of maths.layers) {
  test(`the weights of ${c.name} are NumPy's (or the engine's)`, () => {
    const layer = attnlab.layerOf(c.layer, c.sequences);
    const { L, S } = layer;
    for (let h = 0; h < layer.heads; h++) {
      const w = attnlab.weightsOf(layer, h, c.scale);
      for (let n = 0; n < L * S; n++) {
        const y = number(c.weights[h][n]);
        assert.ok(close(w[n], y, c.tolerance), `${c.name}: head ${h}, cell ${n}: ${w[n]} != ${y}`);
      }
    }
  });
  test(`the raw scores of ${c.name} are NumPy's q·kᵀ, masked ones NaN when computed`, () => {
    const layer = attnlab.layerOf(c.layer, c.sequences);
    for (let h = 0; h < layer.heads; h++) {
      const s = attnlab.scoresOf(layer, h), mask = attnlab.maskOf(layer, h);
      s.forEach((x, n) => {
        if (c.layer.scores === null && mask[n] === 1) assert.ok(Number.isNaN(x));
        else assert.ok(close(x, number(c.scores[h][n]), c.tolerance), `${x} != ${c.scores[h][n]}`);
      });
    }
  });
}

for (const c of maths.modified) {
  test(`the score rule z = softcap(scale · s) + bias of ${c.name} is NumPy's`, () => {
    const layer = attnlab.layerOf(c.layer, c.sequences);
    const s = attnlab.scoresOf(layer, 0);
    for (let i = 0; i < layer.L; i++) for (let j = 0; j < layer.S; j++) {
      const z = attnlab.modify(layer, 0, s[i * layer.S + j], c.scale, i, j);
      assert.ok(close(z, c.z[i * layer.S + j], 1e-12), `${z} != ${c.z[i * layer.S + j]}`);
    }
  });
}

test("a scale that overflows a score is refused, any scale once a softcap bounds z", () => {
  const c = maths.layers[0], layer = attnlab.layerOf(c.layer, c.sequences);
  assert.equal(attnlab.usableScale(layer, 0.5), true);
  assert.equal(attnlab.usableScale(layer, 0), true);
  assert.equal(attnlab.usableScale(layer, -1), false);
  assert.equal(attnlab.usableScale(layer, Infinity), false);
  assert.equal(attnlab.usableScale(layer, 1e308), false);
  assert.equal(attnlab.usableScale({ ...layer, softcap: 30 }, 1e308), true);
});

test("the cache keeps the most recent heads within its cells", () => {
  const cache = attnlab.createCache(10);
  let made = 0;
  const make = () => { made++; return new Float64Array(4); };
  cache.get("a", make); cache.get("b", make); cache.get("a", make); // a is the most recent
  cache.get("c", make); // 12 cells: b goes
  assert.equal(made, 3);
  assert.ok(cache.has("a") && cache.has("c") && !cache.has("b"));
});
