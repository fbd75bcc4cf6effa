// attnlab view at length: the statistics page opens. Its language chosen, its words put in it, the statistics
// decoded (lazily, a head's received attention when first drawn), the views mounted and drawn once, and
// window.attnlabStatistics: what the browser tests read and call.
(function (AL) {
  "use strict";
  const { $, useLanguage, createStore, statisticsOf, initialLengthState, mountLengthViews, t } = AL;
  const phases = { start: performance.now() };
  const page = JSON.parse($("attnlab-data").textContent);
  phases.parsed = performance.now();
  useLanguage(page.lang);
  document.documentElement.lang = page.lang === "zh" ? "zh-CN" : "en";
  // the page's own words: each element's id and its text
  const WORDS = {
    "grid-title": t("every head's weight by distance behind the query (log-spaced bins: 0, 1, 2–3, 4–7, …); click one to open it"),
    "received-title": t("the attention each token receives (Σ over the queries, log scale); wheel: zoom, drag: pan, click: go to the token"),
    "entropy-title": t("entropy of each query's weights (nats)"), "sink-title": t("each query's weight on the first keys (sink share)"),
    "arcs-title": t("the clicked query's top keys"), "text-title": t("the text (click a token)"), "layer-word": t("layer"),
    "head-word": t("head"), "range-word": t("positions"), "whole": t("whole text"),
  };
  for (const [id, text] of Object.entries(WORDS)) $(id).textContent = text;
  const L = page.length, count = (n) => n.toLocaleString("en-US"); // 8,192
  $("summary").textContent = t("{0}: {1} tokens, {2} layers × {3} heads, statistics from the tiles", page.model,
    count(L), page.layers, page.heads);
  $("headline").textContent = page.cap === null ? "" : t("{0} tokens: past the {1}-token page of weights, this page " +
    "shows statistics computed exactly from the tiles", count(L), count(page.cap));
  $("headline").hidden = page.cap === null;
  $("role-rule").textContent = t("roles: a head is a sink head when at least half its weight is on the {0} keys it " +
    "gives the most; else local when at least half is within 15 keys behind the query; else long-range when a " +
    "query's top keys 256 or more behind it (those {0} aside) take a fifth of its weight or more, on average; " +
    "else mixed", page.sink_keys);
  $("precision").textContent = t("shown as carried: received attention in float16, entropy and shares in steps of 1/255, " +
    "the top {0} keys of each query", page.top_k);
  for (const note of page.notes) $("notes").append(AL.element("div", { class: "note" }, AL.noteText(note)));
  const legend = $("legend");
  for (const role of page.roles.names) {
    const swatch = AL.element("span", { class: "swatch" });
    swatch.style.background = AL.ROLE_COLOURS[role];
    legend.append(swatch, AL.element("span", {}, AL.roleName(role) + "  "));
  }
  const stats = statisticsOf(page);
  const store = createStore(initialLengthState(page));
  const app = { page, stats, store, L };
  const views = mountLengthViews(app);
  AL.lengthApp = app;
  stats.load(store.state.layer, store.state.head).then(() => { // the opened head decoded: everything drawn
    phases.decoded = performance.now();
    store.render();
    const usableAt = performance.now();
    window.attnlabStatistics = {
      get layer() { return store.state.layer; }, get head() { return store.state.head; },
      get token() { return store.state.token; }, get range() { return [store.state.from, store.state.to]; },
      select: (layer, head) => app.select(layer, head), goTo: (token) => app.goTo(token),
      setRange: (from, to) => store.setState(AL.clampRange(from, to, L)),
      topKeys: () => stats.topKeys(store.state.layer, store.state.head, store.state.token),
      grid: views.profiles.grid, usableAt, phases, ready: true,
    };
  });
})(globalThis.attnlab ??= {});
