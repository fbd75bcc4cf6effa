// attnlab view: the page's script, inlined by attnlab.viz._page.render_page. It reads the
// trace from the JSON block #attnlab-data (q, k and v, never the weights), computes a head's
// weights as the engine did when it shows the head, softmax(softcap(scale · q·kᵀ) + bias)
// over the unmasked keys (with the sink, if any), keeping the most recent few, and draws the heatmap (masked cells grey and struck through), the head view, the
// step-by-step table and, for a model, the model view (its entries grouped by kind), and
// for a vision model the image's patches as its tokens and a query's attention over it.
// A layer's L queries and S keys are tokens of the page's sequences (two for an
// encoder-decoder model: cross-attention has the decoder's on its rows, the encoder's on
// its columns). What changes lives in `state`, and the sequences on show with the layer;
// everything else is fixed when the page opens, but for what is computed when first needed (a
// layer's numbers, a head's weights) and the model view's thumbnails, drawn after the first view
// in slices while the page is idle. Tokens are only ever written as text.

const $ = (id) => document.getElementById(id);
const page = JSON.parse($("attnlab-data").textContent);
const sequences = page.sequences;
// the shown layer's sequences: its rows' (L queries) and its columns' (S keys), set by showSequences
let rowSeq = sequences[0], colSeq = sequences[0], L = rowSeq.tokens.length, S = L;

// ---- numbers: decoding, scores, weights ----

// the numbers travel as base64 of little-endian float32 or float64 (NaN and ±∞ included)
// (float24: a float32's top three bytes; fixedN: N-bit whole numbers, a float32 step per
// vector: both for pages that would not fit otherwise, as attnlab.viz._encoding.binary writes them)
function decodeFloat24(raw) {
  const bits = new Uint32Array(raw.length / 3);
  for (let n = 0, b = 0; n < bits.length; n++, b += 3) {
    bits[n] = ((raw.charCodeAt(b) << 8) | (raw.charCodeAt(b + 1) << 16) | (raw.charCodeAt(b + 2) << 24)) >>> 0;
  }
  return new Float32Array(bits.buffer);
}
// fixedN of vectors `width` long: the steps (float32, one a vector) first, then every (u − m)·step, N bits each
function decodeFixed(raw, bits, width) {
  const vectors = Math.floor((8 * raw.length) / (32 + width * bits)), most = 2 ** (bits - 1) - 1, mask = 2 ** bits - 1;
  const head = new Uint8Array(4 * vectors);
  for (let b = 0; b < head.length; b++) head[b] = raw.charCodeAt(b);
  const steps = new Float32Array(head.buffer), out = new Float32Array(vectors * width);
  let acc = 0, have = 0, b = head.length;
  for (let r = 0, n = 0; r < vectors; r++) {
    const step = steps[r];
    for (let e = 0; e < width; e++, n++) {
      while (have < bits) { acc = ((acc << 8) | raw.charCodeAt(b++)) & 0xffffff; have += 8; } // at most 23 bits held
      have -= bits;
      out[n] = (((acc >>> have) & mask) - most) * step;
    }
  }
  return out;
}
// `width`: the length of the vectors (fixedN only)
function decode(text, dtype, width = 1) {
  const raw = atob(text);
  if (dtype === "float24") return decodeFloat24(raw);
  if (dtype.startsWith("fixed")) return decodeFixed(raw, Number(dtype.slice(5)), width);
  const bytes = new Uint8Array(raw.length);
  for (let n = 0; n < raw.length; n++) bytes[n] = raw.charCodeAt(n);
  return dtype === "float64" ? new Float64Array(bytes.buffer) : new Float32Array(bytes.buffer);
}
// fields of `record` decoded when first read (a long page decodes only the layers it shows)
function lazily(record, fields) {
  for (const [name, make] of Object.entries(fields)) {
    Object.defineProperty(record, name, {
      configurable: true, enumerable: true,
      get() { const value = make(); Object.defineProperty(record, name, { value, enumerable: true }); return value; },
    });
  }
  return record;
}
// a layer: its L queries and S keys (rows and cols: which sequences), q (H·L·E), k (H·S·E),
// v (H·S·Ev), decoded when first read, the raw scores q·k (H·L·S, given, or computed per head
// when shown), the masks (one per head, or one for all; runs per row), the variants (softcap, the
// bias added after it (1 or H)·L·S, one sink per head), and its caches: the value norms, the largest score
function layerOf(layer) {
  const floats = layer.dtype.startsWith("fixed") ? "float24" : layer.dtype; // the scores' and bias's
  return lazily({
    name: layer.name, index: layer.index, kind: layer.kind, rows: layer.rows, cols: layer.cols,
    L: sequences[layer.rows].tokens.length, S: sequences[layer.cols].tokens.length,
    scale: layer.scale, H: layer.heads, E: layer.d_k, Ev: layer.d_v, dtype: layer.dtype,
    runs: layer.masks, masks: new Map(), single: layer.single ?? layer.dtype !== "float64", // float32 scores round as float32
    norms: null, softcap: layer.softcap, sinks: layer.sinks, rules: layer.rules, biasHeads: layer.bias_heads,
    largest: null,
  }, {
    q: () => decode(layer.q, layer.dtype, layer.d_k), k: () => decode(layer.k, layer.dtype, layer.d_k),
    v: () => decode(layer.v, layer.dtype, layer.d_v),
    given: () => (layer.scores === null ? null : decode(layer.scores, floats)),
    bias: () => (layer.bias === null ? null : decode(layer.bias, floats)),
  });
}
// row i of head h of x (H·count·width): a query's q (count L) or a key's k, v (count S)
const vectorAt = (x, width, count, h, i) =>
  Array.from(x.subarray((h * count + i) * width, (h * count + i + 1) * width));
