// attnlab view --in-browser: a BERT encoder's forward in the page, as attnlab.models runs it in NumPy
// (attnlab.viz._inpage writes the weights: base64 of little-endian float16 or float32, each matrix as
// nn.Linear stores it, (out, in)). Every number is computed in float64 from the stored weights:
//   x = LayerNorm(word[id] + position[i] + type[0])                          (L, D)
//   per layer: q, k, v = x·Wᵀ + b, split into H heads of E = D/H           (H, L, E)
//              α = softmax(s · q·kᵀ) over the keys (s: 1/√E times the page's multiplier)   (H, L, L)
//              o = α·v, an ablated head's o zero, merged back to (L, D), then ·Woᵀ + bo
//              x = LayerNorm(x + attention(x)); x = LayerNorm(x + down(act(up(x))))
// act: BERT's exact GELU (erf) or gelu_new (tanh). Pure: tested by tests/viz/js/inpage.test.js
// against attnlab's NumPy forward on the same stored weights.
(function (AL) {
  "use strict";
  // a stored tensor {dtype: "float16" | "float32", shape, data: base64} as a Float32Array (exact for both)
  function tensorOf(stored) {
    const bytes = AL.bytesOf(stored.data);
    return stored.dtype === "float32" ? new Float32Array(bytes.buffer) : AL.float16s(bytes);
  }
  // erf to double precision: its Maclaurin series below |x| = 2.5, the continued fraction of erfc above
  function erf(x) {
    const a = Math.abs(x);
    if (a > 6) return Math.sign(x);
    if (a < 2.5) {
      let term = a, sum = a;
      for (let n = 1; n < 200 && Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
        term *= (-a * a) / n;
        sum += term / (2 * n + 1);
      }
      return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
    }
    let f = 0; // erfc(a) = e^(−a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + …))))
    for (let n = 120; n >= 1; n--) f = n / 2 / (a + f);
    return Math.sign(x) * (1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / (a + f));
  }
  const ACTIVATIONS = {
    gelu: (x) => 0.5 * x * (1 + erf(x / Math.SQRT2)),
    gelu_new: (x) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x))),
  };
  // y (rows, out) = x (rows, in)·Wᵀ + b, W (out, in); four outputs at a time, each its own sum over e in order
  function linear(x, rows, w, b, n) {
    const m = b.length, y = new Float64Array(rows * m);
    for (let i = 0; i < rows; i++) {
      const xi = i * n;
      let o = 0;
      for (; o + 4 <= m; o += 4) {
        const w0 = o * n, w1 = w0 + n, w2 = w1 + n, w3 = w2 + n;
        let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (let e = 0; e < n; e++) {
          const v = x[xi + e];
          s0 += v * w[w0 + e]; s1 += v * w[w1 + e]; s2 += v * w[w2 + e]; s3 += v * w[w3 + e];
        }
        y[i * m + o] = s0 + b[o]; y[i * m + o + 1] = s1 + b[o + 1]; y[i * m + o + 2] = s2 + b[o + 2]; y[i * m + o + 3] = s3 + b[o + 3];
      }
      for (; o < m; o++) {
        let sum = 0;
        for (let e = 0, wo = o * n; e < n; e++) sum += x[xi + e] * w[wo + e];
        y[i * m + o] = sum + b[o];
      }
    }
    return y;
  }
  // LayerNorm of each row of x (rows, D) in place, transformers' order: (x − mean)/√(var + eps)·γ + β
  function layerNorm(x, rows, g, b, eps) {
    const D = g.length;
    for (let i = 0; i < rows; i++) {
      const r = i * D;
      let mean = 0;
      for (let e = 0; e < D; e++) mean += x[r + e];
      mean /= D;
      let variance = 0;
      for (let e = 0; e < D; e++) { x[r + e] -= mean; variance += x[r + e] * x[r + e]; }
      const root = Math.sqrt(variance / D + eps);
      for (let e = 0; e < D; e++) x[r + e] = (x[r + e] / root) * g[e] + b[e];
    }
    return x;
  }
  // (L, H·E) → (H, L, E): head h's columns h·E … h·E + E − 1 of each row
  function heads(x, L, H, E) {
    const out = new Float64Array(H * L * E);
    for (let h = 0; h < H; h++) for (let i = 0; i < L; i++) for (let e = 0; e < E; e++) out[(h * L + i) * E + e] = x[i * H * E + h * E + e];
    return out;
  }
  // one head's attention: α (L, L) = softmax(s · q·kᵀ), o (L, E) = α·v, at q, k, v's offset for head h
  function attend(q, k, v, h, L, E, s, weights, out) {
    const base = h * L * E, row = new Float64Array(L);
    for (let i = 0; i < L; i++) {
      let most = -Infinity;
      for (let j = 0; j < L; j++) {
        let dot = 0;
        for (let e = 0; e < E; e++) dot += q[base + i * E + e] * k[base + j * E + e];
        row[j] = s * dot;
        if (row[j] > most) most = row[j];
      }
      let sum = 0;
      for (let j = 0; j < L; j++) { row[j] = Math.exp(row[j] - most); sum += row[j]; }
      for (let j = 0; j < L; j++) {
        const a = row[j] / sum;
        weights[(h * L + i) * L + j] = a;
        for (let e = 0; e < E; e++) out[base + i * E + e] += a * v[base + j * E + e];
      }
    }
  }
  // the model of `spec` ({config: {hidden, heads, layers, eps, activation, max_positions}, weights: {name:
  // stored}}): forward(ids, {multiplier, ablated}) → {hidden: [(L·D) the embeddings and each layer's
  // output], layers: [{q, k, v (H·L·E), weights (H·L·L), scale}]}; `ablated`: a Set of "layer,head"
  function createModel(spec) {
    const c = spec.config, D = c.hidden, H = c.heads, E = D / H, act = ACTIVATIONS[c.activation];
    if (!act) throw new Error(`activation ${c.activation}: expected one of ${Object.keys(ACTIVATIONS)}`);
    const w = {};
    for (const [name, stored] of Object.entries(spec.weights)) w[name] = tensorOf(stored);
    function forward(ids, { multiplier = 1, ablated = new Set() } = {}) {
      const L = ids.length, s = multiplier / Math.sqrt(E);
      let x = new Float64Array(L * D);
      ids.forEach((id, i) => {
        for (let e = 0; e < D; e++) x[i * D + e] = w.word[id * D + e] + w.position[i * D + e] + w.type[e];
      });
      layerNorm(x, L, w["embed_norm.weight"], w["embed_norm.bias"], c.eps);
      const hidden = [Float64Array.from(x)], layers = [];
      for (let l = 0; l < c.layers; l++) {
        const p = (name) => w[`${l}.${name}`];
        const [q, k, v] = ["q", "k", "v"].map((n) => heads(linear(x, L, p(`${n}.weight`), p(`${n}.bias`), D), L, H, E));
        const weights = new Float64Array(H * L * L), out = new Float64Array(H * L * E);
        for (let h = 0; h < H; h++) {
          attend(q, k, v, h, L, E, s, weights, out);
          if (ablated.has(`${l},${h}`)) out.fill(0, h * L * E, (h + 1) * L * E);
        }
        const merged = new Float64Array(L * D); // (H, L, E) → (L, H·E)
        for (let h = 0; h < H; h++) for (let i = 0; i < L; i++) for (let e = 0; e < E; e++) merged[i * D + h * E + e] = out[(h * L + i) * E + e];
        const attention = linear(merged, L, p("o.weight"), p("o.bias"), D);
        for (let n = 0; n < L * D; n++) x[n] += attention[n];
        layerNorm(x, L, p("attention_norm.weight"), p("attention_norm.bias"), c.eps);
        const up = linear(x, L, p("up.weight"), p("up.bias"), D);
        for (let n = 0; n < up.length; n++) up[n] = act(up[n]);
        const down = linear(up, L, p("down.weight"), p("down.bias"), up.length / L);
        for (let n = 0; n < L * D; n++) down[n] += x[n];
        x = layerNorm(down, L, p("mlp_norm.weight"), p("mlp_norm.bias"), c.eps);
        hidden.push(Float64Array.from(x));
        layers.push({ q, k, v, weights, scale: s });
      }
      return { hidden, layers };
    }
    return { forward, config: c, E };
  }
  Object.assign(AL, { createModel, erf, tensorOf });
})(globalThis.attnlab ??= {});
