// attnlab view: the controls (layer, head, scale, the two checkboxes), the notes above the views,
// the actions every view calls (select, setHead, useLayer, openHead, setScale: each one setState),
// and links: page.html#layer=3&head=1&query=9&scale=0.5 opens that view.
(function (AL) {
  "use strict";
  const { $, t, layerName, sequenceName, kindName, defaultScale, scaleAt, positionOf, scaleText, layerPatch, linkPatch,
    usableScale, scrollToQuery } = AL;
  // what a page that rounds its numbers to fit says it did (attnlab.viz._encoding.binary)
  const roundingNote = (dtype) => (dtype === "float24" ? t("; q, k, v rounded to 17 significant bits to fit the page")
    : dtype.startsWith("fixed") ? t("; q, k, v rounded to fit the page: {0} bits a number, each vector in steps of its " +
      "largest |x| / {1}", dtype.slice(5), 2 ** (Number(dtype.slice(5)) - 1) - 1) : "");
  function summary(app, state) {
    const { layer, rowSeq, colSeq, L, S } = app.shown(state), { heads, d_k } = layer, count = app.layers.length;
    const length = rowSeq === colSeq ? t("{0} tokens", L)
      : t("{0} queries ({1}) × {2} keys ({3})", L, sequenceName(rowSeq.name), S, sequenceName(colSeq.name));
    const { model, architecture, kv_heads: kvHeads } = app.page;
    const named = model ? t("{0}: ", architecture ? t("{0} ({1})", model, architecture) : model) : "";
    const shared = !(kvHeads && kvHeads < heads) ? ""
      : kvHeads > 1 ? t(" sharing {0} key/value heads", kvHeads) : t(" sharing {0} key/value head", kvHeads);
    const parts = [length, ...(count > 1 ? [app.grouped ? t("{0} attention modules", count) : t("{0} layers", count)] : []),
      (heads > 1 ? t("{0} heads", heads) : t("{0} head", heads)) + shared, `d_k = ${d_k}`];
    return named + parts.join(t(", ")) + roundingNote(app.page.layers[0].dtype);
  }
  const randomNote = (page) => [...(page.random_seed === null ? []
    : [t("random weights (seed {0}), not trained: what a head shows here is chance, not something learned",
      page.random_seed)]),
    ...(page.notes || []).map(AL.noteText), // in the page's language (notes.js)
    ...(page.sequences.some((seq) => seq.template?.some(Boolean)) ? [t("blue tokens: the chat template's, not the user's")]
      : []),
  ].join(" · ");
  // the actions: each changes the state through setState, which draws what it changed
  function actions(app) {
    const select = (i, scroll = false) => {
      app.setState({ query: i });
      if (scroll) scrollToQuery(i);
    };
    const setHead = (h) => app.setState({ head: h });
    const setScale = (s) => app.setState({ scale: s });
    const useLayer = (l) => app.setState(layerPatch(app.state, app.layers, l));
    const openHead = (l, h) => {
      app.setState({ ...(l !== app.state.layer ? layerPatch(app.state, app.layers, l) : {}), head: h });
      $("head-panel").scrollIntoView({ block: "start" });
    };
    const applyLink = () => {
      app.setState(linkPatch(app.state, app.layers, location.hash, usableScale));
      scrollToQuery(app.state.query); // the linked query, or the one the page opens on
      // a link to a layer or a head brings its view into sight, as a click on its thumbnail does
      if (/(^|[#&])(layer|head)=/.test(location.hash)) $("head-panel").scrollIntoView({ block: "start" });
    };
    return { select, setHead, setScale, useLayer, openHead, applyLink };
  }
  function mountControls(app, cellSize) {
    const slider = $("scale"), shownLayer = () => app.shown().layer;
    slider.addEventListener("input", () => app.setScale(scaleAt(shownLayer(), Number(slider.value))));
    $("scale-input").addEventListener("change", () => {
      const text = $("scale-input").value.trim(), s = Number(text);
      if (text !== "" && usableScale(shownLayer(), s)) app.setScale(s);
      else $("scale-input").value = String(app.state.scale); // not a scale: keep the one in use
    });
    $("scale-mark").textContent = "▲ 1/√d_k";
    $("scale-mark").style.left = "50%";
    $("scale-reset").addEventListener("click", () => app.setScale(defaultScale(shownLayer())));
    $("relative").addEventListener("change", () => app.setState({ relative: $("relative").checked }));
    $("by-value").addEventListener("change", () => app.setState({ byValue: $("by-value").checked }));
    $("head").addEventListener("change", () => app.setHead(Number($("head").value)));
    $("layer").addEventListener("change", () => app.useLayer(Number($("layer").value)));
    // the layer selector: every entry by name, in groups by kind where the model has kinds
    const selector = $("layer");
    for (const [kind, members] of app.groups) {
      const parent = app.grouped ? document.createElement("optgroup") : selector;
      if (app.grouped) {
        parent.label = kindName(kind);
        selector.appendChild(parent);
      }
      for (const l of members) parent.appendChild(new Option(layerName(app.layers[l].name), String(l)));
    }
    $("layer-label").hidden = app.layers.length < 2;
    $("random-note").textContent = randomNote(app.page);
    $("random-note").hidden = !randomNote(app.page);
    // the layer on show: its heads, the summary, the rules it was built with and what its grey cells are
    function drawLayer(state) {
      const layer = app.shown(state).layer;
      $("layer").value = String(state.layer);
      $("head").replaceChildren(...Array.from({ length: layer.heads }, (_, h) => new Option(t("head {0}", h), String(h))));
      $("summary").textContent = summary(app, state);
      $("rules-note").hidden = !layer.rules;
      const grey = cellSize(state) < 6 ? t("Grey cells") : t("Grey, struck-through cells"); // as the heatmap draws them
      $("rules-note").textContent = layer.rules ? t("attention rules: {0}. {1} are masked keys.", layer.rules, grey) : "";
    }
    function drawScale(state) {
      const layer = app.shown(state).layer;
      $("head").value = String(state.head);
      slider.value = String(positionOf(layer, state.scale));
      $("scale-input").value = String(state.scale);
      $("scale-value").textContent = scaleText(layer, state.scale);
      $("scale-value").dataset.scale = String(state.scale);
    }
    app.store.register(["layer"], drawLayer);
    app.store.register(["layer", "head", "scale"], drawScale);
  }
  Object.assign(AL, { actions, mountControls });
})(globalThis.attnlab ??= {});
