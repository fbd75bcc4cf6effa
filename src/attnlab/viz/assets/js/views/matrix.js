// attnlab view, the views beyond a trace's heads (inlined after the page's modules, from their own JSON
// block #attnlab-views): a matrix drawn on a canvas (labels on both axes, a colour per cell, hover and
// click) and a view's panel. Each view mounts on the page's app (attnlab.app): it draws under the
// page's layer, head and query, and its hover and choices change the page's one state.
(function (AL) {
  "use strict";
  const { $, element, FONT, shorten, short, MASKED: GREY } = AL;
  // spec: rows and cols (labels), value(i, j) (a number, or null: no cell), colour(v), the
  // largest side in pixels, and optional onHover(i, j), onClick(i, j), mark(i, j) (outlined),
  // split (a column before which a line is drawn)
  function drawMatrix(canvas, spec) {
    const ctx = canvas.getContext("2d"), rows = spec.rows.length, cols = spec.cols.length;
    const cell = Math.max(spec.minCell ?? 3, Math.min(spec.maxCell ?? 36, Math.floor((spec.side ?? 420) / Math.max(rows, cols))));
    ctx.font = FONT;
    const labels = [...spec.rows, ...spec.cols].map((t) => shorten(t, 14));
    const margin = Math.min(130, 12 + Math.max(16, ...labels.map((t) => ctx.measureText(t).width)));
    canvas.width = margin + cols * cell + 2;
    canvas.height = margin + rows * cell + 2;
    canvas.dataset.margin = String(margin);
    canvas.dataset.cell = String(cell);
    ctx.font = FONT;
    ctx.textBaseline = "middle";
    const every = Math.max(1, Math.ceil(12 / cell)); // a label per row while 12 px rows hold one
    spec.rows.forEach((t, i) => {
      if (i % every) return;
      ctx.fillStyle = "#222";
      ctx.textAlign = "right";
      ctx.fillText(shorten(t, 14), margin - 4, margin + (i + 0.5) * cell, margin - 6);
    });
    spec.cols.forEach((t, j) => {
      if (j % every) return;
      ctx.save();
      ctx.translate(margin + (j + 0.5) * cell, margin - 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillStyle = "#222";
      ctx.textAlign = "left";
      ctx.fillText(shorten(t, 14), 0, 0, margin - 6);
      ctx.restore();
    });
    for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) {
      const v = spec.value(i, j), [r, g, b] = v === null ? GREY : spec.colour(v);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(margin + j * cell, margin + i * cell, cell, cell);
      if (spec.text && cell >= 34 && v !== null) {
        ctx.fillStyle = (r + g + b) / 3 < 128 ? "#fff" : "#111"; // light text on a dark cell
        ctx.textAlign = "center";
        ctx.fillText(short(v), margin + (j + 0.5) * cell, margin + (i + 0.5) * cell, cell - 2);
      }
    }
    if (spec.split) {
      ctx.strokeStyle = "#d00";
      ctx.beginPath();
      ctx.moveTo(margin + spec.split * cell + 0.5, margin);
      ctx.lineTo(margin + spec.split * cell + 0.5, margin + rows * cell);
      ctx.stroke();
    }
    if (spec.mark) {
      ctx.strokeStyle = spec.markColour ?? "#d00";
      ctx.lineWidth = 2;
      const [i, j] = spec.mark;
      if (j === null) ctx.strokeRect(margin + 1, margin + i * cell + 1, cols * cell - 2, cell - 2);
      else ctx.strokeRect(margin + j * cell + 1, margin + i * cell + 1, cell - 2, cell - 2);
      ctx.lineWidth = 1;
    }
    const at = (event) => {
      const box = canvas.getBoundingClientRect();
      const x = ((event.clientX - box.left) / box.width) * canvas.width - margin;
      const y = ((event.clientY - box.top) / box.height) * canvas.height - margin;
      const i = Math.floor(y / cell), j = Math.floor(x / cell);
      return x >= 0 && y >= 0 && i < rows && j < cols ? [i, j] : null;
    };
    canvas.onmousemove = (event) => { const c = at(event); if (c && spec.onHover) spec.onHover(...c); };
    canvas.onclick = (event) => { const c = at(event); if (c && spec.onClick) spec.onClick(...c); };
  }
  function panel(id, title, note) {
    const box = element("div", { class: "panel view-panel", id });
    const heading = element("h2", {}, title + " ");
    heading.appendChild(element("span", { class: "note", id: `${id}-title` }));
    box.append(heading, element("div", { class: "note" }, note));
    $("extra-views").appendChild(box);
    return box;
  }
  // the page's shown layer as the model numbers it
  const shownIndex = (views, state) => views.page_layers[state.layer];
  Object.assign(AL, { drawMatrix, panel, shownIndex });
})(globalThis.attnlab ??= {});