// keys j0 … j1 − 1 of query i's raw scores q·k into s at `out` + j, each rounded to float32 when the
// trace was float32; each dot product summed in order over e (four keys at a time, each its own sum)
function dotRun(layer, h, i, j0, j1, s, out) {
  const { L, S, E, q, k } = layer, single = layer.single, qi = (h * L + i) * E;
  let j = j0;
  for (; j + 4 <= j1; j += 4) {
    const k0 = (h * S + j) * E, k1 = k0 + E, k2 = k1 + E, k3 = k2 + E;
    let d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    for (let e = 0; e < E; e++) {
      const x = q[qi + e];
      d0 += x * k[k0 + e]; d1 += x * k[k1 + e]; d2 += x * k[k2 + e]; d3 += x * k[k3 + e];
    }
    if (single) { d0 = Math.fround(d0); d1 = Math.fround(d1); d2 = Math.fround(d2); d3 = Math.fround(d3); }
    s[out + j] = d0; s[out + j + 1] = d1; s[out + j + 2] = d2; s[out + j + 3] = d3;
  }
  for (; j < j1; j++) {
    const kj = (h * S + j) * E;
    let dot = 0;
    for (let e = 0; e < E; e++) dot += q[qi + e] * k[kj + e];
    s[out + j] = single ? Math.fround(dot) : dot;
  }
}
// keys 0 … j1 − 1 of queries i and i + 1 at once (rows `out` and `out` + S of s): dotRun's sums, in its
// order, each k read once for both queries
function dotPair(layer, h, i, j1, s, out) {
  const { L, S, E, q, k } = layer, single = layer.single, qa = (h * L + i) * E, qb = qa + E;
  let j = 0;
  for (; j + 4 <= j1; j += 4) {
    const k0 = (h * S + j) * E, k1 = k0 + E, k2 = k1 + E, k3 = k2 + E;
    let a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
    for (let e = 0; e < E; e++) {
      const x = q[qa + e], y = q[qb + e], c0 = k[k0 + e], c1 = k[k1 + e], c2 = k[k2 + e], c3 = k[k3 + e];
      a0 += x * c0; a1 += x * c1; a2 += x * c2; a3 += x * c3;
      b0 += y * c0; b1 += y * c1; b2 += y * c2; b3 += y * c3;
    }
    if (single) {
      a0 = Math.fround(a0); a1 = Math.fround(a1); a2 = Math.fround(a2); a3 = Math.fround(a3);
      b0 = Math.fround(b0); b1 = Math.fround(b1); b2 = Math.fround(b2); b3 = Math.fround(b3);
    }
    const o = out + j, p = o + S;
    s[o] = a0; s[o + 1] = a1; s[o + 2] = a2; s[o + 3] = a3; s[p] = b0; s[p + 1] = b1; s[p + 2] = b2; s[p + 3] = b3;
  }
  dotRun(layer, h, i, j, j1, s, out);
  dotRun(layer, h, i + 1, j, j1, s, out + S);
}
// rows i0 … i1 − 1 of head h's raw scores q·kᵀ into s (row i at (i − i0)·S); `unmasked`: only the keys
// its mask leaves in (their runs), the masked ones NaN (no weight needs them: half a causal head's work)
function scoreRows(layer, h, i0, i1, s, unmasked = false) {
  const S = layer.S, runs = layer.runs[layer.runs.length === 1 ? 0 : h];
  // a row whose keys are one run from 0 (causal: [i + 1, L − i − 1]): its length, else −1
  const prefix = (i) => (runs[i].length <= 2 ? runs[i][0] : -1);
  for (let i = i0; i < i1; i++) {
    const out = (i - i0) * S;
    if (!unmasked) { dotRun(layer, h, i, 0, S, s, out); continue; }
    if (i + 1 < i1 && prefix(i) >= 0 && prefix(i + 1) >= 0) { // two rows at once over the keys both see
      const a = prefix(i), b = prefix(i + 1), both = Math.min(a, b);
      dotPair(layer, h, i, both, s, out);
      dotRun(layer, h, a > b ? i : i + 1, both, Math.max(a, b), s, a > b ? out : out + S);
      s.fill(NaN, out + a, out + S);
      s.fill(NaN, out + S + b, out + 2 * S);
      i++;
      continue;
    }
    let j = 0;
    runs[i].forEach((run, n) => {
      if (n % 2) s.fill(NaN, out + j, out + j + run);
      else dotRun(layer, h, i, j, j + run, s, out);
      j += run;
    });
  }
  return s;
}
// head h's raw scores q·kᵀ (L·S) of the unmasked keys (masked: NaN; a row's all: scoreRows)
const computeScores = (layer, h) => scoreRows(layer, h, 0, layer.L, new Float64Array(layer.L * layer.S), true);
// the heads' computed scores and weights, the most recently used kept while they hold at most
// CACHE_CELLS numbers in all (a few heads of a long page; every head of a short one)
const CACHE_CELLS = 2 ** 26, cache = new Map();
let cachedCells = 0;
function cached(key, make) {
  if (cache.has(key)) {
    const value = cache.get(key);
    cache.delete(key);
    cache.set(key, value); // the most recent last
    return value;
  }
  const value = make();
  cache.set(key, value);
  cachedCells += value.length;
  for (const [old, dropped] of cache) {
    if (cachedCells <= CACHE_CELLS || old === key) break;
    cache.delete(old);
    cachedCells -= dropped.length;
  }
  return value;
}
const layerIds = new WeakMap(); // a cache's key for each layer record, any page's
let layerCount = 0;
function layerKey(layer) {
  if (!layerIds.has(layer)) layerIds.set(layer, layerCount++);
  return layerIds.get(layer);
}
function scoresOf(layer, h) {
  const size = layer.L * layer.S;
  if (layer.given) return layer.given.subarray(h * size, (h + 1) * size);
  return cached(`scores ${layerKey(layer)} ${h}`, () => computeScores(layer, h));
}
// mask m of a layer as bytes (L·S, 1: masked), from its runs per row (unmasked first, alternating)
function maskBytes(layer, m) {
  const { L, S } = layer, out = new Uint8Array(L * S);
  layer.runs[m].forEach((runs, i) => {
    let j = i * S;
    runs.forEach((run, n) => { if (n % 2) out.fill(1, j, j + run); j += run; });
  });
  return out;
}
// head h's mask: L·S bytes, 1 where the key is masked (one for every head, or one each)
function maskOf(layer, h) {
  const m = layer.runs.length === 1 ? 0 : h;
  if (!layer.masks.has(m)) layer.masks.set(m, maskBytes(layer, m));
  return layer.masks.get(m);
}
const maskedIn = (layer, h, i, j) => maskOf(layer, h)[i * layer.S + j] === 1;
// the masked cells of head h, counted from its runs
const maskedCount = (layer, h) =>
  layer.runs[layer.runs.length === 1 ? 0 : h].reduce((n, runs) => runs.reduce((a, r, k) => a + (k % 2 ? r : 0), n), 0);
const hasMasked = (layer, h) => maskedCount(layer, h) > 0;
const modified = (layer) => layer.softcap !== null || layer.bias !== null; // ② is more than × scale
// z_ij of head h at `scale`: softcap(scale · s_ij) + bias_ij, as the engine modifies a score
const scoreAt = (layer, h, s, scale, i, j) => modify(layer, h, s[i * layer.S + j], scale, i, j);
// z_ij of head h at `scale` from its raw score x
function modify(layer, h, x, scale, i, j) {
  const { L, S } = layer;
  let z = scale * x;
  if (layer.softcap !== null) z = layer.softcap * Math.tanh(z / layer.softcap);
  if (layer.bias !== null) z += layer.bias[((layer.biasHeads === 1 ? 0 : h) * L + i) * S + j];
  return z;
}
// row i of softmax(z) into w (row i at `at`), its raw scores s from `from`, masked entries
// excluded, the sink joining the sum: the engine's formula; z: a row's scratch (S)
function softmaxInto(layer, h, s, from, scale, i, w, at, z) {
  const S = layer.S, sink = layer.sinks === null ? -Infinity : layer.sinks[h], masked = maskOf(layer, h);
  const plain = !modified(layer), row = i * S;
  let max = sink;
  for (let j = 0; j < S; j++) {
    if (masked[row + j] === 1) continue;
    z[j] = plain ? scale * s[from + j] : modify(layer, h, s[from + j], scale, i, j);
    max = Math.max(max, z[j]);
  }
  let sum = layer.sinks === null ? 0 : Math.exp(sink - max);
  for (let j = 0; j < S; j++) {
    const e = masked[row + j] === 1 ? 0 : Math.exp(z[j] - max);
    w[at + j] = e; sum += e;
  }
  for (let j = 0; j < S; j++) w[at + j] = sum === 0 ? 0 : w[at + j] / sum; // all masked: 0; NaN stays NaN
}
// row i of softmax(z) into w (L·S), from head h's scores s (L·S)
function softmaxRow(layer, h, s, scale, i, w) {
  softmaxInto(layer, h, s, i * layer.S, scale, i, w, i * layer.S, new Float64Array(layer.S));
}
// head h's weights (L·S) at `scale`, cached
function weightsOf(layer, h, scale) {
  return cached(`weights ${layerKey(layer)} ${h} ${scale}`, () => {
    const s = scoresOf(layer, h), w = new Float64Array(layer.L * layer.S), z = new Float64Array(layer.S);
    for (let i = 0; i < layer.L; i++) softmaxInto(layer, h, s, i * layer.S, scale, i, w, i * layer.S, z);
    return w;
  });
}
const norm = (xs) => Math.sqrt(xs.reduce((a, x) => a + x * x, 0));
// ‖v_j‖ of every head and key (H·S) and each head's largest finite one, once per layer
function normsOf(layer) {
  if (layer.norms === null) {
    const values = Array.from({ length: layer.H }, (_, h) =>
      Array.from({ length: layer.S }, (_, j) => norm(vectorAt(layer.v, layer.Ev, layer.S, h, j))));
    layer.norms = { values, largest: values.map((norms) => Math.max(0, ...norms.filter(Number.isFinite))) };
  }
  return layer.norms;
}

// ---- state: everything that changes ----

