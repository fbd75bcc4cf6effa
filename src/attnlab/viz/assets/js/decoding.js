// attnlab view: decoding the page's numbers and masks, as attnlab.viz._encoding writes them: base64 of
// little-endian float64 or float32 (exact, NaN and ±∞ included), float24 (a float32's top three bytes),
// fixedN (N-bit whole numbers, a float32 step per vector), and a mask as runs per row (unmasked first,
// alternating). Pure: tested by tests/viz/js/decoding.test.js against _encoding's own output.
(function (AL) {
  "use strict";
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
  // base64 → bytes
  function bytesOf(text) {
    const raw = atob(text), bytes = new Uint8Array(raw.length);
    for (let n = 0; n < raw.length; n++) bytes[n] = raw.charCodeAt(n);
    return bytes;
  }
  // IEEE 754 half precision: every one of the 2¹⁶ patterns' value, made once
  let halves = null;
  function halfTable() {
    if (halves !== null) return halves;
    halves = new Float32Array(65536);
    for (let h = 0; h < 65536; h++) {
      const sign = h & 0x8000 ? -1 : 1, exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
      halves[h] = exponent === 0 ? sign * fraction * 2 ** -24
        : exponent === 31 ? (fraction ? NaN : sign * Infinity)
        : sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
    }
    return halves;
  }
  // little-endian float16 bytes → Float32Array (exact)
  function float16s(bytes) {
    const table = halfTable(), out = new Float32Array(bytes.length >> 1);
    for (let i = 0; i < out.length; i++) out[i] = table[bytes[2 * i] | (bytes[2 * i + 1] << 8)];
    return out;
  }
  // base64 `text` of `dtype` ("float64", "float32", "float24", "fixedN"); `width`: the vectors' length (fixedN only)
  function decode(text, dtype, width = 1) {
    if (dtype === "float24") return decodeFloat24(atob(text));
    if (dtype.startsWith("fixed")) return decodeFixed(atob(text), Number(dtype.slice(5)), width);
    const bytes = bytesOf(text);
    return dtype === "float64" ? new Float64Array(bytes.buffer) : new Float32Array(bytes.buffer);
  }
  // a mask's rows of runs (unmasked first, alternating) as L·S bytes, 1: masked
  function maskFromRuns(rows, S) {
    const out = new Uint8Array(rows.length * S);
    rows.forEach((runs, i) => {
      let j = i * S;
      runs.forEach((run, n) => { if (n % 2) out.fill(1, j, j + run); j += run; });
    });
    return out;
  }
  // the masked cells of a mask's rows of runs
  const maskedCells = (rows) => rows.reduce((n, runs) => runs.reduce((a, r, k) => a + (k % 2 ? r : 0), n), 0);
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
  Object.assign(AL, { bytesOf, float16s, decodeFloat24, decodeFixed, decode, maskFromRuns, maskedCells, lazily });
})(globalThis.attnlab ??= {});
