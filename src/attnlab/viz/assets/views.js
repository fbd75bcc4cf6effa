// attnlab view: the views beyond a trace's heads, inlined by attnlab.viz._page.render_page
// after page.js. It reads its own JSON block #attnlab-views (null: no view) and draws, under
// the page's own layer, head and query (window.attnlabView; page.js fires "attnlab:render"
// whenever it redraws):
// - two texts: the same layer and head for both, side by side, and B − A where tokens align;
// - generated tokens: each new token's row, as the decode step with the KV cache computed it;
// - rollout and flow: a layer's rollout matrix and the query's rollout and flow over the tokens;
// - ablation: the layers × heads effect, a click on a cell opening that head;
// - head types: the model view's heads outlined and labelled by their dominant kind, with a legend.
// Tokens are only ever written as text.

const byId = (id) => document.getElementById(id);
const views = JSON.parse(byId("attnlab-views").textContent);
const main = window.attnlabView;

// ---- numbers and colours ----

function decode64(text, wide) {
  const raw = atob(text), bytes = new Uint8Array(raw.length);
  for (let n = 0; n < raw.length; n++) bytes[n] = raw.charCodeAt(n);
  return wide ? new Float64Array(bytes.buffer) : new Float32Array(bytes.buffer);
}
const GREY = [224, 224, 224];
const viridis = (t) => main.colour(t);
// a difference or an effect on −top..top: blue (below 0) through white to red (above 0)
function diverging(x, top) {
  const t = top > 0 ? Math.max(-1, Math.min(1, x / top)) : 0;
  const end = t < 0 ? [59, 76, 192] : [180, 4, 38], f = Math.abs(t);
  return [255, 255, 255].map((c, n) => Math.round(c + f * (end[n] - c)));
}
// a number in a cell: two decimals, or two significant digits when smaller (0.0033, not 0.00)
const short = (x) => (x === 0 || Math.abs(x) >= 0.1 ? x.toFixed(2) : x.toPrecision(2));
const fixed = (x) => (x === null || x === undefined ? "—" : x.toFixed(4));
function element(tag, attributes = {}, text = null) {
  const e = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) e.setAttribute(key, value);
  if (text !== null) e.textContent = text;
  return e;
}

// ---- a matrix drawn on a canvas: labels on both axes, a colour per cell, hover and click ----

