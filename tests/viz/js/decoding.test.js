// Decoding: every encoding viz._encoding.binary writes (exact, float24, fixedN) and masks as runs
// (mask_runs), decoded by the page's decoding module, against the numbers NumPy computed.
const test = require("node:test");
const assert = require("node:assert/strict");
const { attnlab, cases, close, number } = require("./load.js");

const { decoding } = cases();

for (const c of decoding.arrays) {
  test(`decode ${c.dtype} of ${c.name} gives NumPy's numbers`, () => {
    const got = attnlab.decode(c.text, c.dtype, c.width);
    assert.equal(got.length, c.expected.length);
    c.expected.forEach((y, n) => assert.ok(close(got[n], number(y)), `${n}: ${got[n]} != ${y}`));
  });
}

for (const c of decoding.masks) {
  test(`mask runs of ${c.name} give the mask's bytes and its count`, () => {
    c.runs.forEach((rows, m) => {
      const bytes = attnlab.maskFromRuns(rows, c.S);
      assert.deepEqual(Array.from(bytes), c.expected[m]);
      assert.equal(attnlab.maskedCells(rows), c.expected[m].reduce((a, x) => a + x, 0));
    });
  });
}

test("fields read lazily are made once, when first read", () => {
  let made = 0;
  const record = attnlab.lazily({ a: 1 }, { b: () => { made++; return [2]; } });
  assert.equal(made, 0);
  assert.equal(record.b, record.b);
  assert.equal(made, 1);
});
