// State transitions: the store (one setState, views drawn again only when what they read changed),
// another layer, a link, the scale slider's positions.
const test = require("node:test");
const assert = require("node:assert/strict");
const { attnlab } = require("./load.js");

const layer = (fields) => ({ scale: 0.5, d_k: 4, heads: 2, L: 5, S: 5, rows: 0, cols: 0, index: 0, ...fields });

test("setState merges a patch, and draws only the views that read what changed", () => {
  const store = attnlab.createStore({ query: 0, hover: null, head: 0 });
  const drawn = [];
  store.register(["query", "head"], (state) => drawn.push(["heatmap", state.query]));
  store.register(["hover", "query"], (state) => drawn.push(["head view", state.hover]));
  assert.deepEqual(store.setState({ hover: 3 }), ["hover"]);
  assert.deepEqual(drawn, [["head view", 3]]);
  assert.deepEqual(store.setState({ hover: 3 }), []); // nothing changed: nothing drawn
  store.setState({ query: 2 });
  assert.deepEqual(drawn.slice(1), [["heatmap", 2], ["head view", 3]]);
  assert.equal(store.state.query, 2);
  assert.throws(() => { "use strict"; store.state.query = 4; }); // frozen: only setState changes it
  store.render();
  assert.equal(drawn.length, 5);
});

test("the page opens on page.opens at its layer's own scale", () => {
  const layers = [layer({}), layer({ scale: 0.25 })];
  const state = attnlab.initialState({ opens: { layer: 1, head: 1, query: 3 } }, layers);
  assert.deepEqual([state.layer, state.head, state.query, state.scale, state.cell], [1, 1, 3, 0.25, null]);
});

test("another layer keeps the head and query where it has them, and the scale's ratio", () => {
  const layers = [layer({}), layer({ heads: 1, L: 3, S: 3, scale: 0.25 }), layer({ rows: 1, cols: 1 })];
  const state = { layer: 0, head: 1, query: 4, scale: 1.0, cell: [1, 2], hover: 2 };
  assert.deepEqual(attnlab.layerPatch(state, layers, 1),
    { layer: 1, head: 0, query: 2, scale: 0.5, cell: [1, 2], hover: 2 });
  const other = attnlab.layerPatch(state, layers, 2); // other sequences on the axes: the pointer forgotten
  assert.deepEqual([other.cell, other.hover], [null, null]);
});

test("a link opens its layer (by the model's number), head, query and a usable scale", () => {
  const layers = [layer({ index: 3 }), layer({ index: 5, scale: 1.0 })];
  const state = { layer: 0, head: 0, query: 0, scale: 0.5, cell: null, hover: null };
  const usable = (l, s) => s >= 0 && s < 10;
  assert.deepEqual(attnlab.linkPatch(state, layers, "#layer=5&head=1&query=4&scale=2", usable),
    { layer: 1, head: 1, query: 4, scale: 2, cell: null, hover: null });
  const bad = attnlab.linkPatch(state, layers, "#layer=7&head=9&query=-1&scale=1e400", usable);
  assert.deepEqual(bad, { query: 0, head: 0 }); // nothing usable: the view stays
});

test("the scale slider is logarithmic around 1/√d_k", () => {
  const l = layer({ d_k: 4 });
  assert.equal(attnlab.defaultScale(l), 0.5);
  assert.equal(attnlab.scaleAt(l, 0), 0.5);
  assert.ok(Math.abs(attnlab.scaleAt(l, 100) - 5) < 1e-12);
  assert.equal(attnlab.positionOf(l, 5), 100);
  assert.equal(attnlab.positionOf(l, 0), -200);
  assert.equal(attnlab.positionOf(l, 1e9), 200);
  assert.equal(attnlab.scaleText(l, 0.5), "= 1/√d_k");
  assert.equal(attnlab.scaleText(l, 1), "= 2.00 × 1/√d_k");
});
