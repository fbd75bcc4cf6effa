// attnlab view: the maths, pure. A layer's record (layerOf: the page's JSON names, its q, k, v and
// scores decoded when first read), its raw scores q·kᵀ computed over the keys its mask leaves in,
// the score rules as the engine applies them, z = softcap(m_i · scale · q·k) + bias (m_i: the row's
// length scale, s_h·log n_i, or 1), and the softmax over
// the unmasked keys with the sink, if any, in its sum; value norms; the scales that do not overflow.
// Heads' scores and weights are memoized in one cache of the most recent (createCache), shared by a
// page's layers. Tested by tests/viz/js/maths.test.js against NumPy's numbers.
(function (AL) {
  "use strict";
  const { decode, lazily, maskFromRuns, maskedCells } = AL;

  // the heads' computed scores and weights, the most recently used kept while they hold at most `cells`
  // numbers in all (a few heads of a long page; every head of a short one)
  function createCache(cells = 2 ** 26) {
    const entries = new Map(), ids = new WeakMap(), held = { cells: 0, layers: 0 };
    return {
      has: (key) => entries.has(key),
      idOf(layer) { // a key for each layer record
        if (!ids.has(layer)) ids.set(layer, held.layers++);
        return ids.get(layer);
      },
      get(key, make) {
        if (entries.has(key)) {
          const value = entries.get(key);
          entries.delete(key);
          entries.set(key, value); // the most recent last
          return value;
        }
        const value = make();
        entries.set(key, value);
        held.cells += value.length;
        for (const [old, dropped] of entries) {
          if (held.cells <= cells || old === key) break;
          entries.delete(old);
          held.cells -= dropped.length;
        }
        return value;
      },
    };
  }
  // a layer of the page's JSON (`layer`: its fields as viz._page_data writes them) over `sequences`:
  // L queries and S keys, q (heads·L·d_k), k (heads·S·d_k), v (heads·S·d_v), the raw scores
  // (heads·L·S, given, or null: computed per head when shown) and the bias (bias_heads·L·S) decoded
  // when first read; `masks`, runs per row, one per head or one for all; memos of its mask bytes, value
  // norms and largest score; `cache`, the page's
  function layerOf(layer, sequences, cache = createCache()) {
    const floats = layer.dtype.startsWith("fixed") ? "float24" : layer.dtype; // the scores' and bias's
    const { q, k, v, scores, bias, ...fields } = layer;
    return lazily({
      ...fields, single: layer.single ?? layer.dtype !== "float64", // float32 scores round as float32
      L: sequences[layer.rows].tokens.length, S: sequences[layer.cols].tokens.length,
      softcap: layer.softcap ?? null, sinks: layer.sinks ?? null, bias_heads: layer.bias_heads ?? 0,
      length_scale: layer.length_scale ?? null, // m (heads·L), each query row's multiplier, or null
      maskBytes: new Map(), norms: null, largest: null, cache,
    }, {
      q: () => decode(q, layer.dtype, layer.d_k), k: () => decode(k, layer.dtype, layer.d_k),
      v: () => decode(v, layer.dtype, layer.d_v),
      scores: () => (scores === null || scores === undefined ? null : decode(scores, floats)),
      bias: () => (bias === null || bias === undefined ? null : decode(bias, floats)),
    });
  }
  // head h's mask: L·S bytes, 1 where the key is masked (one for every head, or one each)
  function maskOf(layer, h) {
    const m = layer.masks.length === 1 ? 0 : h;
    if (!layer.maskBytes.has(m)) layer.maskBytes.set(m, maskFromRuns(layer.masks[m], layer.S));
    return layer.maskBytes.get(m);
  }
  const maskedIn = (layer, h, i, j) => maskOf(layer, h)[i * layer.S + j] === 1;
  const maskedCount = (layer, h) => maskedCells(layer.masks[layer.masks.length === 1 ? 0 : h]);

  // row i of head h of x (heads·count·width): a query's q (count L) or a key's k, v (count S)
  const vectorAt = (x, width, count, h, i) =>
    Array.from(x.subarray((h * count + i) * width, (h * count + i + 1) * width));
  // keys j0 … j1 − 1 of query i's raw scores q·k into s at `out` + j, each rounded to float32 when the
  // trace was float32; each dot product summed in order over e (four keys at a time, each its own sum)
  function dotRun(layer, h, i, j0, j1, s, out) {
    const { L, S, d_k: E, q, k } = layer, single = layer.single, qi = (h * L + i) * E;
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
    const { L, S, d_k: E, q, k } = layer, single = layer.single, qa = (h * L + i) * E, qb = qa + E;
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
    const S = layer.S, runs = layer.masks[layer.masks.length === 1 ? 0 : h];
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
  // head h's raw scores q·kᵀ (L·S): the page's own, or computed over the unmasked keys (masked: NaN)
  function scoresOf(layer, h) {
    const size = layer.L * layer.S;
    if (layer.scores) return layer.scores.subarray(h * size, (h + 1) * size);
    return layer.cache.get(`scores ${layer.cache.idOf(layer)} ${h}`,
      () => scoreRows(layer, h, 0, layer.L, new Float64Array(size), true));
  }
  // query i's raw scores over every key, the masked ones' too (the step table's)
  const scoreRow = (layer, h, i) => (layer.scores
    ? layer.scores.subarray((h * layer.L + i) * layer.S, (h * layer.L + i + 1) * layer.S)
    : scoreRows(layer, h, i, i + 1, new Float64Array(layer.S)));
  // ② is more than × scale
  const modified = (layer) => layer.softcap !== null || layer.bias !== null || layer.length_scale !== null;
  // z_ij of head h at `scale` from its raw score x: softcap(m_i · scale · x) + bias_ij, as the engine modifies a score
  function modify(layer, h, x, scale, i, j) {
    const { L, S } = layer;
    let z = scale * x;
    if (layer.length_scale !== null) z *= layer.length_scale[h * L + i];
    if (layer.softcap !== null) z = layer.softcap * Math.tanh(z / layer.softcap);
    if (layer.bias !== null) z += layer.bias[((layer.bias_heads === 1 ? 0 : h) * L + i) * S + j];
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
  // head h's weights (L·S) at `scale`, memoized
  function weightsOf(layer, h, scale) {
    return layer.cache.get(`weights ${layer.cache.idOf(layer)} ${h} ${scale}`, () => {
      const s = scoresOf(layer, h), w = new Float64Array(layer.L * layer.S), z = new Float64Array(layer.S);
      for (let i = 0; i < layer.L; i++) softmaxInto(layer, h, s, i * layer.S, scale, i, w, i * layer.S, z);
      return w;
    });
  }
  const weightsKnown = (layer, h, scale) => layer.cache.has(`weights ${layer.cache.idOf(layer)} ${h} ${scale}`);
  const norm = (xs) => Math.sqrt(xs.reduce((a, x) => a + x * x, 0));
  // ‖v_j‖ of every head and key (heads·S) and each head's largest finite one, once per layer
  function normsOf(layer) {
    if (layer.norms === null) {
      const values = Array.from({ length: layer.heads }, (_, h) =>
        Array.from({ length: layer.S }, (_, j) => norm(vectorAt(layer.v, layer.d_v, layer.S, h, j))));
      layer.norms = { values, largest: values.map((norms) => Math.max(0, ...norms.filter(Number.isFinite))) };
    }
    return layer.norms;
  }
  // the largest |q·k| among a layer's finite raw scores, every head's, once per layer (row by
  // row: a long page keeps no head's scores for it)
  function largestScore(layer) {
    if (layer.largest === null) {
      let most = 0;
      for (let h = 0; h < layer.heads; h++) {
        for (let i = 0; i < layer.L; i++) {
          for (const x of scoreRow(layer, h, i)) if (Number.isFinite(x)) most = Math.max(most, Math.abs(x));
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
        for (let e = 0, at = (h * count + i) * layer.d_k; e < layer.d_k; e++) sum += x[at + e] * x[at + e];
        most = Math.max(most, sum);
      }
      return Math.sqrt(most);
    };
    for (let h = 0; h < layer.heads; h++) bound = Math.max(bound, longest(layer.q, layer.L, h) * longest(layer.k, layer.S, h));
    return bound;
  }
  // a scale the box and a link may set: a number ≥ 0 at which scale·q·k stays a number for
  // every finite score of the layer (past it, at 1e308 say, the engine's softmax is NaN:
  // refused like any other bad scale, the one in use kept); a softcap bounds z, so any scale then
  function usableScale(layer, s) {
    const most = layer.single ? 3.4028234663852886e38 : Number.MAX_VALUE;
    if (!Number.isFinite(s) || s < 0) return false;
    const bound = scoreBound(layer); // within it no score can overflow: no need to find the largest
    return layer.softcap !== null || (Number.isFinite(bound) && s * bound <= most) || s * largestScore(layer) <= most;
  }
  Object.assign(AL, {
    createCache, layerOf, maskOf, maskedIn, maskedCount, vectorAt, scoreRows, scoresOf, scoreRow, modified, modify,
    softmaxInto, weightsOf, weightsKnown, normsOf, largestScore, scoreBound, usableScale,
  });
})(globalThis.attnlab ??= {});
