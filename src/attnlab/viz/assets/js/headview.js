// attnlab view: the head view, queries on the left, keys on the right, a line per key from the
// query on show (or the one hovered): its width and opacity the weight, or α_j·‖v_j‖ by value.
(function (AL) {
  "use strict";
  const { $, svgElement, shorten, WIDE_PUNCTUATION, tokenClass, tokenTitle, pieceOnly, normsOf } = AL;
  const ROW = 18, HEAD_VIEW_WIDTH = 360;
  const labelX = (side) => (side ? HEAD_VIEW_WIDTH - 110 : 110);
  // token i's label on one side (0: queries, of the rows' sequence; 1: keys, of the columns')
  function headViewLabel(seq, side, i) {
    const text = seq.tokens[i];
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
  // a line's width and opacity are the weight itself (0 → 1), not its share of the row's
  // largest; by value, α_j·‖v_j‖ over the head's largest ‖v‖
  function arrowWeights(app, state, i) {
    const { layer, S } = app.shown(state), w = app.weights(state.head, state);
    const { values, largest } = normsOf(layer), top = largest[state.head], out = [];
    for (let j = 0; j < S; j++) {
      const a = state.byValue ? (top > 0 ? (w[i * S + j] * values[state.head][j]) / top : 0) : w[i * S + j];
      out.push(Number.isFinite(a) ? a : 0);
    }
    return out;
  }
  // the head view's own box scrolls to the query; the page itself stays where it is, controls in view
  function scrollToQuery(i) {
    const box = $("headview-box");
    box.scrollTop = Math.max(0, i * ROW + ROW / 2 - box.clientHeight / 2);
  }
  function mountHeadView(app) {
    const svg = $("headview");
    // the svg's labels, once per pair of sequences: the group the lines go into and the query labels
    function build(state) {
      const { layer, rowSeq, colSeq, L, S } = app.shown(state), pair = `${layer.rows} ${layer.cols}`;
      if (svg.dataset.pair === pair) return;
      svg.dataset.pair = pair;
      svg.replaceChildren();
      svg.setAttribute("width", HEAD_VIEW_WIDTH);
      svg.setAttribute("height", Math.max(L, S) * ROW + 8);
      svg.appendChild(svgElement("g", { class: "lines" }));
      for (const side of [0, 1]) {
        const seq = side ? colSeq : rowSeq;
        for (let i = 0; i < (side ? S : L); i++) {
          if (pieceOnly(seq, i)) svg.appendChild(pieceMark(side, i));
          const label = headViewLabel(seq, side, i);
          if (!side) {
            label.setAttribute("data-query", String(i));
            label.addEventListener("mouseenter", () => app.setState({ hover: i }));
            label.addEventListener("mouseleave", () => app.setState({ hover: null }));
            label.addEventListener("click", () => app.select(i));
          }
          svg.appendChild(label);
        }
      }
    }
    function draw(state) {
      build(state);
      const i = state.hover === null ? state.query : state.hover, { S } = app.shown(state);
      const lines = svg.querySelector("g.lines");
      lines.replaceChildren();
      const faint = Math.min(0.01, 0.5 / S); // near-uniform rows of long sequences still show
      arrowWeights(app, state, i).forEach((a, j) => {
        if (a < faint) return;
        lines.appendChild(svgElement("line", {
          x1: 115, y1: i * ROW + 12, x2: HEAD_VIEW_WIDTH - 115, y2: j * ROW + 12, stroke: "#3b528b",
          "stroke-width": (0.5 + 5 * a).toFixed(2), "stroke-opacity": (0.15 + 0.85 * a).toFixed(2),
        }));
      });
      svg.querySelectorAll("text[data-query]").forEach((t, n) => t.classList.toggle("selected", n === i));
    }
    app.store.register(["layer", "head", "scale", "query", "hover", "byValue"], draw);
  }
  Object.assign(AL, { mountHeadView, scrollToQuery });
})(globalThis.attnlab ??= {});
