// attnlab view: generated tokens, each new token's attention over everything before it, as the decode
// step with the KV cache computed it.
(function (AL) {
  "use strict";
  const { $, t, layerName, element, panel, drawMatrix, readout, fixed, decode, colour, shownIndex } = AL;
  function mountGeneration(app, views) {
    const generation = views.generation, P = generation.prompt, tokens = generation.tokens, N = tokens.length - P;
    const T = tokens.length - 1;
    const box = panel("generation-view", t("generated tokens:"), t("rows: the {0} generated tokens; columns: the " +
      "{1} prompt tokens, then the generated ones (after the red line). Row n is the weights of the decode step " +
      "that chose the token, as the KV cache computed it: one query, the token before it, over every key before " +
      "the new token (grey: keys it did not have yet)", N, P));
    const canvas = element("canvas", { id: "generation" }), value = element("div", { class: "readout", id: "generation-value" });
    box.append(canvas, value);
    const decoded = new Map(); // a memo: each layer's decoded weights
    // the recorded layer on show (the first where the page's was not recorded), its head and weights
    const shown = (state) => {
      const found = generation.layers.find((x) => x.index === shownIndex(views, state)), layer = found ?? generation.layers[0];
      if (!decoded.has(layer.index)) decoded.set(layer.index, decode(layer.weights, "float32"));
      const w = decoded.get(layer.index), h = Math.min(state.head, layer.heads - 1);
      return { layer, missing: found === undefined, h, at: (n, j) => (j < P + n ? w[(h * N + n) * T + j] : null), w };
    };
    function draw(state) {
      const { layer, missing, h, at, w } = shown(state);
      let top = 0;
      for (let n = h * N * T; n < (h + 1) * N * T; n++) top = Math.max(top, w[n]);
      $("generation-view-title").textContent = t("{0}, head {1}", layerName(layer.name), h) +
        (missing ? t(" (the page's layer was not recorded)") : "") +
        t("; colour 0 (dark) → {0} (bright), this head's largest", top.toFixed(4));
      drawMatrix(canvas, {
        rows: tokens.slice(P), cols: tokens.slice(0, T), value: at, colour: (x) => colour(top > 0 ? x / top : 0),
        split: P, side: 640, maxCell: 28, onHover: (n, j) => app.setState({ generationCell: [n, j] }),
      });
    }
    function drawReadout(state) {
      if (state.generationCell === undefined) return;
      const [n, j] = state.generationCell, { at } = shown(state);
      readout(value, t("generated token {0} ({1}), chosen by the query {2} ({3}) → key {4} ({5}): {6}", P + n,
        tokens[P + n], P + n - 1, tokens[P + n - 1], j, tokens[j], at(n, j) === null ? t("not yet a key")
          : fixed(at(n, j))), at(n, j));
    }
    app.store.register(["layer", "head"], draw);
    app.store.register(["generationCell"], drawReadout);
  }
  Object.assign(AL, { mountGeneration });
})(globalThis.attnlab ??= {});
