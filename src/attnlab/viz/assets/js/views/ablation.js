// attnlab view: head ablation, the layers × heads effect, blue to red around 0 (KL, never negative: white
// at 0 to red), grey where a head was not ablated, the head on show outlined; a click opens that head.
(function (AL) {
  "use strict";
  const { $, t, element, panel, drawMatrix, readout, fixed, short, diverging, shownIndex } = AL;
  // an ablation's mode (attnlab.analysis.ablate's names) in words
  const modeName = (mode) => ({ zero: t("zero"), mean: t("mean"), patch: t("patch") })[mode] ?? mode;
  function mountAblation(app, views) {
    const ablation = views.ablation, effect = ablation.effect, layers = effect.length, heads = effect[0].length;
    const target = ablation.target === null ? "" : t(" of \"{0}\"", ablation.target);
    const box = panel("ablation-view", t("head ablation:"), t("each cell: {0}{1} when that head's output is replaced " +
      "(mode {2}); {3}; grey: not ablated. Click a cell to open that head", ablation.metric, target,
    modeName(ablation.mode), ablation.metric === "KL" ? t("darker red: the output changes more")
      : t("blue: the target loses probability, red: it gains")));
    const canvas = element("canvas", { id: "ablation" }), value = element("div", { class: "readout", id: "ablation-value" });
    box.append(canvas, value);
    const top = Math.max(0, ...effect.flat().filter((x) => x !== null).map(Math.abs));
    function draw(state) {
      const index = shownIndex(views, state);
      $("ablation-view-title").textContent = ablation.metric === "KL"
        ? t("{0} layers × {1} heads; colour 0 (white) → {2} (red), the largest KL; outlined: the head on show " +
          "(layer {3}, head {4})", layers, heads, short(top), index, state.head)
        : t("{0} layers × {1} heads; colour −{2} (blue) → {2} (red), the largest |effect|; outlined: the head on " +
          "show (layer {3}, head {4})", layers, heads, short(top), index, state.head);
      drawMatrix(canvas, {
        rows: effect.map((_, l) => t("layer {0}", l)), cols: effect[0].map((_, h) => t("head {0}", h)),
        value: (l, h) => effect[l][h],
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
      if (untraced) value.textContent = t("layer {0} is not traced on this page", l);
      else readout(value, t("layer {0}, head {1}: {2}{3} = {4}", l, h, ablation.metric, target, fixed(effect[l][h])),
        effect[l][h]);
    }
    app.store.register(["layer", "head"], draw);
    app.store.register(["ablationCell"], drawReadout);
  }
  Object.assign(AL, { mountAblation });
})(globalThis.attnlab ??= {});
