// attnlab view: the heatmap of the head on show (token labels on both axes, masked cells grey and
// struck through, the query's row outlined), its colour bar, legends and the cell under the pointer.
(function (AL) {
  "use strict";
  const { $, t, sequenceName, FONT, WIDE_FONT, WIDE_PUNCTUATION, short, shorten, pieceOnly, tokenLabel, labelColour,
    maskOf, maskedIn, maskedCount, MASKED, MASKED_STROKE, NOT_A_NUMBER, pixel, colourPixel } = AL;
  // the L×S weights w of head h onto an S wide, L high canvas, a pixel each
  function paintWeights(target, layer, h, w, top) {
    const { L, S } = layer, context = target.getContext("2d"), image = context.createImageData(S, L);
    const masked = maskOf(layer, h), pixels = new Uint32Array(image.data.buffer), grey = pixel(MASKED), red = pixel(NOT_A_NUMBER);
    for (let n = 0; n < L * S; n++) {
      const x = w[n];
      pixels[n] = masked[n] === 1 ? grey : x - x !== 0 ? red : colourPixel(top > 0 ? x / top : 0);
    }
    context.putImageData(image, 0, 0);
  }
  // fixed while a layer's sequences are on show: the cells' width (`cell`, a column's) and height
  // (`rowCell`, a row's: the same when L = S; cross-attention's few queries over many keys get taller
  // rows, up to 4 times as tall as wide), every `every`-th column's and `everyRow`-th row's token
  // labelled when they would crowd, the labels of the rows (`shown`) and of the columns (`shownKeys`),
  // the margin that holds them, and whether the columns' stand upright (one or two characters, a Chinese
  // token, when every shown label fits its column)
  function heatmapLayout({ rowSeq, colSeq, L, S }) {
    const measure = $("heatmap").getContext("2d");
    measure.font = FONT;
    const fit = (n) => Math.max(1, Math.min(48, Math.floor(640 / n)));
    const cell = fit(Math.max(L, S)), rowCell = L === S ? cell : Math.max(cell, Math.min(fit(L), 4 * cell));
    const every = Math.max(1, Math.ceil(13 / cell)), everyRow = Math.max(1, Math.ceil(13 / rowCell));
    const thinned = (seq, n) => seq.tokens.map((t, i) => (i % n === 0 ? shorten(t, 16) : null));
    const shown = thinned(rowSeq, everyRow), shownKeys = colSeq === rowSeq ? shown : thinned(colSeq, every);
    const labelled = [...shown, ...shownKeys].filter((t) => t !== null), widthOf = (t) => measure.measureText(t).width;
    const margin = Math.min(140, 10 + Math.max(16, ...labelled.map(widthOf)));
    const upright = shownKeys.filter((t) => t !== null).every((t) => [...t].length <= 2 && widthOf(t) <= every * cell - 2);
    return { cell, rowCell, shown, shownKeys, margin, upright, every, everyRow };
  }
  const ordinal = (n) => n + ((n % 100 >= 11 && n % 100 <= 13) ? "th" : ["th", "st", "nd", "rd"][n % 10] ?? "th");
  // labels thinned to fit: which ones the axes carry (every n-th `what`, of count)
  const thinnedNote = (n, count, what) =>
    t("every {0} {1} labelled ({2} of {3}: tokens 0, {4}, {5}, …)", ordinal(n), what, Math.ceil(count / n), count, n, 2 * n);
  function axisNote({ rowSeq, colSeq, L, S }, { every, everyRow }) {
    if (every === 1 && everyRow === 1) return "";
    const notes = rowSeq === colSeq ? [thinnedNote(every, L, t("token"))]
      : [...(everyRow > 1 ? [thinnedNote(everyRow, L, t("query"))] : []),
        ...(every > 1 ? [thinnedNote(every, S, t("key"))] : [])];
    return t("axes: {0}; hover a cell for its query and key", notes.join(t("; ")));
  }
  // colour is the weight itself (0 → 1) unless "relative" is on: then 0 → the head's largest
  function colourScale(app, state) {
    const w = app.weights(state.head, state), { L, S } = app.shown(state);
    let top = 0, bad = 0;
    for (let n = 0; n < L * S; n++) if (Number.isFinite(w[n])) top = Math.max(top, w[n]); else bad++;
    return { w, top: state.relative ? top : 1, bad };
  }
  const legendText = (state, top, bad) => (state.relative
    ? t("colour: 0 (dark) → {0} (bright), the largest weight of this head", top.toFixed(4))
    : t("colour: the weight itself, 0 (dark) → 1 (bright); uniform attention over L keys is 1/L")) +
    (bad ? t("; red: {0} weights that are not numbers (NaN: scores that overflowed)", bad) : "");

  function mountHeatmap(app) {
    const canvas = $("heatmap"), bar = $("colourbar"), bitmap = document.createElement("canvas");
    const layouts = new Map(); // a memo: the layout of each pair of sequences
    const layoutOf = (state = app.state) => {
      const shown = app.shown(state), key = `${shown.layer.rows} ${shown.layer.cols}`;
      if (!layouts.has(key)) layouts.set(key, heatmapLayout(shown));
      return layouts.get(key);
    };
    // the canvases' sizes, the axes' heading and note, for the sequences on show
    function drawAxes(state) {
      const shown = app.shown(state), { L, S, rowSeq, colSeq } = shown, { margin, cell, rowCell } = layoutOf(state);
      canvas.width = margin + S * cell;
      canvas.height = margin + L * rowCell;
      bar.width = 70;
      bar.height = canvas.height + 8; // room for the 0 tick's label
      bitmap.width = S;
      bitmap.height = L;
      $("axes").textContent = rowSeq === colSeq ? t("rows: queries, columns: keys")
        : t("rows: {0} queries, {1} tokens; columns: {2} keys, {3} tokens", L, sequenceName(rowSeq.name), S,
          sequenceName(colSeq.name));
      $("axis-note").textContent = axisNote(shown, layoutOf(state));
    }
    function drawLabels(ctx, state) {
      const { rowSeq, colSeq } = app.shown(state), { cell, rowCell, shown, shownKeys, margin, upright } = layoutOf(state);
      ctx.font = FONT;
      ctx.fillStyle = "#222";
      ctx.textBaseline = "middle";
      const draw = (labels, column) => labels.forEach((t, i) => {
        if (t === null) return;
        const mid = margin + (i + 0.5) * (column ? cell : rowCell);
        ctx.font = WIDE_PUNCTUATION.test(t) ? WIDE_FONT : FONT; // as in the head view: "，" in a CJK font
        if (pieceOnly(column ? colSeq : rowSeq, i)) { // a piece that shows no character: an orange dash
          ctx.fillStyle = "#b60";
          if (column) ctx.fillRect(mid - 1, margin - 12, 2, 8);
          else ctx.fillRect(margin - 12, mid - 1, 8, 2);
        }
        ctx.fillStyle = column ? labelColour(colSeq, i) : i === state.query ? "#b00" : labelColour(rowSeq, i);
        if (!column) { // query i, left of row i
          ctx.textAlign = "right";
          ctx.fillText(t, margin - 4, mid, margin - 6);
          return;
        }
        ctx.save(); // key j, above column j: upright, or read bottom to top
        if (upright) {
          ctx.textAlign = "center";
          ctx.fillText(t, mid, margin - 10);
        } else {
          ctx.translate(mid, margin - 4);
          ctx.rotate(-Math.PI / 2);
          ctx.textAlign = "left";
          ctx.fillText(t, 0, 0, margin - 6);
        }
        ctx.restore();
      });
      draw(shown, false);
      draw(shownKeys, true);
    }
    // a stroke across each masked cell, from its bottom left to its top right, while cells are large enough
    function strikeMasked(ctx, state) {
      const { layer, L, S } = app.shown(state), { cell, rowCell, margin } = layoutOf(state);
      if (Math.min(cell, rowCell) < 6) return;
      const masked = maskOf(layer, state.head);
      ctx.beginPath();
      for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) {
        if (masked[i * S + j] !== 1) continue;
        ctx.moveTo(margin + j * cell + 1, margin + (i + 1) * rowCell - 1);
        ctx.lineTo(margin + (j + 1) * cell - 1, margin + i * rowCell + 1);
      }
      ctx.strokeStyle = MASKED_STROKE;
      ctx.lineWidth = 1;
      ctx.stroke();
    }
    function drawBar(state, top) {
      const { L } = app.shown(state), { margin, rowCell } = layoutOf(state);
      const ctx = bar.getContext("2d"), y0 = margin, height = L * rowCell;
      ctx.clearRect(0, 0, bar.width, bar.height);
      const strip = ctx.createImageData(14, Math.max(1, height)), pixels = new Uint32Array(strip.data.buffer);
      for (let y = 0; y < height; y++) pixels.fill(colourPixel(1 - y / Math.max(1, height - 1)), 14 * y, 14 * (y + 1));
      ctx.putImageData(strip, 0, y0);
      ctx.font = FONT;
      ctx.fillStyle = "#222";
      ctx.textAlign = "left";
      ctx.textBaseline = "middle";
      for (const f of [0, 0.25, 0.5, 0.75, 1]) ctx.fillText(short(f * top), 18, y0 + (1 - f) * (height - 1));
    }
    function drawHeatmap(state) {
      const { layer, L, S } = app.shown(state), { margin, cell, rowCell } = layoutOf(state);
      const { w, top, bad } = colourScale(app, state);
      paintWeights(bitmap, layer, state.head, w, top);
      const ctx = canvas.getContext("2d");
      ctx.clearRect(0, 0, canvas.width, canvas.height);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(bitmap, margin, margin, S * cell, L * rowCell);
      strikeMasked(ctx, state);
      drawLabels(ctx, state);
      ctx.strokeStyle = "#d00";
      ctx.strokeRect(margin + 0.5, margin + state.query * rowCell + 0.5, S * cell - 1, Math.max(1, rowCell - 1));
      drawBar(state, top);
      $("legend").textContent = legendText(state, top, bad);
      const count = maskedCount(layer, state.head); // what a grey cell means, while the head on show has any
      $("mask-legend").hidden = count === 0;
      $("mask-text").textContent = t("masked ({0} cells): a rule (causal, the window, a mask) leaves this key out " +
        "for this query, so its score is −∞ and its weight is exactly 0 (not a small weight: the key takes no part in the " +
        "softmax)", count);
    }
    // the weight of the cell under the pointer
    function drawCell(state) {
      const { layer, rowSeq, colSeq, L, S } = app.shown(state);
      if (state.cell === null) { $("cell-value").textContent = ""; return; }
      if (state.cell[0] >= L || state.cell[1] >= S) return;
      const [i, j] = state.cell, w = app.weights(state.head, state)[i * S + j];
      const masked = maskedIn(layer, state.head, i, j) ? t(" (masked: the key is ruled out)") : "";
      $("cell-value").textContent = t("head {0}, scale {1}: query {2} ({3}) → key {4} ({5}): {6}{7}", state.head,
        state.scale.toFixed(4), i, tokenLabel(rowSeq, i), j, tokenLabel(colSeq, j), w.toFixed(4), masked);
      $("cell-value").dataset.value = w.toFixed(4);
    }
    // the [query, key] under the pointer, or null off the cells
    function cellAt(event) {
      const { L, S } = app.shown(), { margin, cell, rowCell } = layoutOf();
      const box = canvas.getBoundingClientRect();
      const x = ((event.clientX - box.left) / box.width) * canvas.width - margin;
      const y = ((event.clientY - box.top) / box.height) * canvas.height - margin;
      const i = Math.floor(y / rowCell), j = Math.floor(x / cell);
      return x >= 0 && y >= 0 && i < L && j < S ? [i, j] : null;
    }
    canvas.addEventListener("mousemove", (event) => {
      const at = cellAt(event);
      if (at && (app.state.cell === null || at[0] !== app.state.cell[0] || at[1] !== app.state.cell[1])) app.setState({ cell: at });
    });
    canvas.addEventListener("click", (event) => { const at = cellAt(event); if (at) app.select(at[0]); });
    const { store } = app;
    store.register(["layer"], drawAxes);
    store.register(["layer", "head", "scale", "query", "relative"], drawHeatmap);
    store.register(["layer", "head", "scale", "query", "cell"], drawCell);
    return { layoutOf, colourScale: (state = app.state) => colourScale(app, state) };
  }
  Object.assign(AL, { mountHeatmap });
})(globalThis.attnlab ??= {});
