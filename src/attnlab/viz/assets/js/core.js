// attnlab view, the page's script: its modules are inlined in order by attnlab.viz._page (its
// SCRIPTS list) into one <script>, with no bundler and nothing fetched. Each module is a function
// run at once that takes what it needs from the one namespace object `globalThis.attnlab` and adds
// what it offers to it, so the same file runs inlined in the page and under `node --test`
// (tests/viz/js/, which require the pure modules: decoding, maths, state). This one: the namespace,
// and the helpers every view shares (elements, tokens and numbers as text). Tokens are only ever
// written as text.
(function (AL) {
  "use strict";
  const $ = (id) => document.getElementById(id);
  // an element with attributes and, optionally, text
  function element(tag, attributes = {}, text = null) {
    const e = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes)) e.setAttribute(key, value);
    if (text !== null) e.textContent = text;
    return e;
  }
  const SVG_NS = "http://www.w3.org/2000/svg";
  function svgElement(name, attributes) {
    const e = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes)) e.setAttribute(key, value);
    return e;
  }
  const FONT = "12px system-ui, 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif";
  const WIDE_FONT = "bold 14px 'Noto Sans CJK SC', 'WenQuanYi Zen Hei', sans-serif";
  // full-width punctuation (，。、！？「」 …): the first font that has it draws a speck, so a CJK font draws it
  const WIDE_PUNCTUATION = /^[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+$/;

  // ---- numbers and tokens as text ----
  const vec = (xs) => "[" + xs.map((x) => x.toFixed(3)).join(", ") + "]";
  // a number in a cell or on a tick: two decimals, or two significant digits when smaller (0.0033, not 0.00)
  const short = (x) => (x === 0 || Math.abs(x) >= 0.1 ? x.toFixed(2) : x.toPrecision(2));
  const fixed = (x) => (x === null || x === undefined ? "—" : x.toFixed(4));
  const shorten = (t, most) => ([...t].length > most ? [...t].slice(0, most - 1).join("") + "…" : t); // their start
  // token i of sequence `seq`: its marks, special ([CLS]) or a piece of a character split over several
  // tokens or put there by a chat template (not the user's words)
  const tokenClass = (seq, i) =>
    seq.special[i] ? "special" : seq.template?.[i] ? "template" : seq.parts[i] ? "part" : "";
  const t = (key, ...args) => AL.t(key, ...args); // i18n's, loaded after this module
  const tokenTitle = (seq, i) =>
    seq.special[i] ? t("special token") : seq.template?.[i] ? t("put there by the chat template, not the user's words")
    : seq.parts[i] ? t("holds bytes of {0}, split over several tokens", seq.parts[i]) : "";
  // a piece that shows no character of its own is named by the character it is part of
  const pieceOnly = (seq, i) => seq.parts[i] && !seq.tokens[i].trim();
  const tokenLabel = (seq, i) => (pieceOnly(seq, i) ? t("{0}‹piece of {1}›", seq.tokens[i], seq.parts[i]) : seq.tokens[i]);
  // a token's label colour on a canvas: grey for a special token, blue for a chat template's, as the text's CSS
  const labelColour = (seq, i) => (seq.special[i] ? "#888" : seq.template?.[i] ? "#2a6f97" : "#222");
  // a readout line: its text, and the number in data-value for a test to read
  function readout(target, text, value) {
    target.textContent = text;
    target.dataset.value = value === null || value === undefined ? "" : value.toFixed(4);
  }
  Object.assign(AL, {
    $, element, svgElement, FONT, WIDE_FONT, WIDE_PUNCTUATION, vec, short, fixed, shorten, tokenClass, tokenTitle,
    pieceOnly, tokenLabel, labelColour, readout,
  });
})(globalThis.attnlab ??= {});
