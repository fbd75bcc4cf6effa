// attnlab view: the heatmap exported as PNG or SVG, carrying the title, the labels and the colour bar
// as the page shows them.
(function (AL) {
  "use strict";
  const { $, t, layerName, short, colour, cellColour, maskedIn } = AL;
  const escapeXML = (t) =>
    t.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "\ufffd") // not allowed in XML
      .replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  function mountExports(app, heatmap) {
    const title = (state) => {
      const layer = app.shown(state).layer;
      return [t("attention weights"), ...(layer.name ? [layerName(layer.name)] : []), t("head {0}", state.head),
        t("scale {0}", state.scale.toFixed(4)),
        ...(app.page.random_seed === null ? [] : [t("random weights (seed {0})", app.page.random_seed)])].join(t(", "));
    };
    function svgAxisLabels(state) {
      const { margin, cell, rowCell, shown, shownKeys, upright } = heatmap.layoutOf(state);
      const middle = (i) => margin + (i + 0.5) * cell, rowMiddle = (i) => margin + (i + 0.5) * rowCell;
      const rows = shown.flatMap((t, i) => (t === null ? []
        : [`<text x="${margin - 4}" y="${rowMiddle(i)}" text-anchor="end" dominant-baseline="middle">${escapeXML(t)}</text>`]));
      const columns = shownKeys.flatMap((t, j) => (t === null ? [] : [upright
        ? `<text x="${middle(j)}" y="${margin - 10}" text-anchor="middle" dominant-baseline="middle">${escapeXML(t)}</text>`
        : `<text transform="translate(${middle(j)} ${margin - 4}) rotate(-90)" dominant-baseline="middle">${escapeXML(t)}</text>`]));
      return [...rows, ...columns];
    }
    function svgCells(state, w, top) {
      const { layer, L, S } = app.shown(state), { margin, cell, rowCell } = heatmap.layoutOf(state), parts = [];
      for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) {
        const [r, g, b] = cellColour(w[i * S + j], top, maskedIn(layer, state.head, i, j));
        parts.push(`<rect x="${margin + j * cell}" y="${margin + i * rowCell}" width="${cell}" height="${rowCell}" fill="rgb(${r},${g},${b})"/>`);
      }
      return parts;
    }
    function svgColourBar(state, size, top) {
      const { L } = app.shown(state), { margin, rowCell } = heatmap.layoutOf(state), parts = [];
      for (let n = 0; n < 50; n++) {
        const [r, g, b] = colour(1 - n / 49);
        parts.push(`<rect class="bar" x="${size + 8}" y="${margin + (n * L * rowCell) / 50}" width="14" height="${(L * rowCell) / 50 + 0.5}" fill="rgb(${r},${g},${b})"/>`);
      }
      for (const f of [0, 0.5, 1]) parts.push(`<text x="${size + 26}" y="${margin + (1 - f) * L * rowCell}">${short(f * top)}</text>`);
      return parts;
    }
    function exportSVG() {
      const state = app.state, { L, S } = app.shown(state), { margin, cell, rowCell } = heatmap.layoutOf(state);
      const { w, top } = heatmap.colourScale(state), width = margin + S * cell, height = margin + L * rowCell;
      return [
        `<svg xmlns="http://www.w3.org/2000/svg" width="${width + 80}" height="${height + 30}" font-family="sans-serif" font-size="12">`,
        `<text x="0" y="16" font-size="14">${escapeXML(title(state))}</text><g transform="translate(0 30)">`,
        ...svgAxisLabels(state), ...svgCells(state, w, top), ...svgColourBar(state, width, top), "</g></svg>",
      ].join("");
    }
    function exportPNG() {
      const canvas = $("heatmap"), bar = $("colourbar"), out = document.createElement("canvas");
      out.width = canvas.width + bar.width + 8;
      out.height = Math.max(canvas.height, bar.height) + 30;
      const ctx = out.getContext("2d");
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, out.width, out.height);
      ctx.fillStyle = "#222";
      ctx.font = "14px sans-serif";
      ctx.fillText(title(app.state), 0, 18);
      ctx.drawImage(canvas, 0, 30);
      ctx.drawImage(bar, canvas.width + 8, 30);
      return out.toDataURL("image/png");
    }
    function download(name, url) {
      const a = document.createElement("a");
      a.href = url; a.download = name; document.body.appendChild(a); a.click(); a.remove();
    }
    const fileName = () => {
      const layer = app.shown().layer;
      return `attention-${layer.name ? layer.name.replace(/[^A-Za-z0-9_.-]+/g, "") + "-" : ""}head${app.state.head}`;
    };
    $("export-png").addEventListener("click", () => download(`${fileName()}.png`, exportPNG()));
    $("export-svg").addEventListener("click", () => {
      const url = URL.createObjectURL(new Blob([exportSVG()], { type: "image/svg+xml" }));
      download(`${fileName()}.svg`, url);
      setTimeout(() => URL.revokeObjectURL(url), 1000);
    });
    return { exportSVG, exportPNG };
  }
  Object.assign(AL, { mountExports });
})(globalThis.attnlab ??= {});
