// attnlab view --in-browser: the page that runs its model. The reader's text is tokenized
// (inpage_tokenizer.js) and run (inpage_model.js) in this page, and attnlab's page of that trace
// (page.html, the JSON block #attnlab-frame) is drawn in a frame, filled with the trace's JSON in the
// form viz._page_data writes it (tracePage: its layers' q, k, v as float64, the weights computed by the
// page's own script). A slider multiplies every layer's scale in the forward, a click on a head ablates
// it; each change runs the forward again and redraws the frame, on the reader's layer, head and query.
// window.attnlabInPage: what the browser tests read (the timings of the last redraw) and call.
(function (AL) {
  "use strict";
  // a Float64Array as base64 of its little-endian bytes (viz._encoding's "float64")
  function base64Of(array) {
    const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
    let text = "";
    for (let n = 0; n < bytes.length; n += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(n, n + 0x8000));
    return btoa(text);
  }
  // the ids of `text`, cut to the model's positions ([SEP] kept last), and whether they were cut
  function idsOf(tokenizer, config, text) {
    const ids = tokenizer.encode(text);
    if (ids.length <= config.max_positions) return { ids, cut: false };
    return { ids: [...ids.slice(0, config.max_positions - 1), ids[ids.length - 1]], cut: true };
  }
  // the page's JSON of a forward (`run`: inpage_model's) over `ids`: `skeleton` (viz._page_data's page of
  // the first text, its names, rules and words) with these tokens, each layer's numbers, `opens` and `notes`;
  // `words`: the tokenizer's spec (its vocabulary as Python shows it)
  function tracePage(skeleton, tokenizer, words, ids, run, opens, notes) {
    const L = ids.length, tokens = ids.map((id) => shownToken(words, tokenizer, id));
    const layers = skeleton.layers.map((layer, l) => ({
      ...layer, scale: run.layers[l].scale, dtype: "float64", single: false, masks: [Array.from({ length: L }, () => [L])],
      q: base64Of(run.layers[l].q), k: base64Of(run.layers[l].k), v: base64Of(run.layers[l].v), scores: null,
      bias: null, bias_heads: 0,
    }));
    const sequence = { name: "tokens", tokens, special: ids.map((id) => tokenizer.isSpecial(id)),
      parts: ids.map(() => ""), template: ids.map(() => false) };
    return { ...skeleton, sequences: [sequence], layers, opens, notes };
  }
  // a token as the page shows it: the vocabulary entry as Python displays it, a piece without its ##
  function shownToken(spec, tokenizer, id) {
    const bare = tokenizer.shown(id);
    return bare === spec.vocab[id] ? spec.shown[id] : spec.shown[id].slice(spec.vocab[id].length - bare.length);
  }
  // the view the page opens on: the model's answering head at its question's last token (a new text), else
  // the reader's own place (`place`), each index kept in range
  function openingOf(config, tokens, place, newText) {
    const L = tokens.length, asked = tokens.reduce((last, t, i) => (config.asks.includes(t) ? i : last), -1);
    if (config.answer && (newText || !place) && asked >= 0) return { layer: config.answer.layer, head: config.answer.head, query: asked };
    const at = place ?? { layer: 0, head: 0, query: 0 };
    return { layer: Math.min(at.layer, config.layers - 1), head: Math.min(at.head, config.heads - 1), query: Math.min(at.query, L - 1) };
  }
  // the answer line's numbers: at `view`'s head and query, the key of the largest weight and that weight
  function answerOf(run, view, L) {
    const w = run.layers[view.layer].weights, row = (view.head * L + view.query) * L;
    let best = 0;
    for (let j = 1; j < L; j++) if (w[row + j] > w[row + best]) best = j;
    return { key: best, weight: w[row + best] };
  }
  const escapedJSON = (data) => JSON.stringify(data).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026");

  function mount() {
    const { $, t, useLanguage, translatePage, createTokenizer, createModel } = AL;
    const spec = JSON.parse($("attnlab-model").textContent), frameTemplate = JSON.parse($("attnlab-frame").textContent);
    const { page: skeleton, text: firstText, lang } = JSON.parse($("attnlab-skeleton").textContent);
    useLanguage(lang);
    translatePage(lang);
    $("inpage-title").textContent = t("the model runs in this page");
    $("inpage-text-label").textContent = t("text");
    $("inpage-scale-label").textContent = t("scale of every layer's scores, in the forward");
    $("inpage-heads-label").textContent = t("click a head to ablate it (its output zero); click again to restore it:");
    const config = spec.config, tokenizer = createTokenizer(spec.tokenizer), model = createModel(spec);
    const state = { text: firstText, position: 0, ablated: new Set(), place: null, drawnText: null };
    const frame = $("inpage-view"), input = $("inpage-text"), slider = $("inpage-scale");
    // the last redraw's ms from the keystroke (or click) to its tokens and forward, its page built, its frame
    // loaded; `usableAt`: ms from the page's start to its first frame loaded
    const timing = { started: null, forward: null, built: null, drawn: null, redraws: 0, usableAt: null };
    $("inpage-summary").textContent = t("{0}: {1} layers × {2} heads, hidden {3}, weights in {4} — tokenized and run here, no server",
      config.name, config.layers, config.heads, config.hidden, Object.values(spec.weights)[0].dtype);
    input.value = firstText;
    // the head buttons, layers on the rows
    const grid = $("inpage-heads");
    for (let l = 0; l < config.layers; l++) {
      const row = grid.insertRow();
      row.appendChild(Object.assign(document.createElement("th"), { textContent: t("layer {0}", l) }));
      for (let h = 0; h < config.heads; h++) {
        const button = Object.assign(document.createElement("button"), { type: "button", textContent: String(h) });
        button.title = t("layer {0}, head {1}: click to ablate it", l, h);
        button.setAttribute("aria-pressed", "false");
        if (config.answer && config.answer.layer === l && config.answer.head === h) button.classList.add("answer");
        button.addEventListener("click", () => {
          const key = `${l},${h}`, off = !state.ablated.has(key);
          if (off) state.ablated.add(key); else state.ablated.delete(key);
          button.setAttribute("aria-pressed", String(off));
          schedule();
        });
        row.insertCell().appendChild(button);
      }
    }
    const readPlace = () => {
      try {
        const view = frame.contentWindow.attnlabView;
        return view && view.ready ? { layer: view.layer, head: view.head, query: view.query } : state.place;
      } catch { return state.place; } // a frame of another origin (a sandboxed notebook's): the last one drawn
    };
    function recompute() {
      timing.started ??= performance.now();
      const multiplier = state.position === 0 ? 1 : 10 ** (state.position / 100);
      const { ids, cut } = idsOf(tokenizer, config, state.text);
      const run = model.forward(ids, { multiplier, ablated: state.ablated });
      timing.forward = performance.now() - timing.started;
      const tokens = ids.map((id) => shownToken(spec.tokenizer, tokenizer, id));
      const place = openingOf(config, tokens, readPlace(), state.text !== state.drawnText);
      state.place = place;
      state.drawnText = state.text;
      const notes = cut ? [t("the text was cut to the model's {0} positions", config.max_positions)] : [];
      const data = tracePage(skeleton, tokenizer, spec.tokenizer, ids, run, place, notes);
      const view = config.answer && tokens.some((x) => config.asks.includes(x)) ? openingOf(config, tokens, null, true) : place;
      const { key, weight } = answerOf(run, view, ids.length);
      const answer = $("inpage-answer");
      answer.replaceChildren(document.createTextNode(t("{0} → {1}: ", tokens[view.query], tokens[key])),
        Object.assign(document.createElement("span"), { className: "weight", textContent: weight.toFixed(4) }),
        document.createTextNode(" " + t("(layer {0}, head {1})", view.layer, view.head)));
      answer.dataset.key = String(key);
      answer.dataset.weight = String(weight);
      $("inpage-scale-value").textContent = multiplier === 1 ? "= 1/√d_k" : `= ${multiplier.toPrecision(3)} × 1/√d_k`;
      frame.srcdoc = frameTemplate.replace("__ATTNLAB_INPAGE_TRACE__", () => escapedJSON(data));
      timing.built = performance.now() - timing.started;
    }
    frame.addEventListener("load", () => {
      try {
        frame.style.height = `${frame.contentDocument.documentElement.scrollHeight + 20}px`;
      } catch { /* a frame of another origin keeps its height */ }
      if (timing.started !== null) {
        timing.drawn = performance.now() - timing.started;
        timing.redraws += 1;
        timing.usableAt ??= performance.now();
        $("inpage-note").textContent = t("recomputed in this page in {0} ms (tokens and forward {1} ms)",
          Math.round(timing.drawn), Math.round(timing.forward));
      }
      timing.started = null;
    });
    // one recompute for the keystrokes queued meanwhile (a timer, not an animation frame: a frame out of
    // sight, a page embedded below the fold, gets none)
    let pending = false;
    function schedule() {
      timing.started ??= performance.now();
      if (pending) return;
      pending = true;
      setTimeout(() => { pending = false; recompute(); }, 0);
    }
    input.addEventListener("input", () => { state.text = input.value; schedule(); });
    slider.addEventListener("input", () => { state.position = Number(slider.value); schedule(); });
    $("inpage-scale-reset").addEventListener("click", () => { slider.value = "0"; state.position = 0; schedule(); });
    recompute();
    window.attnlabInPage = {
      timing, get answer() { return { ...$("inpage-answer").dataset }; }, forward: model.forward, encode: tokenizer.encode,
      type(text) { input.value = text; input.dispatchEvent(new Event("input")); },
    };
  }
  Object.assign(AL, { base64Of, idsOf, tracePage, shownToken, openingOf, answerOf });
  if (typeof document !== "undefined" && document.getElementById("attnlab-model")) mount();
})(globalThis.attnlab ??= {});
