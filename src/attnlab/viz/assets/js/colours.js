// attnlab view: colours. Viridis (five stops) for weights, grey for a masked cell, red for a
// number that is not finite, and blue–white–red around 0 for differences and effects.
(function (AL) {
  "use strict";
  const NOT_A_NUMBER = [220, 30, 30]; // red: no viridis colour is near it
  const MASKED = [224, 224, 224], MASKED_STROKE = "#9a9a9a"; // light grey, struck through: no viridis colour is grey
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
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
  // a difference or an effect on −top..top: blue (below 0) through white to red (above 0)
  function diverging(x, top) {
    const t = top > 0 ? Math.max(-1, Math.min(1, x / top)) : 0;
    const end = t < 0 ? [59, 76, 192] : [180, 4, 38], f = Math.abs(t);
    return [255, 255, 255].map((c, n) => Math.round(c + f * (end[n] - c)));
  }
  Object.assign(AL, {
    NOT_A_NUMBER, MASKED, MASKED_STROKE, colour, weightColour, cellColour, pixel, colourPixel, putCell, diverging,
  });
})(globalThis.attnlab ??= {});
