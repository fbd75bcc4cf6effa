// attnlab view: head ablation, the layers × heads effect, blue to red around 0, grey where a head
// was not ablated, the head on show outlined; a click opens that head.
(function (AL) {
  "use strict";
  const { $, element, panel, drawMatrix, readout, fixed, short, diverging, shownIndex } = AL;
  function mountAblation(app, views) {
    const ablation = views.ablation, effect = ablation.effect, layers = effect.length, heads = effect[0].length;
    const target = ablation.target === null ? "" : ` of "${ablation.target}"`;
    const box = panel("ablation-view", "head ablation:", `each cell: ${ablation.metric}${target} when that head's ` +
      `output is replaced (mode ${ablation.mode}); ${ablation.metric === "KL" ? "darker red: the output changes more"
        : "blue: the target loses probability, red: it gains"}; grey: not ablated. Click a cell to open that head`);
    const canvas = element("canvas", { id: "ablation" }), value = element("div", { class: "readout", id: "ablation-value" });
    box.append(canvas, value);
    const top = Math.max(0, ...effect.flat().filter((x) => x !== null).map(Math.abs));
    function draw(state) {
      const index = shownIndex(views, state);
      $("ablation-view-title").textContent = `${layers} layers × ${heads} heads; colour −${short(top)} (blue) → ` +
        `${short(top)} (red), the largest |effect|; outlined: the head on show (layer ${index}, head ${state.head})`;
      drawMatrix(canvas, {
        rows: effect.map((_, l) => `layer ${l}`), cols: effect[0].map((_, h) => `head ${h}`), value: (l, h) => effect[l][h],
        colour: (x) => diverging(x, top), text: true, side: 56 * Math.max(layers, heads), maxCell: 56, minCell: 14,
        mark: index === undefined ? null : [index, state.head], markColour: "#000",
        onHover: (l, h) => app.setState({ ablationCell: [l, h] }),
        onClick: (l, h) => {
          const position = views.page_layers.indexOf(l);
          if (position < 0) app.setState({ ablationCell: [l, h, "untraced"] });
          else app.openHead(position, h);
        },
      });
    }
    function drawReadout(state) {
      if (state.ablationCell === undefined) return;
      const [l, h, untraced] = state.ablationCell;
      if (untraced) value.textContent = `layer ${l} is not traced on this page`;
      else readout(value, `layer ${l}, head ${h}: ${ablation.metric}${target} = ${fixed(effect[l][h])}`, effect[l][h]);
    }
    app.store.register(["layer", "head"], draw);
    app.store.register(["ablationCell"], drawReadout);
  }
  Object.assign(AL, { mountAblation });
})(globalThis.attnlab ??= {});
