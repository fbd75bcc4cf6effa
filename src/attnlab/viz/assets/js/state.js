// attnlab view: the state, everything that changes what the page draws, and its transitions. It
// changes only through setState(patch), which merges the patch and calls render(changed): each view
// registers what it draws with the state's keys it reads, and is drawn again when one of them
// changed (a hover redraws the head view, not the step table). The transitions are pure functions
// of the state and the layers (tested by tests/viz/js/state.test.js).
(function (AL) {
  "use strict";
  // a store over `initial`: state (read only: a frozen copy), setState(patch), register(keys, draw),
  // render(changed) (every view when changed is null)
  function createStore(initial) {
    let state = Object.freeze({ ...initial }); // the one variable that changes
    const views = [];
    const render = (changed = null) => {
      for (const view of views) {
        if (changed === null || view.keys.some((key) => changed.includes(key))) view.draw(state);
      }
    };
    return {
      get state() { return state; },
      setState(patch) {
        const changed = Object.keys(patch).filter((key) => !Object.is(patch[key], state[key]));
        if (changed.length === 0) return changed;
        state = Object.freeze({ ...state, ...patch });
        render(changed);
        return changed;
      },
      // a view drawn when one of `keys` changes (and by render()); `draw` reads the state it is given
      register(keys, draw) { views.push({ keys, draw }); },
      render,
    };
  }
  // the page's first state: the view it opens on (page.opens), its layer's own scale
  const initialState = (page, layers) => ({
    layer: page.opens.layer, head: page.opens.head, scale: layers[page.opens.layer].scale, query: page.opens.query,
    hover: null, cell: null, byValue: false, relative: false, picture: null,
    thumbnails: { done: 0, total: 0, at: null },
  });
  const defaultScale = (layer) => 1 / Math.sqrt(layer.d_k);
  // the slider is logarithmic: position p is 1/√d_k · 10^(p/100), from 1/100 to 100 times
  // 1/√d_k, with 1/√d_k itself at p = 0; the box next to it takes any scale, 0 included
  const scaleAt = (layer, p) => (p === 0 ? defaultScale(layer) : defaultScale(layer) * 10 ** (p / 100));
  const positionOf = (layer, s) =>
    (s > 0 ? Math.max(-200, Math.min(200, Math.round(100 * Math.log10(s / defaultScale(layer))))) : -200);
  const scaleText = (layer, s) => (Math.abs(s - defaultScale(layer)) < 1e-12 ? "= 1/√d_k"
    : `= ${(s / defaultScale(layer)).toPrecision(3)} × 1/√d_k`);
  // another layer: its heads (the head kept where it has it), its queries, and the scale's ratio to the
  // layer's own kept; the cell under the pointer forgotten where the sequences on the axes change
  function layerPatch(state, layers, l) {
    const before = layers[state.layer], after = layers[l];
    const ratio = before.scale !== 0 ? state.scale / before.scale : 1; // against the model's own scale
    const same = before.rows === after.rows && before.cols === after.cols;
    return {
      layer: l, head: Math.min(state.head, after.heads - 1), query: Math.min(state.query, after.L - 1),
      scale: ratio * after.scale, cell: same ? state.cell : null, hover: same ? state.hover : null,
    };
  }
  // the link's whole number `name` in 0..limit-1, or null
  function linkedIndex(wanted, name, limit) {
    const n = Number(wanted.get(name));
    return wanted.has(name) && Number.isInteger(n) && n >= 0 && n < limit ? n : null;
  }
  // a link's view (#layer=3&head=1&query=9&scale=0.5, the layer the model's number): the patch that
  // shows it, each part that is not a usable value left as it is; `usable(layer, s)`: a scale's check
  function linkPatch(state, layers, hash, usable) {
    const wanted = new URLSearchParams(hash.replace(/^#/, ""));
    const number = linkedIndex(wanted, "layer", Infinity);
    const found = number === null ? -1 : layers.findIndex((x) => (x.index ?? 0) === number);
    const patch = found >= 0 && found !== state.layer ? layerPatch(state, layers, found) : {};
    const layer = layers[patch.layer ?? state.layer];
    patch.query = linkedIndex(wanted, "query", layer.L) ?? patch.query ?? state.query;
    patch.head = linkedIndex(wanted, "head", layer.heads) ?? patch.head ?? state.head;
    const text = (wanted.get("scale") ?? "").trim(), linked = Number(text);
    if (text !== "" && usable(layer, linked)) patch.scale = linked;
    return patch;
  }
  Object.assign(AL, {
    createStore, initialState, defaultScale, scaleAt, positionOf, scaleText, layerPatch, linkedIndex, linkPatch,
  });
})(globalThis.attnlab ??= {});
