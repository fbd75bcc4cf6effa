// attnlab view: rollout and flow, a layer's rollout matrix and the query's rollout and flow over the
// tokens; a row chooses the query.
(function (AL) {
  "use strict";
  const { $, t, element, panel, drawMatrix, readout, decode, colour } = AL;
  const flowName = (kind) => ({ rollout: t("rollout"), flow: t("flow") })[kind];
  function mountFlows(app, views) {
    const flows = views.flows, tokens = flows.tokens, L = tokens.length, layers = flows.layers;
    const box = panel("flows-view", t("rollout and flow:"), t("Abnar & Zuidema 2020: row i of layer l is how much of " +
      "each input token reaches position i after layer l (the residual as 0.5·I + 0.5·A, heads averaged); the " +
      "matrix is the rollout, coloured from 0 to its largest entry; click a row to make it the query"));
    const chooser = element("select", { id: "flows-layer" });
    for (let l = 0; l < layers; l++) chooser.appendChild(new Option(t("after layer {0}", l), String(l)));
    const label = element("label", {}, flowName("rollout") + " ");
    label.appendChild(chooser);
    const canvas = element("canvas", { id: "rollout" }), value = element("div", { class: "readout", id: "flows-value" });
    const table = element("table", { id: "flows-table" });
    const row = element("div", { class: "view-row" });
    const left = element("div", {});
    left.append(canvas, value);
    row.append(left, table);
    box.append(label, row);
    const arrays = { rollout: flows.rollout ? decode(flows.rollout, "float64") : null, flow: flows.flow ? decode(flows.flow, "float64") : null };
    const kinds = Object.keys(arrays).filter((k) => arrays[k] !== null), shown = kinds[0];
    const at = (kind, l, i, j) => arrays[kind][(l * L + i) * L + j];
    chooser.addEventListener("change", () => app.setState({ flowsLayer: Number(chooser.value) }));
    const layerOf = (state) => state.flowsLayer ?? layers - 1;
    function draw(state) {
      const l = layerOf(state), q = Math.min(state.query, L - 1);
      chooser.value = String(l);
      let top = 0;
      for (let n = l * L * L; n < (l + 1) * L * L; n++) top = Math.max(top, arrays[shown][n]);
      $("flows-view-title").textContent = t("{0} after layer {1}, query {2} ({3})", flowName(shown), l, q, tokens[q]);
      drawMatrix(canvas, {
        rows: tokens, cols: tokens, value: (i, j) => at(shown, l, i, j), colour: (x) => colour(top > 0 ? x / top : 0),
        side: 420, mark: [q, null], onClick: (i) => app.select(i), onHover: (i, j) => app.setState({ flowsCell: [i, j] }),
      });
      table.replaceChildren();
      const header = table.insertRow();
      for (const name of ["j", t("token"), ...kinds.map(flowName)]) header.appendChild(element("th", {}, name));
      tokens.forEach((t, j) => {
        const tr = table.insertRow();
        tr.insertCell().textContent = String(j);
        tr.insertCell().textContent = t;
        for (const kind of kinds) {
          const x = at(kind, l, q, j), td = tr.insertCell(), bar = element("span", { class: "bar" });
          bar.style.width = `${Math.round(60 * Math.max(0, Math.min(1, x)))}px`;
          td.append(bar, document.createTextNode(" " + x.toFixed(4)));
          td.dataset.value = x.toFixed(4);
          td.dataset.kind = kind;
        }
      });
    }
    function drawReadout(state) {
      if (state.flowsCell === undefined) return;
      const [i, j] = state.flowsCell, l = layerOf(state);
      readout(value, t("{0} after layer {1}: position {2} ({3}) ← token {4} ({5}): {6}", flowName(shown), l, i,
        tokens[i], j, tokens[j], at(shown, l, i, j).toFixed(4)), at(shown, l, i, j));
    }
    app.store.register(["query", "flowsLayer"], draw);
    app.store.register(["flowsCell"], drawReadout);
  }
  Object.assign(AL, { mountFlows });
})(globalThis.attnlab ??= {});
