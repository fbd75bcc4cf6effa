// attnlab view: the page as one object, `app`, that each view mounts on: the page's JSON, its
// layers (maths.layerOf, sharing one cache), the store (state.createStore), and what every view
// reads of the state: the layer on show and its sequences, a head's weights at the scale on show.
(function (AL) {
  "use strict";
  const { createCache, layerOf, weightsOf, createStore, initialState } = AL;
  // an encoder-decoder model's kinds, in the order the page groups them, and their headings
  const KINDS = ["self", "encoder", "decoder", "cross"];
  function createApp(page) {
    const cache = createCache(), sequences = page.sequences;
    const layers = page.layers.map((layer) => layerOf(layer, sequences, cache));
    const store = createStore(initialState(page, layers));
    // the layer on show, and the sequences on its rows (L queries) and columns (S keys)
    const shown = (state = store.state) => {
      const layer = layers[state.layer];
      return { layer, rowSeq: sequences[layer.rows], colSeq: sequences[layer.cols], L: layer.L, S: layer.S };
    };
    // the layers' positions grouped by kind, each group in the model's order: [[kind, [l, …]], …]
    const groups = KINDS.map((kind) => [kind, layers.flatMap((x, l) => (x.kind === kind ? [l] : []))])
      .filter(([, members]) => members.length > 0);
    return {
      page, sequences, layers, store, shown, groups, grouped: groups.length > 1 || layers.some((x) => x.kind !== "self"),
      weights: (h, state = store.state) => weightsOf(layers[state.layer], h, state.scale),
      setState: (patch) => store.setState(patch),
      get state() { return store.state; },
    };
  }
  Object.assign(AL, { createApp });
})(globalThis.attnlab ??= {});
