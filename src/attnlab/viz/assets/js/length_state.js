// attnlab view at length (the statistics page, viz._statistics_page): its data decoded and its view state,
// pure functions of the page's JSON (tested by tests/viz/js/length_state.test.js). The state: which layer and
// head, which token (the query whose top keys are drawn, and the text scrolled to it) and the range of positions
// [from, to) the charts show (zoomed by the wheel, panned by a drag, typed in).
(function (AL) {
  "use strict";
  const NO_KEY = 0xffff; // a top key past the keys a query sees (viz._statistics_data.NO_KEY)
  const LEAST_SPAN = 16; // the fewest positions a zoomed chart shows
  const { bytesOf, float16s } = AL;
  const uint16s = (bytes) => new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1); // little-endian

  // a zlib stream (viz._statistics_data's, in base64) inflated: a promise of its bytes
  async function inflated(text) {
    const stream = new Blob([bytesOf(text)]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  // the page's statistics: its counts, and per head (layer, head) its arrays as numbers, once load(layer, head)
  // has inflated the head's stream (received S float16, entropy L, sink share L, top keys L·k uint16, their
  // weights L·k, one after another)
  function statisticsOf(page) {
    const { layers, heads, length: L, keys: S, top_k: k } = page;
    const index = (layer, head) => layer * heads + head;
    const decoded = new Map(), pending = new Map();
    function split(bytes) {
      const at = [0, 2 * S, 2 * S + L, 2 * S + 2 * L, 2 * S + 2 * L + 2 * L * k, 2 * S + 2 * L + 3 * L * k];
      const part = (n) => bytes.slice(at[n], at[n + 1]); // its own buffer: a Uint16Array's offset 0
      return { received: float16s(part(0)), entropy: part(1), sink: part(2), topKeys: uint16s(part(3)), topWeights: part(4) };
    }
    // a promise that the head is decoded (at once when it is)
    function load(layer, head) {
      const n = index(layer, head);
      if (!pending.has(n)) pending.set(n, inflated(page.head_data[n]).then((bytes) => { decoded.set(n, split(bytes)); }));
      return pending.get(n);
    }
    const loaded = (layer, head) => decoded.has(index(layer, head));
    function arraysOf(layer, head) {
      const arrays = decoded.get(index(layer, head));
      if (arrays === undefined) throw new Error(`head ${layer}.${head} read before load(layer, head)`);
      return arrays;
    }
    const received = (layer, head) => arraysOf(layer, head).received;
    const entropy = (layer, head, i) => (arraysOf(layer, head).entropy[i] / 255) * page.log_length;
    const sinkShare = (layer, head, i) => arraysOf(layer, head).sink[i] / 255;
    // query i's top keys: [key, weight] by weight descending, the keys it sees only
    function topKeys(layer, head, i) {
      const { topKeys: keys, topWeights: weights } = arraysOf(layer, head), out = [];
      for (let r = i * k; r < (i + 1) * k; r++) if (keys[r] !== NO_KEY) out.push([keys[r], weights[r] / 255]);
      return out;
    }
    const role = (layer, head) => page.roles.names[page.roles.role[index(layer, head)]];
    const shares = (layer, head) => {
      const n = index(layer, head);
      return { sink: page.roles.sink[n], local: page.roles.local[n], far: page.roles.far[n], sinks: page.roles.sinks[n] };
    };
    const profile = (layer, head) => page.distance[index(layer, head)];
    return { layers, heads, L, S, k, load, loaded, received, entropy, sinkShare, topKeys, role, shares, profile, index };
  }

  // ---- the view state ----
  const clamp = (x, low, high) => Math.min(high, Math.max(low, x));
  function initialLengthState(page) {
    const { layer = 0, head = 0, token = 0 } = page.opens ?? {};
    return {
      layer: clamp(layer, 0, page.layers - 1), head: clamp(head, 0, page.heads - 1),
      token: clamp(token, 0, page.length - 1), from: 0, to: page.length,
    };
  }
  // [from, to) as whole positions within [0, L), at least LEAST_SPAN wide (or L), its start kept where it can be
  function clampRange(from, to, L) {
    const span = clamp(Math.round(to - from), Math.min(LEAST_SPAN, L), L);
    const start = clamp(Math.round(from), 0, L - span);
    return { from: start, to: start + span };
  }
  // the range zoomed by `factor` (< 1: in) about position `at`, which stays where it is on the chart
  function zoomRange(range, at, factor, L) {
    const span = clamp(Math.round((range.to - range.from) * factor), Math.min(LEAST_SPAN, L), L);
    const fraction = (at - range.from) / (range.to - range.from);
    return clampRange(at - fraction * span, at - fraction * span + span, L);
  }
  // the range moved by `by` positions, its width kept
  const panRange = (range, by, L) => clampRange(range.from + by, range.to + by, L);
  // the range that shows `token`: the same when it does, else one as wide centred on it
  function rangeShowing(range, token, L) {
    if (token >= range.from && token < range.to) return range;
    const span = range.to - range.from;
    return clampRange(token - Math.floor(span / 2), token - Math.floor(span / 2) + span, L);
  }
  // the position under pixel column x of a chart `width` pixels wide over [from, to)
  const positionAt = (x, width, range) =>
    clamp(range.from + Math.floor((x / width) * (range.to - range.from)), range.from, range.to - 1);
  // each of `width` pixel columns over [from, to): the lowest and highest of value(i) over its positions
  // (at least one: a column narrower than a position shows that position's)
  function columns(value, range, width) {
    const low = new Float64Array(width), high = new Float64Array(width), span = range.to - range.from;
    for (let x = 0; x < width; x++) {
      const first = range.from + Math.floor((x * span) / width);
      const last = Math.max(first + 1, range.from + Math.floor(((x + 1) * span) / width));
      let lo = Infinity, hi = -Infinity;
      for (let i = first; i < last; i++) { const v = value(i); if (v < lo) lo = v; if (v > hi) hi = v; }
      low[x] = lo; high[x] = hi;
    }
    return { low, high };
  }
  // the head under (x, y) of the grid of profiles (cells of cellW × cellH after margins left and top), or null
  function profileAt(x, y, grid) {
    const head = Math.floor((x - grid.left) / grid.cellW), layer = Math.floor((y - grid.top) / grid.cellH);
    if (x < grid.left || y < grid.top || head >= grid.heads || layer >= grid.layers) return null;
    return { layer, head };
  }
  Object.assign(AL, {
    NO_KEY, LEAST_SPAN, inflated, statisticsOf, initialLengthState, clampRange, zoomRange, panRange,
    rangeShowing, positionAt, columns, profileAt,
  });
})(globalThis.attnlab ??= {});
