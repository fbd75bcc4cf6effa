// attnlab view: two texts through one model, the same layer and head side by side, and B − A where
// the tokens align.
(function (AL) {
  "use strict";
  const { $, t, element, panel, drawMatrix, readout, fixed, decode, colour, diverging, shownIndex } = AL;
  function mountPair(app, views) {
    const pair = views.pair;
    const box = panel("pair-view", t("two texts:"), t("each at the model's own scale (1/√d_k); B − A over the " +
      "tokens that align ({0}); blue: A attends more, red: B attends more", t(pair.rule))); // the rule: viz._views'
    const row = element("div", { class: "view-row" });
    const figures = [t("text A"), t("text B"), t("B − A, aligned tokens")].map((caption, n) => {
      const figure = element("figure", {});
      const canvas = element("canvas", { id: `pair-${["a", "b", "diff"][n]}` });
      figure.append(canvas, element("figcaption", { class: "note" }, caption));
      row.appendChild(figure);
      return canvas;
    });
    const value = element("div", { class: "readout", id: "pair-value" });
    box.append(row, value);
    const decoded = new Map(); // a memo: each text's decoded weights of a layer
    const weightsOf = (t, index) => {
      const key = `${t}:${index}`;
      if (!decoded.has(key)) {
        const layer = pair.texts[t].layers.find((x) => x.index === index);
        decoded.set(key, layer ? { heads: layer.heads, w: decode(layer.weights, "float32") } : null);
      }
      return decoded.get(key);
    };
    const [first, second] = pair.texts, aligned = pair.aligned, labels = aligned.map(([i, j]) =>
      (first.tokens[i] === second.tokens[j] ? first.tokens[i] : `${first.tokens[i]}|${second.tokens[j]}`));
    // the weights on show: A's and B's as functions of (query, key), or null where a text lacks the layer or head
    const shown = (state) => {
      const index = shownIndex(views, state), h = state.head, A = weightsOf(0, index), B = weightsOf(1, index);
      if (!A || !B || h >= A.heads || h >= B.heads) return null;
      const LA = first.tokens.length, LB = second.tokens.length;
      const wA = (i, j) => A.w[(h * LA + i) * LA + j], wB = (i, j) => B.w[(h * LB + i) * LB + j];
      return { wA, wB, diff: (a, b) => wB(aligned[a][1], aligned[b][1]) - wA(aligned[a][0], aligned[b][0]) };
    };
    const hover = (figure) => (a, b) => app.setState({ pairCell: [figure, a, b] });
    function draw(state) {
      $("pair-view-title").textContent = t("layer {0}, head {1}", shownIndex(views, state), state.head);
      const w = shown(state);
      if (w === null) { value.textContent = t("this layer or head is not in both traces"); return; }
      drawMatrix(figures[0], { rows: first.tokens, cols: first.tokens, value: w.wA, colour, side: 400,
        onHover: hover(0), mark: [state.query, null] });
      const row = aligned.findIndex(([i]) => i === state.query); // the query's aligned row, if it has one
      drawMatrix(figures[1], { rows: second.tokens, cols: second.tokens, value: w.wB, colour, side: 400,
        onHover: hover(1), mark: row < 0 ? null : [aligned[row][1], null] });
      drawMatrix(figures[2], { rows: labels, cols: labels, value: w.diff, colour: (x) => diverging(x, 1), side: 400,
        markColour: "#000", mark: row < 0 ? null : [row, null], onHover: hover(2) });
    }
    function drawReadout(state) {
      const w = shown(state);
      if (state.pairCell === undefined || w === null) return;
      const [figure, a, b] = state.pairCell;
      if (figure === 2) {
        const x = w.wB(aligned[a][1], aligned[b][1]), y = w.wA(aligned[a][0], aligned[b][0]);
        readout(value, t("B − A: query {0} → key {1}: {2} − {3} = {4}", labels[a], labels[b], x.toFixed(4), y.toFixed(4),
          w.diff(a, b).toFixed(4)), w.diff(a, b));
        return;
      }
      const [text, tokens, at] = figure === 0 ? ["A", first.tokens, w.wA] : ["B", second.tokens, w.wB];
      readout(value, t("{0}: query {1} ({2}) → key {3} ({4}): {5}", text, a, tokens[a], b, tokens[b], fixed(at(a, b))),
        at(a, b));
    }
    app.store.register(["layer", "head", "query"], draw);
    app.store.register(["pairCell"], drawReadout);
  }
  Object.assign(AL, { mountPair });
})(globalThis.attnlab ??= {});