const layers = page.layers.map(layerOf);
// the layer and head on show, the scale, the query, the cell under the pointer, the token
// hovered in the head view, and the two checkboxes
// (the page opens on page.opens: a model's answering head on its pronoun, or what view() was given)
const state = {
  layer: page.opens.layer, head: page.opens.head, scale: layers[page.opens.layer].scale, query: page.opens.query,
  hover: null, cell: null, byValue: false, relative: false,
};
const shownLayer = () => layers[state.layer];
// the shown layer's sequences on the rows and columns
function showSequences() {
  rowSeq = sequences[shownLayer().rows];
  colSeq = sequences[shownLayer().cols];
  L = rowSeq.tokens.length;
  S = colSeq.tokens.length;
}
showSequences();
const defaultScale = () => 1 / Math.sqrt(shownLayer().E);
const weights = (h) => weightsOf(shownLayer(), h, state.scale);

// ---- tokens and numbers as text ----

const vec = (xs) => "[" + xs.map((x) => x.toFixed(3)).join(", ") + "]";
const shorten = (t, most) => ([...t].length > most ? [...t].slice(0, most - 1).join("") + "…" : t); // their start
// token i of sequence `seq`: its marks, special ([CLS]) or a piece of a character split over several tokens
// or put there by a chat template (not the user's words)
const tokenClass = (seq, i) =>
  seq.special[i] ? "special" : seq.template?.[i] ? "template" : seq.parts[i] ? "part" : "";
const tokenTitle = (seq, i) =>
  seq.special[i] ? "special token" : seq.template?.[i] ? "put there by the chat template, not the user's words"
  : seq.parts[i] ? `holds bytes of ${seq.parts[i]}, split over several tokens` : "";
// a piece that shows no character of its own is named by the character it is part of
const pieceOnly = (seq, i) => seq.parts[i] && !seq.tokens[i].trim();
const tokenLabel = (seq, i) => (pieceOnly(seq, i) ? `${seq.tokens[i]}‹piece of ${seq.parts[i]}›` : seq.tokens[i]);
const tick = (x) => (x === 0 || x >= 0.1 ? x.toFixed(2) : x.toPrecision(2)); // 0.0012, not 0.00
// what a page that rounds its numbers to fit says it did (attnlab.viz._encoding.binary)
const roundingNote = (dtype) => (dtype === "float24" ? "; q, k, v rounded to 17 significant bits to fit the page"
  : dtype.startsWith("fixed") ? `; q, k, v rounded to fit the page: ${dtype.slice(5)} bits a number, each vector in ` +
    `steps of its largest |x| / ${2 ** (Number(dtype.slice(5)) - 1) - 1}` : "");
function summary() {
  const { H, E } = shownLayer();
  const length = rowSeq === colSeq ? `${L} tokens` : `${L} queries (${rowSeq.name}) × ${S} keys (${colSeq.name})`;
  return `${page.model ? page.model + ": " : ""}${length}, ` +
    (layers.length > 1 ? `${layers.length} ${grouped() ? "attention modules" : "layers"}, ` : "") + `${H} head${H > 1 ? "s" : ""}, d_k = ${E}` +
    roundingNote(page.layers[0].dtype);
}

// ---- colours ----

const NOT_A_NUMBER = [220, 30, 30]; // red: no viridis colour is near it
const MASKED = [224, 224, 224], MASKED_STROKE = "#9a9a9a"; // light grey, struck through: no viridis colour is grey
const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]]; // five stops
function colour(t) {
  t = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
  const k = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - k;
  return VIRIDIS[k].map((c, n) => Math.round(c + f * (VIRIDIS[k + 1][n] - c)));
}
// a weight's colour: weight / top on viridis (0 when top is 0), red when it is not a number
const weightColour = (w, top) => (Number.isFinite(w) ? colour(top > 0 ? w / top : 0) : NOT_A_NUMBER);
// a cell's colour: grey when masked (the rules rule the key out), else its weight's
const cellColour = (w, top, masked) => (masked ? MASKED : weightColour(w, top));
// colour(t)'s channels into data at n (RGBA), exactly as colour computes them (Math.round(x) is
// ⌊x + 0.5⌋ for x ≥ 0), without an array a cell
function putColour(data, n, t) {
  t = (t < 0 ? 0 : t > 1 ? 1 : t) * (VIRIDIS.length - 1);
  const k = Math.min(VIRIDIS.length - 2, Math.floor(t)), f = t - k, low = VIRIDIS[k], high = VIRIDIS[k + 1];
  data[n] = Math.floor(low[0] + f * (high[0] - low[0]) + 0.5);
  data[n + 1] = Math.floor(low[1] + f * (high[1] - low[1]) + 0.5);
  data[n + 2] = Math.floor(low[2] + f * (high[2] - low[2]) + 0.5);
  data[n + 3] = 255;
}
// an opaque colour as one little-endian RGBA pixel of a Uint32Array over ImageData
const pixel = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
// colour(t) as such a pixel, computed as colour computes it (the stops flat: c + f·(next − c) per channel)
const STOPS = Float64Array.from(VIRIDIS.flat()), LAST = VIRIDIS.length - 1;
function colourPixel(t) {
  t = (t < 0 ? 0 : t > 1 ? 1 : t) * LAST;
  const k = t >= LAST - 1 ? LAST - 1 : Math.floor(t), f = t - k, at = 3 * k;
  const r = Math.floor(STOPS[at] + f * (STOPS[at + 3] - STOPS[at]) + 0.5);
  const g = Math.floor(STOPS[at + 1] + f * (STOPS[at + 4] - STOPS[at + 1]) + 0.5);
  const b = Math.floor(STOPS[at + 2] + f * (STOPS[at + 5] - STOPS[at + 2]) + 0.5);
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
}
function putRGB(data, n, [r, g, b]) {
  data[n] = r; data[n + 1] = g; data[n + 2] = b; data[n + 3] = 255;
}
// cellColour's channels into data at n
function putCell(data, n, w, top, masked) {
  if (masked) putRGB(data, n, MASKED);
  else if (w - w !== 0) putRGB(data, n, NOT_A_NUMBER); // NaN or ±∞: not a finite number
  else putColour(data, n, top > 0 ? w / top : 0);
}
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

// ---- the heatmap: token labels on both axes, the cells, and a colour bar ----

