// attnlab view: the model view, a small heatmap per (layer, head) at that layer's 1/√d_k, weights
// 0 → 1, in groups by kind; drawn after the first view, one head at a time in slices of about 8 ms
// while the page is idle, the shown layer's first (progress in state.thumbnails). A click, Enter or
// space opens a head.
(function (AL) {
  "use strict";
  const { $, t, layerName, maskOf, scoresOf, scoreRows, softmaxInto, weightsOf, weightsKnown, putCell } = AL;
  const THUMBNAIL = 128; // at most this many pixels a side, each the largest weight of the cells it covers
  const kindTitle = (kind) => ({
    self: t("self-attention"), encoder: t("encoder self-attention: encoder tokens × encoder tokens"),
    decoder: t("decoder self-attention: decoder tokens × decoder tokens"),
    cross: t("cross-attention: decoder tokens (rows, queries) × encoder tokens (columns, keys)"),
  })[kind];
  // head h's thumbnail: its weights at the layer's own scale, 0 → 1, each pixel the largest weight among the
  // cells it covers (grey: all masked; red: one is not a number); computed a row at a time from its scores
  function* thumbnailRows(canvas, layer, h) {
    const { L, S } = layer, width = canvas.width, height = canvas.height, masked = maskOf(layer, h);
    const best = new Float64Array(width * height).fill(-1), bad = new Uint8Array(width * height);
    const known = weightsKnown(layer, h, layer.scale) ? weightsOf(layer, h, layer.scale) : null;
    const s = new Float64Array(S), w = new Float64Array(S), z = new Float64Array(S);
    const column = Int32Array.from({ length: S }, (_, j) => Math.floor((j * width) / S));
    for (let i = 0; i < L; i++) {
      const row = Math.floor((i * height) / L) * width;
      if (known) w.set(known.subarray(i * S, (i + 1) * S));
      else softmaxInto(layer, h, layer.scores ? scoresOf(layer, h) : scoreRows(layer, h, i, i + 1, s, true),
        layer.scores ? i * S : 0, layer.scale, i, w, 0, z);
      for (let j = 0; j < S; j++) {
        if (masked[i * S + j] === 1) continue;
        const n = row + column[j];
        if (Number.isFinite(w[j])) best[n] = Math.max(best[n], w[j]);
        else bad[n] = 1;
      }
      yield;
    }
    const context = canvas.getContext("2d"), image = context.createImageData(width, height);
    for (let n = 0; n < width * height; n++) putCell(image.data, 4 * n, bad[n] ? NaN : best[n], 1, !bad[n] && best[n] < 0);
    context.putImageData(image, 0, 0);
    canvas.classList.remove("pending");
  }
  function mountModelView(app) {
    const { layers } = app;
    // head h of layer l, `size` pixels on its longer side (cross-attention's L × S is not square)
    function thumbnail(layer, l, h, size) {
      const small = document.createElement("canvas"), longer = Math.max(layer.L, layer.S);
      small.width = Math.min(layer.S, THUMBNAIL);
      small.height = Math.min(layer.L, THUMBNAIL);
      small.classList.add("pending");
      const side = (n) => Math.max(Math.min(size, 24), Math.round((size * n) / longer)); // a thin one stays clickable
      small.style.width = `${side(layer.S)}px`;
      small.style.height = `${side(layer.L)}px`;
      small.style.imageRendering = "pixelated";
      small.title = t("{0}, head {1}", layerName(layer.name), h);
      small.dataset.layer = String(l);
      small.dataset.head = String(h);
      small.addEventListener("click", () => app.openHead(l, h));
      small.tabIndex = 0;
      small.setAttribute("role", "button");
      small.setAttribute("aria-label", t("open {0}, head {1}", layerName(layer.name), h));
      small.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); app.openHead(l, h); }
      });
      return small;
    }
    function drawGrid() {
      const grid = $("grid"), heads = Math.max(...layers.map((x) => x.heads));
      // every head in the page's width (an 820 px frame holds MiniLM's 12), past the layer names' column
      const room = ($("grid-box").clientWidth || 1100) - 64;
      const size = Math.max(20, Math.min(96, Math.floor(room / heads) - 2));
      const header = grid.insertRow();
      header.appendChild(document.createElement("th"));
      for (let h = 0; h < heads; h++) {
        const th = document.createElement("th");
        th.textContent = t("head {0}", h);
        header.appendChild(th);
      }
      for (const [kind, members] of app.groups) {
        if (app.grouped) {
          const th = document.createElement("th");
          th.colSpan = heads + 1;
          th.className = "kind";
          th.textContent = kindTitle(kind);
          grid.insertRow().appendChild(th);
        }
        for (const l of members) {
          const layer = layers[l], tr = grid.insertRow(), th = document.createElement("th");
          th.textContent = layerName(layer.name);
          tr.dataset.kind = kind;
          tr.dataset.layer = String(l);
          tr.appendChild(th);
          for (let h = 0; h < layer.heads; h++) tr.insertCell().appendChild(thumbnail(layer, l, h, size));
        }
      }
    }
    // draw every thumbnail, the shown layer's first, in slices of about 8 ms while the page is idle,
    // so that the page answers input throughout
    function drawThumbnails() {
      const all = [...$("grid").querySelectorAll("canvas.pending")], shown = String(app.state.layer);
      const order = [...all.filter((t) => t.dataset.layer === shown), ...all.filter((t) => t.dataset.layer !== shown)];
      const jobs = order.map((canvas) => () => thumbnailRows(canvas, layers[Number(canvas.dataset.layer)], Number(canvas.dataset.head)));
      const later = window.requestIdleCallback ?? ((run) => setTimeout(() => run(null), 0));
      const progress = (done) => app.setState({ thumbnails: { done, total: jobs.length, at: done === jobs.length ? performance.now() : null } });
      const slice = (done, current) => {
        const until = performance.now() + 8;
        while (performance.now() < until) {
          if (current === null) {
            if (done === jobs.length) { progress(done); return; }
            current = jobs[done]();
          }
          if (current.next().done) { current = null; progress(++done); }
        }
        later(() => slice(done, current), { timeout: 50 });
      };
      progress(0);
      later(() => slice(0, null), { timeout: 50 });
    }
    function markGrid(state) {
      for (const t of $("grid").querySelectorAll("canvas")) {
        t.classList.toggle("current", Number(t.dataset.layer) === state.layer && Number(t.dataset.head) === state.head);
      }
    }
    if (app.page.model) {
      $("model-view").hidden = false;
      drawGrid();
      AL.mountFold(app); // many layers: folded to a few (fold.js)
    }
    app.store.register(["layer", "head"], markGrid);
    return { drawThumbnails };
  }
  Object.assign(AL, { mountModelView });
})(globalThis.attnlab ??= {});
