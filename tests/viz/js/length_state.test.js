// The statistics page's pure module (length_state.js): its data decoded against the statistics themselves
// (computed by attnlab.engine.attention_statistics in tests/viz/test_page_js.py, within the precision the
// page carries them in), and its view state: which head, which token, the zoomed range.
const test = require("node:test");
const assert = require("node:assert/strict");
const path = require("node:path");
const { attnlab, JS, cases } = require("./load.js");
require(path.join(JS, "length_state.js")); // after load.js's modules, decoding.js among them

test("the page's statistics decode to the engine's, within the precision they are carried in", async () => {
  const { page, expected } = cases().length;
  const stats = attnlab.statisticsOf(page);
  assert.deepEqual([stats.layers, stats.heads, stats.L, stats.k], [page.layers, page.heads, page.length, page.top_k]);
  assert.throws(() => stats.received(0, 0), /read before load/); // each head is inflated first, when it is shown
  for (const [n, [layer, head]] of expected.heads.entries()) {
    assert.equal(stats.loaded(layer, head), false);
    await stats.load(layer, head);
    assert.equal(stats.loaded(layer, head), true);
    const received = stats.received(layer, head);
    expected.received[n].forEach((r, j) => assert.ok(Math.abs(received[j] - r) <= r * 2 ** -11 + 1e-7, `received ${j}`));
    for (let i = 0; i < page.length; i++) {
      assert.ok(Math.abs(stats.entropy(layer, head, i) - expected.entropy[n][i]) <= page.log_length / 510 + 1e-9);
      assert.ok(Math.abs(stats.sinkShare(layer, head, i) - expected.sink_share[n][i]) <= 1 / 510 + 1e-9);
      const top = stats.topKeys(layer, head, i);
      assert.deepEqual(top.map(([key]) => key), expected.top_keys[n][i]); // the keys exactly, −1 left out
      top.forEach(([, w], r) => assert.ok(Math.abs(w - expected.top_weights[n][i][r]) <= 1 / 510 + 1e-9));
    }
  }
});

test("float16 decodes every kind of half: normal, subnormal, zero, infinity, NaN", () => {
  const bytes = Uint8Array.from([0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x00, 0x80, 0x00, 0x7c, 0x01, 0x7e, 0xff, 0x7b]);
  const halves = attnlab.float16s(bytes);
  assert.deepEqual(Array.from(halves.slice(0, 5)), [1, -2, 2 ** -24, -0, Infinity]);
  assert.ok(Number.isNaN(halves[5]));
  assert.equal(halves[6], 65504);
});

test("the page opens on its head and token, the whole text in view", () => {
  const page = { layers: 3, heads: 4, length: 100, opens: { layer: 2, head: 1, token: 40 } };
  assert.deepEqual(attnlab.initialLengthState(page), { layer: 2, head: 1, token: 40, from: 0, to: 100 });
  assert.deepEqual(attnlab.initialLengthState({ ...page, opens: { layer: 9, head: -1, token: 500 } }),
    { layer: 2, head: 0, token: 99, from: 0, to: 100 });
});

test("zooming keeps the position under the pointer in place, and stays within the text", () => {
  const { zoomRange, LEAST_SPAN } = attnlab;
  assert.deepEqual(zoomRange({ from: 0, to: 1000 }, 500, 0.5, 1000), { from: 250, to: 750 }); // about the middle
  assert.deepEqual(zoomRange({ from: 0, to: 1000 }, 100, 0.5, 1000), { from: 50, to: 550 }); // 100 stays at 1/10
  assert.deepEqual(zoomRange({ from: 250, to: 750 }, 500, 4, 1000), { from: 0, to: 1000 }); // out: at most L
  assert.deepEqual(zoomRange({ from: 0, to: 20 }, 10, 0.1, 1000), { from: 2, to: 2 + LEAST_SPAN }); // in: at least 16
  assert.deepEqual(zoomRange({ from: 0, to: 10 }, 5, 0.5, 10), { from: 0, to: 10 }); // a text shorter than 16
});

test("panning moves the range and stops at the ends; a typed range is clamped", () => {
  const { panRange, clampRange } = attnlab;
  assert.deepEqual(panRange({ from: 100, to: 200 }, 50, 1000), { from: 150, to: 250 });
  assert.deepEqual(panRange({ from: 100, to: 200 }, -500, 1000), { from: 0, to: 100 });
  assert.deepEqual(panRange({ from: 100, to: 200 }, 5000, 1000), { from: 900, to: 1000 });
  assert.deepEqual(clampRange(-5, 3000, 1000), { from: 0, to: 1000 });
  assert.deepEqual(clampRange(990, 995, 1000), { from: 984, to: 1000 });
});

test("going to a token keeps the range that shows it, else centres one as wide on it", () => {
  const { rangeShowing } = attnlab;
  assert.deepEqual(rangeShowing({ from: 100, to: 200 }, 150, 1000), { from: 100, to: 200 });
  assert.deepEqual(rangeShowing({ from: 100, to: 200 }, 600, 1000), { from: 550, to: 650 });
  assert.deepEqual(rangeShowing({ from: 100, to: 200 }, 990, 1000), { from: 900, to: 1000 });
});

test("a chart's pixel columns: the position under each, and each column's lowest and highest", () => {
  const { positionAt, columns } = attnlab;
  assert.equal(positionAt(0, 100, { from: 0, to: 1000 }), 0);
  assert.equal(positionAt(99.9, 100, { from: 0, to: 1000 }), 999);
  assert.equal(positionAt(50, 100, { from: 200, to: 300 }), 250);
  const values = [5, 1, 7, 3, 2, 9, 4, 8];
  const { low, high } = columns((i) => values[i], { from: 0, to: 8 }, 4);
  assert.deepEqual([Array.from(low), Array.from(high)], [[1, 3, 2, 4], [5, 7, 9, 8]]);
  const wide = columns((i) => values[i], { from: 2, to: 4 }, 4); // a position wider than a column
  assert.deepEqual(Array.from(wide.high), [7, 7, 3, 3]);
});

test("a click on the grid of profiles selects the head under it", () => {
  const grid = { left: 64, top: 18, cellW: 72, cellH: 40, layers: 30, heads: 9 };
  assert.deepEqual(attnlab.profileAt(64 + 72 * 3 + 5, 18 + 40 * 29 + 1, grid), { layer: 29, head: 3 });
  assert.equal(attnlab.profileAt(10, 100, grid), null);
  assert.equal(attnlab.profileAt(64 + 72 * 9 + 1, 30, grid), null);
  assert.equal(attnlab.profileAt(70, 18 + 40 * 30, grid), null);
});