const FONT = "12px system-ui, 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif";
const WIDE_FONT = "bold 14px 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif";
const canvas = $("heatmap"), bar = $("colourbar"), bitmap = document.createElement("canvas");
// fixed while the layer's sequences are on show: the cells' width (`cell`, a column's) and
// height (`rowCell`, a row's: the same when L = S; cross-attention's few queries over many
// keys get taller rows, up to 4 times as tall as wide), every `every`-th column's and
// `everyRow`-th row's token labelled when they would crowd, the labels of the rows (`shown`)
// and of the columns (`shownKeys`), the margin that holds them, and whether the columns'
// stand upright (one or two characters, a Chinese token, when every shown label fits its column)
function heatmapLayout() {
  const measure = canvas.getContext("2d");
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
let { cell, rowCell, shown, shownKeys, margin, upright, every, everyRow } = heatmapLayout();
const ordinal = (n) => n + ((n % 100 >= 11 && n % 100 <= 13) ? "th" : ["th", "st", "nd", "rd"][n % 10] ?? "th");
// labels thinned to fit: which ones the axes carry
const thinnedNote = (n, count, what) =>
  `every ${ordinal(n)} ${what} labelled (${Math.ceil(count / n)} of ${count}: tokens 0, ${n}, ${2 * n}, …)`;
function axisNote() {
  if (every === 1 && everyRow === 1) return "";
  const notes = rowSeq === colSeq ? [thinnedNote(every, L, "token")]
    : [...(everyRow > 1 ? [thinnedNote(everyRow, L, "query")] : []), ...(every > 1 ? [thinnedNote(every, S, "key")] : [])];
  return `axes: ${notes.join("; ")}; hover a cell for its query and key`;
}
const randomNote = () => [...(page.random_seed === null ? []
  : [`random weights (seed ${page.random_seed}), not trained: what a head shows here is chance, not something learned`]),
  ...(page.notes || []),
  ...(page.sequences.some((seq) => seq.template?.some(Boolean)) ? ["blue tokens: the chat template's, not the user's"] : []),
].join(" · ");
function sizeHeatmap() {
  canvas.width = margin + S * cell;
  canvas.height = margin + L * rowCell;
  bar.width = 70;
  bar.height = canvas.height + 8; // room for the 0 tick's label
  bitmap.width = S;
  bitmap.height = L;
}
// what the heatmap's rows and columns are, in its heading
function axesHeading() {
  $("axes").textContent = rowSeq === colSeq ? "rows: queries, columns: keys"
    : `rows: ${L} queries, ${rowSeq.name} tokens; columns: ${S} keys, ${colSeq.name} tokens`;
}
// colour is the weight itself (0 → 1) unless "relative" is on: then 0 → the head's largest
function colourScale() {
  const w = weights(state.head);
  let top = 0, bad = 0;
  for (let n = 0; n < L * S; n++) if (Number.isFinite(w[n])) top = Math.max(top, w[n]); else bad++;
  return { w, top: state.relative ? top : 1, bad };
}
// a piece that shows no character: an orange dash beside its row (or above its column)
function drawPieceMark(ctx, mid, column) {
  ctx.fillStyle = "#b60";
  if (column) ctx.fillRect(mid - 1, margin - 12, 2, 8);
  else ctx.fillRect(margin - 12, mid - 1, 8, 2);
}
// a token's label colour on the canvas: grey for a special token, blue for a chat template's, as the text's CSS
const labelColour = (seq, i) => (seq.special[i] ? "#888" : seq.template?.[i] ? "#2a6f97" : "#222");
function drawQueryLabel(ctx, t, i, mid) { // query i, left of row i
  ctx.fillStyle = i === state.query ? "#b00" : labelColour(rowSeq, i);
  ctx.textAlign = "right";
  ctx.fillText(t, margin - 4, mid, margin - 6);
}
function drawKeyLabel(ctx, t, i, mid) { // key j, above column j: upright, or read bottom to top
  ctx.fillStyle = labelColour(colSeq, i);
  ctx.save();
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
}
function drawLabels(ctx) {
  ctx.font = FONT;
  ctx.fillStyle = "#222";
  ctx.textBaseline = "middle";
  const draw = (labels, column) => labels.forEach((t, i) => {
    if (t === null) return;
    const mid = margin + (i + 0.5) * (column ? cell : rowCell);
    ctx.font = WIDE_PUNCTUATION.test(t) ? WIDE_FONT : FONT; // as in the head view: "，" in a CJK font
    if (pieceOnly(column ? colSeq : rowSeq, i)) drawPieceMark(ctx, mid, column);
    if (column) drawKeyLabel(ctx, t, i, mid);
    else drawQueryLabel(ctx, t, i, mid);
  });
  draw(shown, false);
  draw(shownKeys, true);
}
// a stroke across each masked cell, from its bottom left to its top right, while cells are large enough to show it
function strikeMasked(ctx) {
  if (Math.min(cell, rowCell) < 6) return;
  const masked = maskOf(shownLayer(), state.head);
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
// what a grey cell means, beside a swatch of one, while the head on show has any
function drawMaskLegend() {
  const count = maskedCount(shownLayer(), state.head);
  $("mask-legend").hidden = count === 0;
  $("mask-text").textContent = `masked (${count} cells): a rule (causal, the window, a mask) leaves this key out ` +
    "for this query, so its score is −∞ and its weight is exactly 0 (not a small weight: the key takes no part in the softmax)";
}
const legendText = (top, bad) => (state.relative
  ? `colour: 0 (dark) → ${top.toFixed(4)} (bright), the largest weight of this head`
  : "colour: the weight itself, 0 (dark) → 1 (bright); uniform attention over L keys is 1/L") +
  (bad ? `; red: ${bad} weights that are not numbers (NaN: scores that overflowed)` : "");
function drawHeatmap() {
  const { w, top, bad } = colourScale();
  paintWeights(bitmap, shownLayer(), state.head, w, top);
  const ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(bitmap, margin, margin, S * cell, L * rowCell);
  strikeMasked(ctx);
  drawLabels(ctx);
  ctx.strokeStyle = "#d00";
  ctx.strokeRect(margin + 0.5, margin + state.query * rowCell + 0.5, S * cell - 1, Math.max(1, rowCell - 1));
  drawBar(top);
  $("legend").textContent = legendText(top, bad);
  drawMaskLegend();
}
function drawBar(top) {
  const ctx = bar.getContext("2d"), y0 = margin, height = L * rowCell;
  ctx.clearRect(0, 0, bar.width, bar.height);
  const strip = ctx.createImageData(14, Math.max(1, height)), pixels = new Uint32Array(strip.data.buffer);
  for (let y = 0; y < height; y++) pixels.fill(colourPixel(1 - y / Math.max(1, height - 1)), 14 * y, 14 * (y + 1));
  ctx.putImageData(strip, 0, y0);
  ctx.font = FONT;
  ctx.fillStyle = "#222";
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  for (const f of [0, 0.25, 0.5, 0.75, 1]) ctx.fillText(tick(f * top), 18, y0 + (1 - f) * (height - 1));
}
// the [query, key] under the pointer, or null off the cells
function cellAt(event) {
  const box = canvas.getBoundingClientRect();
  const x = ((event.clientX - box.left) / box.width) * canvas.width - margin;
  const y = ((event.clientY - box.top) / box.height) * canvas.height - margin;
  const i = Math.floor(y / rowCell), j = Math.floor(x / cell);
  return x >= 0 && y >= 0 && i < L && j < S ? [i, j] : null;
}
function showCell() {
  if (state.cell === null || state.cell[0] >= L || state.cell[1] >= S) return;
  const [i, j] = state.cell, w = weights(state.head)[i * S + j];
  const masked = maskedIn(shownLayer(), state.head, i, j) ? " (masked: the key is ruled out)" : "";
  $("cell-value").textContent = `head ${state.head}, scale ${state.scale.toFixed(4)}: ` +
    `query ${i} (${tokenLabel(rowSeq, i)}) → key ${j} (${tokenLabel(colSeq, j)}): ${w.toFixed(4)}${masked}`;
  $("cell-value").dataset.value = w.toFixed(4);
}
function bindHeatmap() {
  canvas.addEventListener("mousemove", (event) => {
    const at = cellAt(event);
    if (!at) return;
    state.cell = at;
    showCell();
  });
  canvas.addEventListener("click", (event) => { const at = cellAt(event); if (at) select(at[0]); });
}

// ---- the head view: queries on the left, keys on the right, a line per key ----

const SVG_NS = "http://www.w3.org/2000/svg", ROW = 18, HEAD_VIEW_WIDTH = 360;
function svgElement(name, attributes) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
  return element;
}
// full-width punctuation (，。、！？「」 …): the first font that has it draws a speck, so a CJK font draws it
const WIDE_PUNCTUATION = /^[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+$/;
const labelX = (side) => (side ? HEAD_VIEW_WIDTH - 110 : 110);
// token i's label on one side (0: queries, of the rows' sequence; 1: keys, of the columns')
function headViewLabel(side, i) {
  const seq = side ? colSeq : rowSeq, text = seq.tokens[i];
  const label = svgElement("text", { x: labelX(side), y: i * ROW + 16, "text-anchor": side ? "start" : "end" });
  label.textContent = shorten(text, 14);
  if (WIDE_PUNCTUATION.test(text)) label.classList.add("wide"); // "，" in a CJK font, not a Latin font's dot
  if (tokenClass(seq, i)) {
    label.classList.add(tokenClass(seq, i));
    const tooltip = svgElement("title", {});
    tooltip.textContent = tokenTitle(seq, i);
    label.appendChild(tooltip);
  }
  return label;
}
// a piece that shows no character: a dotted dash beside its label
function pieceMark(side, i) {
  const x = labelX(side), y = i * ROW + 13;
  return svgElement("line", { x1: side ? x : x - 12, x2: side ? x + 12 : x, y1: y, y2: y, class: "part-mark" });
}
function bindQueryLabel(label, i) {
  label.addEventListener("mouseenter", () => { state.hover = i; drawHeadView(); });
  label.addEventListener("mouseleave", () => { state.hover = null; drawHeadView(); });
  label.addEventListener("click", () => select(i));
}
// the svg's labels, once per pair of sequences: the group the lines go into and the query labels
function buildHeadView() {
  const svg = $("headview"), queries = [];
  svg.replaceChildren();
  svg.setAttribute("width", HEAD_VIEW_WIDTH);
  svg.setAttribute("height", Math.max(L, S) * ROW + 8);
  const lines = svgElement("g", {});
  svg.appendChild(lines);
  for (const side of [0, 1]) {
    for (let i = 0; i < (side ? S : L); i++) {
      if (pieceOnly(side ? colSeq : rowSeq, i)) svg.appendChild(pieceMark(side, i));
      const label = headViewLabel(side, i);
      if (!side) {
        bindQueryLabel(label, i);
        queries.push(label);
      }
      svg.appendChild(label);
    }
  }
  return { lines, queries };
}
// a line's width and opacity are the weight itself (0 → 1), not its share of the row's
// largest; by value, α_j·‖v_j‖ over the head's largest ‖v‖
function arrowWeights(i) {
  const w = weights(state.head), { values, largest } = normsOf(shownLayer()), top = largest[state.head], out = [];
  for (let j = 0; j < S; j++) {
    const a = state.byValue ? (top > 0 ? (w[i * S + j] * values[state.head][j]) / top : 0) : w[i * S + j];
    out.push(Number.isFinite(a) ? a : 0);
  }
  return out;
}
function drawHeadView() {
  const i = state.hover === null ? state.query : state.hover;
  headView.lines.replaceChildren();
  const faint = Math.min(0.01, 0.5 / S); // near-uniform rows of long sequences still show
  arrowWeights(i).forEach((a, j) => {
    if (a < faint) return;
    headView.lines.appendChild(svgElement("line", {
      x1: 115, y1: i * ROW + 12, x2: HEAD_VIEW_WIDTH - 115, y2: j * ROW + 12, stroke: "#3b528b",
      "stroke-width": (0.5 + 5 * a).toFixed(2), "stroke-opacity": (0.15 + 0.85 * a).toFixed(2),
    }));
  });
  headView.queries.forEach((t, n) => t.classList.toggle("selected", n === i));
}

// ---- step by step: one query's scores, weights and output ----

const STEP_COLUMNS = ["j", "token", "k_j", "① q·k_j", "② scaled", "③ α_j", "④ α_j·v_j", "‖α_j·v_j‖"];
// ② is z_j when the layer modifies its scores (softcap, a bias), as the note under the steps says
const stepColumns = (layer) => STEP_COLUMNS.map((name, n) => (n === 4 && modified(layer) ? "② z_j" : name));
function stepsHeader(table, layer) {
  const head = table.insertRow();
  for (const name of stepColumns(layer)) {
    const th = document.createElement("th");
    th.textContent = name;
    if (name === "token") th.className = "token";
    head.appendChild(th);
  }
}
// key j's row for `query` ({ i, h, layer, w, s: the query's raw scores, S }); adds α_j·v_j to total
function stepRow(table, query, j, total) {
  const { i, h, layer, w, s } = query;
  const k = vectorAt(layer.k, layer.E, S, h, j), dot = s[j], a = w[i * S + j];
  const av = vectorAt(layer.v, layer.Ev, S, h, j).map((x) => a * x);
  av.forEach((x, n) => (total[n] += x));
  const z = maskedIn(layer, h, i, j) ? "masked" : modify(layer, h, dot, state.scale, i, j).toFixed(4);
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
function drawSteps() {
  const layer = shownLayer(), i = state.query, h = state.head;
  const row = layer.given ? layer.given.subarray((h * L + i) * S, (h * L + i + 1) * S)
    : scoreRows(layer, h, i, i + 1, new Float64Array(S)); // the masked keys' q·k too
  const query = { i, h, layer, w: weights(h), s: row };
  $("steps-token").textContent = `${i} (${tokenLabel(rowSeq, i)}), ${layer.name ? layer.name + ", " : ""}head ${h}`;
  $("query-vector").textContent = "q = " + vec(vectorAt(layer.q, layer.E, L, h, i));
  const table = $("steps");
  table.replaceChildren();
  stepsHeader(table, layer);
  const keys = stepKeys(query.w.subarray(i * S, (i + 1) * S)), total = new Array(layer.Ev).fill(0);
  const listed = keys.length < S ? `the ${keys.length} keys of the largest α_j of ${S} are listed (in order); ` +
    `⑤ sums over all ${S}` : "";
  $("steps-rules").textContent = [stepsRules(layer), listed].filter(Boolean).join("; ");
  for (const j of keys) stepRow(table, query, j, total);
  if (keys.length < S) { // the output over every key, listed or not
    total.fill(0);
    for (let j = 0; j < S; j++) vectorAt(layer.v, layer.Ev, S, h, j).forEach((x, n) => (total[n] += query.w[i * S + j] * x));
  }
  $("output-vector").textContent = "⑤ output = Σ α_j·v_j = " + vec(total);
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
function stepsRules(layer) {
  const parts = [];
  let z = "scale·q·k_j";
  if (layer.softcap !== null) z = `${layer.softcap}·tanh(${z} / ${layer.softcap})`;
  if (layer.bias !== null) z += " + bias_j (the float mask, ALiBi)";
  if (layer.softcap !== null || layer.bias !== null) parts.push(`② here z_j = ${z}`);
  if (layer.sinks !== null) {
    parts.push(`③ adds the sink (logit ${layer.sinks[state.head].toFixed(4)}) to the softmax's sum, so the α_j sum to less than 1`);
  }
  return parts.length ? parts.join("; ") + "; masked keys take no part in ③" : "";
}

// ---- what is on show: query, head, layer, scale ----

function render() {
  drawHeatmap(); drawHeadView(); drawSteps(); showCell(); drawOverlay(); markPatch();
  document.dispatchEvent(new CustomEvent("attnlab:render")); // views.js redraws its views (two texts, generation, …)
}
// the head view's own box scrolls to the query; the page itself stays where it is, controls in view
function scrollToQuery(i) {
  const box = $("headview-box");
  box.scrollTop = Math.max(0, i * ROW + ROW / 2 - box.clientHeight / 2);
}
function select(i, scroll = false) {
  state.query = i;
  render();
  if (scroll) scrollToQuery(i);
}
function setHead(h) { state.head = h; $("head").value = String(h); render(); markGrid(); }
const fillHeads = () =>
  $("head").replaceChildren(...Array.from({ length: shownLayer().H }, (_, h) => new Option(`head ${h}`, String(h))));
// another layer: its numbers, its heads and its 1/√d_k; the query and the scale's ratio stay
function useLayer(l) {
  const ratio = shownLayer().scale !== 0 ? state.scale / shownLayer().scale : 1; // against the model's own scale
  const before = shownLayer();
  state.layer = l;
  if (before.rows !== shownLayer().rows || before.cols !== shownLayer().cols) enterSequences();
  $("layer").value = String(l);
  fillHeads();
  state.head = Math.min(state.head, shownLayer().H - 1);
  $("head").value = String(state.head);
  $("summary").textContent = summary();
  showRules();
  setScale(ratio * shownLayer().scale);
  markGrid();
}
// another pair of sequences on the axes (an encoder's layer after a cross-attention's): the
// heatmap's layout and size, the head view's labels, the query within the rows
function enterSequences() {
  showSequences();
  ({ cell, rowCell, shown, shownKeys, margin, upright, every, everyRow } = heatmapLayout());
  sizeHeatmap();
  headView = buildHeadView();
  state.query = Math.min(state.query, L - 1);
  state.cell = null;
  $("cell-value").textContent = "";
  $("axis-note").textContent = axisNote();
  axesHeading();
  showPatches();
}
// the rules the layer on show was built with (a window, softcap …), and what its grey cells are
function showRules() {
  const rules = shownLayer().rules;
  $("rules-note").hidden = !rules;
  const grey = Math.min(cell, rowCell) < 6 ? "Grey cells" : "Grey, struck-through cells"; // as strikeMasked draws them
  $("rules-note").textContent = rules ? `attention rules: ${rules}. ${grey} are masked keys.` : "";
}
// the slider is logarithmic: position p is 1/√d_k · 10^(p/100), from 1/100 to 100 times
// 1/√d_k, with 1/√d_k itself at p = 0; the box next to it takes any scale, 0 included
const scaleAt = (p) => (p === 0 ? defaultScale() : defaultScale() * 10 ** (p / 100));
const positionOf = (s) =>
  (s > 0 ? Math.max(-200, Math.min(200, Math.round(100 * Math.log10(s / defaultScale())))) : -200);
const scaleText = (s) =>
  (Math.abs(s - defaultScale()) < 1e-12 ? "= 1/√d_k" : `= ${(s / defaultScale()).toPrecision(3)} × 1/√d_k`);
function setScale(s) {
  state.scale = s;
  $("scale").value = String(positionOf(s));
  $("scale-input").value = String(s);
  $("scale-value").textContent = scaleText(s);
  $("scale-value").dataset.scale = String(s);
  render();
}

// ---- the model view: a small heatmap per (layer, head) at that layer's 1/√d_k, weights 0 → 1 ----

function gridHeader(grid, heads) {
  const header = grid.insertRow();
  header.appendChild(document.createElement("th"));
  for (let h = 0; h < heads; h++) {
    const th = document.createElement("th");
    th.textContent = `head ${h}`;
    header.appendChild(th);
  }
}
// head h of layer l, `size` pixels on its longer side (cross-attention's L × S is not square); a click,
// Enter or space opens it
// (drawn later, a slice at a time: drawThumbnails); at most THUMBNAIL pixels a side, each the largest
// weight of the cells it covers
function thumbnail(layer, l, h, size) {
  const small = document.createElement("canvas"), longer = Math.max(layer.L, layer.S);
  small.width = Math.min(layer.S, THUMBNAIL);
  small.height = Math.min(layer.L, THUMBNAIL);
  small.classList.add("pending");
  thumbnails.push({ canvas: small, layer, l, h });
  const side = (n) => Math.max(Math.min(size, 24), Math.round((size * n) / longer)); // a thin one stays clickable
  small.style.width = `${side(layer.S)}px`;
  small.style.height = `${side(layer.L)}px`;
  small.style.imageRendering = "pixelated";
  small.title = `${layer.name}, head ${h}`;
  small.dataset.layer = String(l);
  small.dataset.head = String(h);
  small.addEventListener("click", () => openHead(l, h));
  small.tabIndex = 0;
  small.setAttribute("role", "button");
  small.setAttribute("aria-label", `open ${layer.name}, head ${h}`);
  small.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") { event.preventDefault(); openHead(l, h); }
  });
  return small;
}
// an encoder-decoder model's kinds, in the order the page groups them, and their headings
const KINDS = ["self", "encoder", "decoder", "cross"];
const KIND_TITLES = {
  self: "self-attention", encoder: "encoder self-attention: encoder tokens × encoder tokens",
  decoder: "decoder self-attention: decoder tokens × decoder tokens",
  cross: "cross-attention: decoder tokens (rows, queries) × encoder tokens (columns, keys)",
};
// the layers' positions grouped by kind, each group in the model's order: [[kind, [l, …]], …]
const groups = () => KINDS.map((kind) => [kind, layers.flatMap((x, l) => (x.kind === kind ? [l] : []))])
  .filter(([, members]) => members.length > 0);
const grouped = () => groups().length > 1 || layers.some((x) => x.kind !== "self");
// the thumbnails waiting to be drawn ({ canvas, layer, l, h }), and how far drawing them has come
const THUMBNAIL = 128, thumbnails = [], drawn = { done: 0, total: 0, at: null };
// head h's thumbnail: its weights at the layer's own scale, 0 → 1, each pixel the largest weight among the
// cells it covers (grey: all masked; red: one is not a number); computed `rows` at a time from its scores
function* thumbnailRows({ canvas, layer, h }) {
  const { L, S } = layer, width = canvas.width, height = canvas.height, masked = maskOf(layer, h);
  const best = new Float64Array(width * height).fill(-1), bad = new Uint8Array(width * height);
  const known = cache.has(`weights ${layerKey(layer)} ${h} ${layer.scale}`) ? weightsOf(layer, h, layer.scale) : null;
  const s = new Float64Array(S), w = new Float64Array(S), z = new Float64Array(S);
  const column = Int32Array.from({ length: S }, (_, j) => Math.floor((j * width) / S));
  for (let i = 0; i < L; i++) {
    const row = Math.floor((i * height) / L) * width;
    if (known) w.set(known.subarray(i * S, (i + 1) * S));
    else softmaxInto(layer, h, layer.given ? scoresOf(layer, h) : scoreRows(layer, h, i, i + 1, s, true),
      layer.given ? i * S : 0, layer.scale, i, w, 0, z);
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
// draw every thumbnail, the shown layer's first, in slices of about 8 ms while the page is idle,
// so that the page answers input throughout
function drawThumbnails() {
  const order = [...thumbnails.filter((t) => t.l === state.layer), ...thumbnails.filter((t) => t.l !== state.layer)];
  drawn.total = order.length;
  let current = null;
  const later = window.requestIdleCallback ?? ((run) => setTimeout(() => run(null), 0));
  const slice = () => {
    const until = performance.now() + 8;
    while (performance.now() < until) {
      if (current === null) {
        if (drawn.done === order.length) { drawn.at = performance.now(); return; }
        current = thumbnailRows(order[drawn.done]);
      }
      if (current.next().done) { current = null; drawn.done++; }
    }
    later(slice, { timeout: 50 });
  };
  later(slice, { timeout: 50 });
}
function drawGrid() {
  const grid = $("grid"), heads = Math.max(...layers.map((x) => x.H));
  const size = Math.max(36, Math.min(96, Math.floor(1100 / heads)));
  gridHeader(grid, heads);
  for (const [kind, members] of groups()) {
    if (grouped()) {
      const th = document.createElement("th");
      th.colSpan = heads + 1;
      th.className = "kind";
      th.textContent = KIND_TITLES[kind];
      grid.insertRow().appendChild(th);
    }
    for (const l of members) {
      const layer = layers[l], tr = grid.insertRow(), th = document.createElement("th");
      th.textContent = layer.name;
      tr.dataset.kind = kind;
      tr.appendChild(th);
      for (let h = 0; h < layer.H; h++) tr.insertCell().appendChild(thumbnail(layer, l, h, size));
    }
  }
}
// the layer selector: every entry by name, in groups by kind where the model has kinds
function fillLayers() {
  const select = $("layer");
  for (const [kind, members] of groups()) {
    const parent = grouped() ? document.createElement("optgroup") : select;
    if (grouped()) {
      parent.label = kind === "cross" ? "cross-attention" : kind;
      select.appendChild(parent);
    }
    for (const l of members) parent.appendChild(new Option(layers[l].name, String(l)));
  }
}
function openHead(l, h) {
  if (l !== state.layer) useLayer(l);
  setHead(h);
  $("head-panel").scrollIntoView({ block: "start" });
}
function markGrid() {
  for (const t of $("grid").querySelectorAll("canvas")) {
    t.classList.toggle("current", Number(t.dataset.layer) === state.layer && Number(t.dataset.head) === state.head);
  }
}

// the largest |q·k| among a layer's finite raw scores, every head's, once per layer (row by
// row: a long page keeps no head's scores for it)
function largestScore(layer) {
  if (layer.largest === null) {
    let most = 0;
    const row = new Float64Array(layer.S);
    for (let h = 0; h < layer.H; h++) {
      for (let i = 0; i < layer.L; i++) {
        const s = layer.given ? layer.given.subarray((h * layer.L + i) * layer.S, (h * layer.L + i + 1) * layer.S)
          : scoreRows(layer, h, i, i + 1, row);
        for (const x of s) if (Number.isFinite(x)) most = Math.max(most, Math.abs(x));
      }
    }
    layer.largest = most;
  }
  return layer.largest;
}
// a bound on every |q·k| of a layer, max ‖q_i‖ · max ‖k_j‖ of each head (Cauchy–Schwarz), quick
function scoreBound(layer) {
  let bound = 0;
  const longest = (x, count, h) => {
    let most = 0;
    for (let i = 0; i < count; i++) {
      let sum = 0;
      for (let e = 0, at = (h * count + i) * layer.E; e < layer.E; e++) sum += x[at + e] * x[at + e];
      most = Math.max(most, sum);
    }
    return Math.sqrt(most);
  };
  for (let h = 0; h < layer.H; h++) bound = Math.max(bound, longest(layer.q, layer.L, h) * longest(layer.k, layer.S, h));
  return bound;
}
// a scale the box and a link may set: a number ≥ 0 at which scale·q·k stays a number for
// every finite score of the shown layer (past it, at 1e308 say, the engine's softmax is NaN:
// refused like any other bad scale, the one in use kept); a softcap bounds z, so any scale then
function usableScale(s) {
  const layer = shownLayer(), most = layer.single ? 3.4028234663852886e38 : Number.MAX_VALUE;
  if (!Number.isFinite(s) || s < 0) return false;
  const bound = scoreBound(layer); // within it no score can overflow: no need to find the largest
  return layer.softcap !== null || (Number.isFinite(bound) && s * bound <= most) || s * largestScore(layer) <= most;
}

// ---- the image: a vision model's patches as its tokens, and a query's attention over it ----

// page.image: null, or the PNG (base64), its height and width, the grid (rows, cols), the
// sequence whose tokens are the patches and the patches' token indices, row by row
const picture = page.image;
let pictureElement = null; // the decoded image, once loaded
const patchCanvases = [], patchOf = new Map(); // a thumbnail per patch; token index → patch index
const patchSize = () => [picture.height / picture.grid[0], picture.width / picture.grid[1]]; // (height, width) pixels
// whether the shown layer's queries (rows) or keys (columns) are the image's patches
const patchesAreQueries = () => picture !== null && shownLayer().rows === picture.sequence;
const patchesAreKeys = () => picture !== null && shownLayer().cols === picture.sequence;
// patch p's thumbnail: a canvas of the patch's own pixels, shown `size` pixels wide; a click chooses it
function patchThumbnail(token, p, size) {
  const [ph, pw] = patchSize(), cols = picture.grid[1], small = document.createElement("canvas");
  small.width = pw;
  small.height = ph;
  small.style.width = `${size}px`;
  small.style.height = `${Math.round((size * ph) / pw)}px`;
  small.dataset.token = String(token);
  small.dataset.patch = String(p);
  small.title = `patch ${p}: row ${Math.floor(p / cols)}, column ${p % cols} (token ${token})`;
  small.addEventListener("click", () => choosePatch(token));
  return small;
}
// the tokens that are not patches ([CLS], a distillation token, registers), drawn apart as buttons
function apartTokens() {
  const seq = sequences[picture.sequence];
  return seq.tokens.flatMap((t, i) => {
    if (patchOf.has(i)) return [];
    const button = document.createElement("button");
    button.type = "button";
    button.className = "apart-token";
    button.textContent = t;
    button.dataset.token = String(i);
    button.title = `token ${i}: not a patch`;
    button.addEventListener("click", () => choosePatch(i));
    return [button];
  });
}
function buildImagePanel() {
  if (picture === null) return;
  $("image-panel").hidden = false;
  const cols = picture.grid[1], size = Math.max(10, Math.min(40, Math.floor(520 / cols)));
  picture.patches.forEach((token, p) => patchOf.set(token, p));
  $("patches").style.gridTemplateColumns = `repeat(${cols}, ${size}px)`;
  picture.patches.forEach((token, p) => patchCanvases.push(patchThumbnail(token, p, size)));
  $("patches").replaceChildren(...patchCanvases);
  $("apart").replaceChildren(...apartTokens());
  const overlay = $("overlay"), shownWidth = Math.max(224, cols * size + 2 * (cols - 1)); // as wide as the thumbnails
  overlay.width = picture.width;
  overlay.height = picture.height;
  overlay.style.width = `${shownWidth}px`;
  overlay.style.height = `${Math.round((shownWidth * picture.height) / picture.width)}px`;
  overlay.addEventListener("click", (event) => {
    const box = overlay.getBoundingClientRect(), [ph, pw] = patchSize();
    const x = ((event.clientX - box.left) / box.width) * picture.width, y = ((event.clientY - box.top) / box.height) * picture.height;
    const p = Math.floor(y / ph) * cols + Math.floor(x / pw);
    if (p >= 0 && p < picture.patches.length) choosePatch(picture.patches[p]);
  });
  const image = new Image();
  image.onload = () => { pictureElement = image; drawPatches(); drawOverlay(); };
  image.src = "data:image/png;base64," + picture.png; // a data: URL, as the page's policy allows: nothing fetched
  showPatches();
}
// each thumbnail: its patch's pixels, exactly (one canvas pixel per image pixel)
function drawPatches() {
  const [ph, pw] = patchSize(), cols = picture.grid[1];
  patchCanvases.forEach((small, p) => {
    small.getContext("2d").drawImage(pictureElement, (p % cols) * pw, Math.floor(p / cols) * ph, pw, ph, 0, 0, pw, ph);
  });
}
function choosePatch(token) { if (patchesAreQueries()) select(token, true); }
// what the thumbnails do for the shown layer: choose its query, or nothing (its queries are another sequence's)
function showPatches() {
  if (picture === null) return;
  $("patches").classList.toggle("inert", !patchesAreQueries());
  $("patches-note").textContent = patchesAreQueries()
    ? `${picture.patches.length} patches (${picture.grid[0]} × ${picture.grid[1]}), each a token: click one to make it the query`
    : `${picture.patches.length} patches (${picture.grid[0]} × ${picture.grid[1]}); this layer's queries are the ${rowSeq.name} tokens`;
}
function markPatch() {
  if (picture === null) return;
  const chosen = (element) => patchesAreQueries() && Number(element.dataset.token) === state.query;
  for (const element of [...patchCanvases, ...$("apart").children]) element.classList.toggle("selected", chosen(element));
}
// the shown query's weight on each patch (the head on show), or null when the keys are not the patches
function overlayWeights() {
  if (!patchesAreKeys()) return null;
  const w = weights(state.head);
  return picture.patches.map((j) => w[state.query * S + j]);
}
// the image, and over each patch the query's weight on it, 0 (dark) → the largest of them (bright)
function drawOverlay() {
  if (picture === null || pictureElement === null) return;
  const ctx = $("overlay").getContext("2d"), values = overlayWeights(), [ph, pw] = patchSize(), cols = picture.grid[1];
  ctx.globalAlpha = 1;
  ctx.drawImage(pictureElement, 0, 0);
  if (values === null) {
    $("overlay-note").textContent = `this layer's keys are the ${colSeq.name} tokens, not the image's patches`;
    return;
  }
  const top = Math.max(0, ...values.filter(Number.isFinite)), total = values.reduce((a, x) => a + (Number.isFinite(x) ? x : 0), 0);
  ctx.globalAlpha = 0.6;
  values.forEach((a, p) => {
    const [r, g, b] = weightColour(a, top);
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect((p % cols) * pw, Math.floor(p / cols) * ph, pw, ph);
  });
  ctx.globalAlpha = 1;
  if (patchesAreQueries() && patchOf.has(state.query)) {
    const p = patchOf.get(state.query);
    ctx.strokeStyle = "#d00";
    ctx.lineWidth = Math.max(1, pw / 8);
    ctx.strokeRect((p % cols) * pw, Math.floor(p / cols) * ph, pw, ph);
  }
  $("overlay-note").textContent = `query ${state.query} (${tokenLabel(rowSeq, state.query)}), head ${state.head}: ` +
    `its weight on each patch, 0 (dark) → ${top.toFixed(4)} (bright, the largest); the patches take ${total.toFixed(4)} ` +
    `of it, the tokens apart ${(1 - total).toFixed(4)}`;
}

// ---- controls ----

function bindScaleControls() {
  const slider = $("scale");
  slider.addEventListener("input", () => setScale(scaleAt(Number(slider.value))));
  $("scale-input").addEventListener("change", () => {
    const text = $("scale-input").value.trim(), s = Number(text);
    if (text !== "" && usableScale(s)) setScale(s);
    else $("scale-input").value = String(state.scale); // not a scale: keep the one in use
  });
  $("scale-mark").textContent = "▲ 1/√d_k";
  $("scale-mark").style.left = "50%";
  $("scale-reset").addEventListener("click", () => setScale(defaultScale()));
}
function bindControls() {
  bindScaleControls();
  $("relative").addEventListener("change", () => { state.relative = $("relative").checked; drawHeatmap(); });
  fillHeads();
  $("head").addEventListener("change", () => setHead(Number($("head").value)));
  fillLayers();
  $("layer-label").hidden = layers.length < 2;
  if (page.model) {
    $("model-view").hidden = false;
    drawGrid();
  }
  $("layer").addEventListener("change", () => useLayer(Number($("layer").value)));
  $("by-value").addEventListener("change", () => { state.byValue = $("by-value").checked; drawHeadView(); });
  $("summary").textContent = summary();
  $("layer").value = String(state.layer);
  $("head").value = String(state.head);
  $("random-note").textContent = randomNote();
  $("random-note").hidden = !randomNote();
  showRules();
  $("axis-note").textContent = axisNote();
  axesHeading();
}

// ---- exports: they carry the title, the labels and the colour bar as the page shows them ----

const title = () =>
  `attention weights, ${shownLayer().name ? shownLayer().name + ", " : ""}head ${state.head}, scale ${state.scale.toFixed(4)}` +
  (page.random_seed === null ? "" : `, random weights (seed ${page.random_seed})`);
const escapeXML = (t) =>
  t.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g, "\ufffd") // not allowed in XML
    .replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
function svgAxisLabels() {
  const middle = (i) => margin + (i + 0.5) * cell, rowMiddle = (i) => margin + (i + 0.5) * rowCell;
  const rows = shown.flatMap((t, i) => (t === null ? []
    : [`<text x="${margin - 4}" y="${rowMiddle(i)}" text-anchor="end" dominant-baseline="middle">${escapeXML(t)}</text>`]));
  const columns = shownKeys.flatMap((t, j) => (t === null ? [] : [upright
    ? `<text x="${middle(j)}" y="${margin - 10}" text-anchor="middle" dominant-baseline="middle">${escapeXML(t)}</text>`
    : `<text transform="translate(${middle(j)} ${margin - 4}) rotate(-90)" dominant-baseline="middle">${escapeXML(t)}</text>`]));
  return [...rows, ...columns];
}
function svgCells(w, top) {
  const parts = [];
  for (let i = 0; i < L; i++) for (let j = 0; j < S; j++) {
    const [r, g, b] = cellColour(w[i * S + j], top, maskedIn(shownLayer(), state.head, i, j));
    parts.push(`<rect x="${margin + j * cell}" y="${margin + i * rowCell}" width="${cell}" height="${rowCell}" fill="rgb(${r},${g},${b})"/>`);
  }
  return parts;
}
function svgColourBar(size, top) {
  const parts = [];
  for (let n = 0; n < 50; n++) {
    const [r, g, b] = colour(1 - n / 49);
    parts.push(`<rect class="bar" x="${size + 8}" y="${margin + (n * L * rowCell) / 50}" width="14" height="${(L * rowCell) / 50 + 0.5}" fill="rgb(${r},${g},${b})"/>`);
  }
  for (const f of [0, 0.5, 1]) parts.push(`<text x="${size + 26}" y="${margin + (1 - f) * L * rowCell}">${tick(f * top)}</text>`);
  return parts;
}
function exportSVG() {
  const { w, top } = colourScale(), width = margin + S * cell, height = margin + L * rowCell;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width + 80}" height="${height + 30}" font-family="sans-serif" font-size="12">`,
    `<text x="0" y="16" font-size="14">${escapeXML(title())}</text><g transform="translate(0 30)">`,
    ...svgAxisLabels(), ...svgCells(w, top), ...svgColourBar(width, top), "</g></svg>",
  ].join("");
}
function exportPNG() {
  const out = document.createElement("canvas");
  out.width = canvas.width + bar.width + 8;
  out.height = Math.max(canvas.height, bar.height) + 30;
  const ctx = out.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.fillStyle = "#222";
  ctx.font = "14px sans-serif";
  ctx.fillText(title(), 0, 18);
  ctx.drawImage(canvas, 0, 30);
  ctx.drawImage(bar, canvas.width + 8, 30);
  return out.toDataURL("image/png");
}
function download(name, url) {
  const a = document.createElement("a");
  a.href = url; a.download = name; document.body.appendChild(a); a.click(); a.remove();
}
const fileName = () =>
  `attention-${shownLayer().name ? shownLayer().name.replace(/[^A-Za-z0-9_.-]+/g, "") + "-" : ""}head${state.head}`;
function bindExports() {
  $("export-png").addEventListener("click", () => download(`${fileName()}.png`, exportPNG()));
  $("export-svg").addEventListener("click", () => {
    const url = URL.createObjectURL(new Blob([exportSVG()], { type: "image/svg+xml" }));
    download(`${fileName()}.svg`, url);
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  });
}

// ---- links: page.html#layer=3&head=1&query=9&scale=0.5 opens that view ----

// the link's whole number `name` in 0..limit-1, or null
function linkedIndex(wanted, name, limit) {
  const n = Number(wanted.get(name));
  return wanted.has(name) && Number.isInteger(n) && n >= 0 && n < limit ? n : null;
}
// the link's scale (any number ≥ 0 that does not overflow: usableScale), or the one in use
function linkedScale(wanted) {
  const text = (wanted.get("scale") ?? "").trim(), linked = Number(text);
  return text !== "" && usableScale(linked) ? linked : state.scale;
}
function applyLink() {
  const wanted = new URLSearchParams(location.hash.slice(1));
  const wantedLayer = linkedIndex(wanted, "layer", Infinity); // the model's layer number, as the selector names it
  const layer = wantedLayer === null ? -1 : layers.findIndex((x) => (x.index ?? 0) === wantedLayer);
  if (layer >= 0 && layer !== state.layer) useLayer(layer);
  const query = linkedIndex(wanted, "query", L);
  state.query = query ?? state.query;
  state.head = linkedIndex(wanted, "head", shownLayer().H) ?? state.head;
  $("head").value = String(state.head);
  setScale(linkedScale(wanted));
  scrollToQuery(state.query); // the linked query, or the one the page opens on (drawn by setScale)
  markGrid();
}

// ---- the page opens ----

sizeHeatmap();
bindHeatmap();
let headView = buildHeadView();
bindControls();
bindExports();
buildImagePanel();
applyLink();
window.addEventListener("hashchange", applyLink);
// usable: the opened head's heatmap, head view and steps drawn and the controls bound (ms since the page
// began to load); the model view's thumbnails are drawn after, in slices
const usableAt = performance.now();
if (page.model) drawThumbnails();
const labelled = (labels) => labels.flatMap((t, i) => (t === null ? [] : [[i, t]]));
window.attnlabView = {
  weights: (h) => Array.from(weights(h)), weightRows: (h, rows) => rows.map((i) => Array.from(weights(h).subarray(i * S, (i + 1) * S))),
  setScale, setHead, useLayer, openHead, select, exportSVG, exportPNG, colour,
  get axisLabels() { return labelled(shown); }, get keyAxisLabels() { return labelled(shownKeys); },
  get geometry() { return { margin, cell, rowCell }; }, get lengths() { return [L, S]; }, overlayWeights,
  get scale() { return state.scale; }, get head() { return state.head; }, get layer() { return state.layer; },
  get query() { return state.query; }, get imageReady() { return picture === null || pictureElement !== null; },
  usableAt, get thumbnails() { return { ...drawn }; },
  ready: true,
};
