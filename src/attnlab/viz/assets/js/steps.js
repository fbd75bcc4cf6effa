// attnlab view: step by step for the query on show: ① q·k_j ② × scale (z_j: the score rules)
// ③ softmax → α_j ④ α_j·v_j ⑤ their sum, the output; at most STEP_ROWS keys listed.
(function (AL) {
  "use strict";
  const { $, t, layerName, vec, tokenLabel, tokenClass, tokenTitle, vectorAt, maskedIn, modify, modified, normsOf,
    scoreRow } = AL;
  // the table's columns (the second, the keys' tokens); ② is z_j when the layer modifies its scores (softcap, a
  // bias), as the note under the steps says
  const stepColumns = (layer) => [
    "j", t("token"), "k_j", "① q·k_j", modified(layer) ? "② z_j" : t("② scaled"), "③ α_j", "④ α_j·v_j", "‖α_j·v_j‖",
  ];
  function stepsHeader(table, layer) {
    const head = table.insertRow();
    stepColumns(layer).forEach((name, n) => {
      const th = document.createElement("th");
      th.textContent = name;
      if (n === 1) th.className = "token";
      head.appendChild(th);
    });
  }
  // key j's row for `query` ({ i, h, layer, w, s: the query's raw scores, colSeq, scale }); adds α_j·v_j to total
  function stepRow(table, query, j, total) {
    const { i, h, layer, w, s, colSeq, scale } = query, S = layer.S;
    const k = vectorAt(layer.k, layer.d_k, S, h, j), dot = s[j], a = w[i * S + j];
    const av = vectorAt(layer.v, layer.d_v, S, h, j).map((x) => a * x);
    av.forEach((x, n) => (total[n] += x));
    const z = maskedIn(layer, h, i, j) ? t("masked") : modify(layer, h, dot, scale, i, j).toFixed(4);
    const norms = (a * normsOf(layer).values[h][j]).toFixed(4);
    const cells = [j, tokenLabel(colSeq, j), vec(k), dot.toFixed(4), z, a.toFixed(4), vec(av), norms];
    const tr = table.insertRow();
    tr.dataset.weight = String(a);
    cells.forEach((text, n) => {
      const td = tr.insertCell();
      td.textContent = String(text);
      if (n === 1) {
        td.className = ("token " + tokenClass(colSeq, j)).trim();
        td.title = tokenTitle(colSeq, j);
      }
    });
  }
  // the keys the step table lists: every one up to STEP_ROWS, else the STEP_ROWS of the largest weights
  // (a table of thousands of rows of vectors takes the browser seconds to lay out), in order
  const STEP_ROWS = 512;
  function stepKeys(w) {
    const all = Array.from({ length: w.length }, (_, j) => j);
    if (w.length <= STEP_ROWS) return all;
    const weight = (j) => (Number.isFinite(w[j]) ? w[j] : -1);
    return all.sort((a, b) => weight(b) - weight(a) || a - b).slice(0, STEP_ROWS).sort((a, b) => a - b);
  }
  // what ② and ③ do beyond × scale and softmax, in words, for a layer that modifies its scores
  function stepsRules(layer, h) {
    const parts = [];
    let z = t("scale·q·k_j");
    if (layer.softcap !== null) z = `${layer.softcap}·tanh(${z} / ${layer.softcap})`;
    if (layer.bias !== null) z += t(" + bias_j (the float mask, ALiBi)");
    if (layer.softcap !== null || layer.bias !== null) parts.push(t("② here z_j = {0}", z));
    if (layer.sinks !== null) {
      parts.push(t("③ adds the sink (logit {0}) to the softmax's sum, so the α_j sum to less than 1",
        layer.sinks[h].toFixed(4)));
    }
    return parts.length ? parts.join(t("; ")) + t("; masked keys take no part in ③") : "";
  }
  function mountSteps(app) {
    function draw(state) {
      const { layer, rowSeq, colSeq, L, S } = app.shown(state), i = state.query, h = state.head;
      const query = { i, h, layer, w: app.weights(h, state), s: scoreRow(layer, h, i), colSeq, scale: state.scale };
      const where = [t("{0} ({1})", i, tokenLabel(rowSeq, i)), ...(layer.name ? [layerName(layer.name)] : []), t("head {0}", h)];
      $("steps-token").textContent = where.join(t(", "));
      $("query-vector").textContent = "q = " + vec(vectorAt(layer.q, layer.d_k, L, h, i));
      const table = $("steps");
      table.replaceChildren();
      stepsHeader(table, layer);
      const keys = stepKeys(query.w.subarray(i * S, (i + 1) * S)), total = new Array(layer.d_v).fill(0);
      const listed = keys.length < S
        ? t("the {0} keys of the largest α_j of {1} are listed (in order); ⑤ sums over all {1}", keys.length, S) : "";
      $("steps-rules").textContent = [stepsRules(layer, h), listed].filter(Boolean).join(t("; "));
      for (const j of keys) stepRow(table, query, j, total);
      if (keys.length < S) { // the output over every key, listed or not
        total.fill(0);
        for (let j = 0; j < S; j++) vectorAt(layer.v, layer.d_v, S, h, j).forEach((x, n) => (total[n] += query.w[i * S + j] * x));
      }
      $("output-vector").textContent = t("⑤ output = Σ α_j·v_j = ") + vec(total);
    }
    app.store.register(["layer", "head", "scale", "query"], draw);
  }
  Object.assign(AL, { mountSteps });
})(globalThis.attnlab ??= {});