const FONT = "12px system-ui, 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif";
const clip = (t, most) => ([...t].length > most ? [...t].slice(0, most - 1).join("") + "…" : t);
// spec: rows and cols (labels), value(i, j) (a number, or null: no cell), colour(v), the
// largest side in pixels, and optional onHover(i, j), onClick(i, j), mark(i, j) (outlined),
// split (a column before which a line is drawn)
function drawMatrix(canvas, spec) {
  const ctx = canvas.getContext("2d"), rows = spec.rows.length, cols = spec.cols.length;
  const cell = Math.max(spec.minCell ?? 3, Math.min(spec.maxCell ?? 36, Math.floor((spec.side ?? 420) / Math.max(rows, cols))));
  ctx.font = FONT;
  const labels = [...spec.rows, ...spec.cols].map((t) => clip(t, 14));
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
    ctx.fillText(clip(t, 14), margin - 4, margin + (i + 0.5) * cell, margin - 6);
  });
  spec.cols.forEach((t, j) => {
    if (j % every) return;
    ctx.save();
    ctx.translate(margin + (j + 0.5) * cell, margin - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillStyle = "#222";
    ctx.textAlign = "left";
    ctx.fillText(clip(t, 14), 0, 0, margin - 6);
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
// a readout line: its text, and the number in data-value for a test to read
function readout(target, text, value) {
  target.textContent = text;
  target.dataset.value = value === null ? "" : value.toFixed(4);
}
function panel(id, title, note) {
  const box = element("div", { class: "panel view-panel", id });
  const heading = element("h2", {}, title + " ");
  heading.appendChild(element("span", { class: "note", id: `${id}-title` }));
  box.append(heading, element("div", { class: "note" }, note));
  byId("extra-views").appendChild(box);
  return box;
}
// the page's shown layer as the model numbers it, its head and query
const shownIndex = () => views.page_layers[main.layer];

// ---- two texts: the same layer and head, side by side, and their difference ----

function pairView(pair) {
  const box = panel("pair-view", "two texts:", `each at the model's own scale (1/√d_k); B − A over the ` +
    `tokens that align (${pair.rule}); blue: A attends more, red: B attends more`);
  const row = element("div", { class: "view-row" });
  const figures = ["text A", "text B", "B − A, aligned tokens"].map((caption, n) => {
    const figure = element("figure", {});
    const canvas = element("canvas", { id: `pair-${["a", "b", "diff"][n]}` });
    figure.append(canvas, element("figcaption", { class: "note" }, caption));
    row.appendChild(figure);
    return canvas;
  });
  const value = element("div", { class: "readout", id: "pair-value" });
  box.append(row, value);
  const cache = new Map();
  const weightsOf = (t, index) => {
    const key = `${t}:${index}`;
    if (!cache.has(key)) {
      const layer = pair.texts[t].layers.find((x) => x.index === index);
      cache.set(key, layer ? { H: layer.heads, w: decode64(layer.weights, false) } : null);
    }
    return cache.get(key);
  };
  const [first, second] = pair.texts, aligned = pair.aligned;
  const labelOf = ([i, j]) => (first.tokens[i] === second.tokens[j] ? first.tokens[i] : `${first.tokens[i]}|${second.tokens[j]}`);
  return () => {
    const index = shownIndex(), h = main.head, A = weightsOf(0, index), B = weightsOf(1, index);
    byId("pair-view-title").textContent = `layer ${index}, head ${h}`;
    if (!A || !B || h >= A.H || h >= B.H) { value.textContent = "this layer or head is not in both traces"; return; }
    const LA = first.tokens.length, LB = second.tokens.length;
    const wA = (i, j) => A.w[(h * LA + i) * LA + j], wB = (i, j) => B.w[(h * LB + i) * LB + j];
    const say = (text, i, j, tokens, w) => (a, b) =>
      readout(value, `${text}: query ${a} (${tokens[a]}) → key ${b} (${tokens[b]}): ${fixed(w(a, b))}`, w(a, b));
    drawMatrix(figures[0], {
      rows: first.tokens, cols: first.tokens, value: wA, colour: viridis, side: 400,
      onHover: say("A", 0, 0, first.tokens, wA), mark: [main.query, null],
    });
    const row = aligned.findIndex(([i]) => i === main.query); // the query's aligned row, if it has one
    drawMatrix(figures[1], { rows: second.tokens, cols: second.tokens, value: wB, colour: viridis, side: 400,
      onHover: say("B", 0, 0, second.tokens, wB), mark: row < 0 ? null : [aligned[row][1], null] });
    const labels = aligned.map(labelOf);
    const diff = (a, b) => wB(aligned[a][1], aligned[b][1]) - wA(aligned[a][0], aligned[b][0]);
    drawMatrix(figures[2], {
      rows: labels, cols: labels, value: diff, colour: (x) => diverging(x, 1), side: 400, markColour: "#000",
      mark: row < 0 ? null : [row, null],
      onHover: (a, b) => readout(value, `B − A: query ${labels[a]} → key ${labels[b]}: ${wB(aligned[a][1], aligned[b][1]).toFixed(4)} − ` +
        `${wA(aligned[a][0], aligned[b][0]).toFixed(4)} = ${diff(a, b).toFixed(4)}`, diff(a, b)),
    });
  };
}

// ---- generated tokens: each new token's attention over everything before it ----

function generationView(generation) {
  const P = generation.prompt, tokens = generation.tokens, N = tokens.length - P;
  const box = panel("generation-view", "generated tokens:", `rows: the ${N} generated tokens; columns: the ` +
    `${P} prompt tokens, then the generated ones (after the red line). Row n is the weights of the decode step ` +
    "that chose the token, as the KV cache computed it: one query, the token before it, over every key before " +
    "the new token (grey: keys it did not have yet)");
  const canvas = element("canvas", { id: "generation" }), value = element("div", { class: "readout", id: "generation-value" });
  box.append(canvas, value);
  const cache = new Map();
  return () => {
    const index = shownIndex();
    let layer = generation.layers.find((x) => x.index === index);
    const missing = layer === undefined;
    layer = layer ?? generation.layers[0];
    if (!cache.has(layer.index)) cache.set(layer.index, decode64(layer.weights, false));
    const w = cache.get(layer.index), T = tokens.length - 1, h = Math.min(main.head, layer.heads - 1);
    byId("generation-view-title").textContent = `${layer.name}, head ${h}` + (missing ? " (the page's layer was not recorded)" : "");
    const at = (n, j) => (j < P + n ? w[(h * N + n) * T + j] : null);
    let top = 0;
    for (let n = h * N * T; n < (h + 1) * N * T; n++) top = Math.max(top, w[n]);
    byId("generation-view-title").textContent += `; colour 0 (dark) → ${top.toFixed(4)} (bright), this head's largest`;
    drawMatrix(canvas, {
      rows: tokens.slice(P), cols: tokens.slice(0, T), value: at, colour: (x) => viridis(top > 0 ? x / top : 0),
      split: P, side: 640, maxCell: 28,
      onHover: (n, j) => readout(value, `generated token ${P + n} (${tokens[P + n]}), chosen by the query ${P + n - 1} ` +
        `(${tokens[P + n - 1]}) → key ${j} (${tokens[j]}): ${at(n, j) === null ? "not yet a key" : fixed(at(n, j))}`, at(n, j)),
    });
  };
}

// ---- rollout and flow: a layer's rollout matrix and the query's row over the tokens ----

function flowsView(flows) {
  const tokens = flows.tokens, L = tokens.length, layers = flows.layers;
  const box = panel("flows-view", "rollout and flow:", "Abnar & Zuidema 2020: row i of layer l is how much of " +
    "each input token reaches position i after layer l (the residual as 0.5·I + 0.5·A, heads averaged); the " +
    "matrix is the rollout, coloured from 0 to its largest entry; click a row to make it the query");
  const chooser = element("select", { id: "flows-layer" });
  for (let l = 0; l < layers; l++) chooser.appendChild(new Option(`after layer ${l}`, String(l)));
  chooser.value = String(layers - 1);
  const label = element("label", {}, "rollout ");
  label.appendChild(chooser);
  const canvas = element("canvas", { id: "rollout" }), value = element("div", { class: "readout", id: "flows-value" });
  const table = element("table", { id: "flows-table" });
  const row = element("div", { class: "view-row" });
  const left = element("div", {});
  left.append(canvas, value);
  row.append(left, table);
  box.append(label, row);
  const arrays = {
    rollout: flows.rollout ? decode64(flows.rollout, true) : null, flow: flows.flow ? decode64(flows.flow, true) : null,
  };
  const kinds = Object.keys(arrays).filter((k) => arrays[k] !== null);
  const at = (kind, l, i, j) => arrays[kind][(l * L + i) * L + j];
  const draw = () => {
    const l = Number(chooser.value), q = Math.min(main.query, L - 1), shown = kinds[0];
    let top = 0;
    for (let n = l * L * L; n < (l + 1) * L * L; n++) top = Math.max(top, arrays[shown][n]);
    byId("flows-view-title").textContent = `${shown} after layer ${l}, query ${q} (${tokens[q]})`;
    drawMatrix(canvas, {
      rows: tokens, cols: tokens, value: (i, j) => at(shown, l, i, j), colour: (x) => viridis(top > 0 ? x / top : 0),
      side: 420, mark: [q, null], onClick: (i) => main.select(i),
      onHover: (i, j) => readout(value, `${shown} after layer ${l}: position ${i} (${tokens[i]}) ← token ${j} ` +
        `(${tokens[j]}): ${at(shown, l, i, j).toFixed(4)}`, at(shown, l, i, j)),
    });
    table.replaceChildren();
    const header = table.insertRow();
    for (const name of ["j", "token", ...kinds]) header.appendChild(element("th", {}, name));
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
  };
  chooser.addEventListener("change", draw);
  return draw;
}

// ---- ablation: the layers × heads effect; a cell opens its head ----

function ablationView(ablation) {
  const effect = ablation.effect, layers = effect.length, heads = effect[0].length;
  const target = ablation.target === null ? "" : ` of "${ablation.target}"`;
  const box = panel("ablation-view", "head ablation:", `each cell: ${ablation.metric}${target} when that head's ` +
    `output is replaced (mode ${ablation.mode}); ${ablation.metric === "KL" ? "darker red: the output changes more"
      : "blue: the target loses probability, red: it gains"}; grey: not ablated. Click a cell to open that head`);
  const canvas = element("canvas", { id: "ablation" }), value = element("div", { class: "readout", id: "ablation-value" });
  box.append(canvas, value);
  const top = Math.max(0, ...effect.flat().filter((x) => x !== null).map(Math.abs));
  return () => {
    const index = shownIndex();
    byId("ablation-view-title").textContent = `${layers} layers × ${heads} heads; colour −${short(top)} (blue) → ` +
      `${short(top)} (red), the largest |effect|; outlined: the head on show (layer ${index}, head ${main.head})`;
    drawMatrix(canvas, {
      rows: effect.map((_, l) => `layer ${l}`), cols: effect[0].map((_, h) => `head ${h}`), value: (l, h) => effect[l][h],
      colour: (x) => diverging(x, top), text: true, side: 56 * Math.max(layers, heads), maxCell: 56, minCell: 14,
      mark: index === undefined ? null : [index, main.head], markColour: "#000",
      onHover: (l, h) => readout(value, `layer ${l}, head ${h}: ${ablation.metric}${target} = ${fixed(effect[l][h])}`, effect[l][h]),
      onClick: (l, h) => {
        const position = views.page_layers.indexOf(l);
        if (position < 0) value.textContent = `layer ${l} is not traced on this page`;
        else main.openHead(position, h);
      },
    });
  };
}

// ---- head types: each head of the model view labelled and outlined by its dominant kind ----

const KIND_COLOURS = {
  previous: "#1f77b4", induction: "#d62728", sink: "#7f7f7f", self: "#2ca02c", cls: "#9467bd", sep: "#8c564b",
  punctuation: "#e377c2",
};
function headTypesView(types) {
  const box = panel("head-types-view", "head types:", `each head of the model view is outlined and labelled by ` +
    `its dominant kind, the share of its attention on that kind of key (${types.threshold} or more; unlabelled: ` +
    `none reaches it)${types.repeat ? `; induction on ${types.repeat} random tokens repeated` : ""}`);
  const legend = element("div", { class: "head-types-legend", id: "head-types-legend" });
  for (const kind of types.kinds) {
    const item = element("span", { class: "head-type", "data-kind": kind }, kind);
    item.style.borderColor = KIND_COLOURS[kind];
    legend.appendChild(item);
  }
  box.appendChild(legend);
  for (const canvas of document.querySelectorAll("#grid canvas[data-layer]")) {
    const layer = views.page_layers[Number(canvas.dataset.layer)], head = Number(canvas.dataset.head);
    const kind = types.dominant[layer]?.[head];
    if (!kind) continue;
    const score = types.scores[layer][head];
    canvas.style.outline = `3px solid ${KIND_COLOURS[kind]}`;
    canvas.title += `: ${kind} ${score.toFixed(2)}`;
    const label = element("div", { class: "head-type", "data-kind": kind }, `${kind} ${score.toFixed(2)}`);
    label.style.borderColor = KIND_COLOURS[kind];
    canvas.parentElement.appendChild(label);
  }
  return () => {};
}

// ---- the views open ----

const drawers = [];
if (views !== null) {
  if (views.pair) drawers.push(pairView(views.pair));
  if (views.generation) drawers.push(generationView(views.generation));
  if (views.flows) drawers.push(flowsView(views.flows));
  if (views.ablation) drawers.push(ablationView(views.ablation));
  if (views.head_types) drawers.push(headTypesView(views.head_types));
  const redraw = () => drawers.forEach((draw) => draw());
  redraw();
  document.addEventListener("attnlab:render", redraw);
}
window.attnlabViews = { ready: true, count: drawers.length };
