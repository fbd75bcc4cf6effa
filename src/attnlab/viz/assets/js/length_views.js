// attnlab view at length: the statistics page's views, each drawn from the store's state (length_state.js):
// the grid of distance profiles (layers × heads, each tinted by its role; a click selects the head), the
// attention each token receives along the text, entropy and sink share across positions, the clicked
// query's top keys as arcs over its tokens, and the text scrolled to the token. The charts share one range of
// positions: the wheel zooms it about the pointer, a drag pans it, the boxes type it.
(function (AL) {
  "use strict";
  const { $, element, t, FONT, colourPixel, positionAt, columns, profileAt, zoomRange, panRange, clampRange,
    rangeShowing } = AL;
  const ROLE_COLOURS = { sink: "#c0392b", local: "#2e6fbd", "long-range": "#2e9a4b", mixed: "#8a8a8a" };
  const ROLE_TINTS = { sink: "#fbe3e0", local: "#e1ecfa", "long-range": "#e2f4e6", mixed: "#f2f2f2" };
  const roleName = (role) => ({ sink: t("sink"), local: t("local"), "long-range": t("long-range"), mixed: t("mixed") })[role];
  const WIDTH = 1000; // the charts' width in pixels
  const GRID = { left: 64, top: 18, cellW: 64, cellH: 28 };

  // a canvas sized for the screen's pixels, its context scaled to CSS pixels
  function sized(canvas, width, height) {
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio);
    canvas.style.width = `${width}px`; canvas.style.height = `${height}px`;
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.font = FONT;
    return g;
  }

  // ---- the grid of distance profiles ----
  function mountProfiles(app) {
    const { stats, store } = app, canvas = $("profiles"), readout = $("profile-readout");
    const grid = { ...GRID, layers: stats.layers, heads: stats.heads };
    const bins = app.page.distance_bins.map(([first]) => first >= 0); // the bins behind the query (d >= 0)
    function draw(state) {
      const g = sized(canvas, grid.left + grid.heads * grid.cellW + 4, grid.top + grid.layers * grid.cellH + 4);
      g.fillStyle = "#555"; g.textBaseline = "middle"; g.textAlign = "center";
      for (let h = 0; h < grid.heads; h++) g.fillText(String(h), grid.left + (h + 0.5) * grid.cellW, grid.top / 2);
      g.textAlign = "right";
      for (let l = 0; l < grid.layers; l++) g.fillText(t("layer {0}", l), grid.left - 6, grid.top + (l + 0.5) * grid.cellH);
      for (let l = 0; l < grid.layers; l++) {
        for (let h = 0; h < grid.heads; h++) drawCell(g, l, h, state);
      }
    }
    function drawCell(g, l, h, state) {
      const x = grid.left + h * grid.cellW, y = grid.top + l * grid.cellH, w = grid.cellW - 3, ht = grid.cellH - 3;
      const role = stats.role(l, h), shares = stats.profile(l, h).filter((_, b) => bins[b]);
      g.fillStyle = ROLE_TINTS[role]; g.fillRect(x, y, w, ht);
      g.fillStyle = ROLE_COLOURS[role];
      const bar = w / shares.length;
      shares.forEach((share, b) => { // √share: a bin of 1 % still shows
        const high = Math.sqrt(share) * (ht - 12);
        g.fillRect(x + b * bar, y + ht - high, Math.max(1, bar - 0.5), high);
      });
      g.font = "10px system-ui, sans-serif"; g.textAlign = "left"; g.textBaseline = "top";
      g.fillText(roleName(role), x + 2, y + 1);
      g.font = FONT;
      if (l === state.layer && h === state.head) {
        g.strokeStyle = "#111"; g.lineWidth = 2.5; g.strokeRect(x - 1, y - 1, w + 2, ht + 2);
      }
    }
    const headAt = (event) => {
      const box = canvas.getBoundingClientRect();
      return profileAt(event.clientX - box.left, event.clientY - box.top, grid);
    };
    canvas.addEventListener("click", (event) => {
      const at = headAt(event);
      if (at) app.select(at.layer, at.head);
    });
    canvas.addEventListener("mousemove", (event) => {
      const at = headAt(event);
      readout.textContent = at ? describeHead(app, at.layer, at.head) : "";
    });
    store.register(["layer", "head"], draw);
    return { grid };
  }
  // "layer 3, head 2: sink (sink 0.93, local 0.02, long-range 0.01)"
  function describeHead(app, l, h) {
    const s = app.stats.shares(l, h);
    return t("layer {0}, head {1}: {2} (sink {3}, local {4}, long-range {5})", l, h, roleName(app.stats.role(l, h)),
      s.sink.toFixed(2), s.local.toFixed(2), s.far.toFixed(2));
  }

  // ---- the charts along the text ----
  // a chart over the state's range: drawn by `paint(g, state, height)`; wheel, drag and click bound
  function chart(app, id, height, paint) {
    const canvas = $(id), { store, L } = app;
    let dragged = null;
    canvas.addEventListener("wheel", (event) => {
      event.preventDefault();
      const state = store.state, box = canvas.getBoundingClientRect();
      const at = positionAt(event.clientX - box.left, WIDTH, state);
      store.setState(zoomRange(state, at, event.deltaY < 0 ? 0.8 : 1.25, L));
    }, { passive: false });
    canvas.addEventListener("mousedown", (event) => { dragged = { x: event.clientX, range: store.state, moved: false }; });
    window.addEventListener("mousemove", (event) => {
      if (dragged === null) return;
      const dx = event.clientX - dragged.x;
      if (Math.abs(dx) < 3 && !dragged.moved) return;
      dragged.moved = true;
      const range = dragged.range, by = Math.round((-dx / WIDTH) * (range.to - range.from));
      store.setState(panRange(range, by, L));
    });
    window.addEventListener("mouseup", () => { setTimeout(() => { dragged = null; }, 0); });
    canvas.addEventListener("click", (event) => {
      if (dragged?.moved) return;
      const box = canvas.getBoundingClientRect();
      app.goTo(positionAt(event.clientX - box.left, WIDTH, store.state));
    });
    store.register(["layer", "head", "token", "from", "to"], (state) => {
      const g = sized(canvas, WIDTH, height);
      g.fillStyle = "#fafafa"; g.fillRect(0, 0, WIDTH, height);
      paint(g, state, height);
      const span = state.to - state.from, x = ((state.token - state.from + 0.5) / span) * WIDTH;
      if (state.token >= state.from && state.token < state.to) { g.fillStyle = "rgba(208,0,0,0.8)"; g.fillRect(x - 1, 0, 2, height); }
    });
  }
  // the attention each key receives, Σ_i P_ij, as bars on a log scale (1 + received), coloured on viridis
  function paintReceived(app) {
    return (g, state, height) => {
      const received = app.stats.received(state.layer, state.head);
      const top = Math.log1p(received.reduce((a, b) => (b > a ? b : a), 0)) || 1;
      const { high } = columns((i) => received[i], state, WIDTH);
      for (let x = 0; x < WIDTH; x++) {
        const f = Math.log1p(high[x]) / top, c = colourPixel(f);
        g.fillStyle = `rgb(${c & 255},${(c >> 8) & 255},${(c >> 16) & 255})`;
        g.fillRect(x, height - f * (height - 4), f > 0.5 ? 3 : 1, f * (height - 4)); // a sink's bar 3 pixels wide
      }
    };
  }
  // a line of value(i) on 0..top: each pixel column from its lowest to its highest
  function paintLine(app, value, top, colour) {
    return (g, state, height) => {
      const { low, high } = columns((i) => value(state, i), state, WIDTH), y = (v) => height - 2 - (v / top) * (height - 4);
      g.fillStyle = colour;
      for (let x = 0; x < WIDTH; x++) g.fillRect(x, y(high[x]), 1, Math.max(1, y(low[x]) - y(high[x])));
      g.fillStyle = "#777"; g.textAlign = "right"; g.textBaseline = "top";
      g.fillText(top.toFixed(2), WIDTH - 4, 2);
    };
  }
  // the query's top keys as arcs over its tokens: from the query up and over to each key, as thick as its weight
  function paintArcs(app) {
    return (g, state, height) => {
      const span = state.to - state.from, xOf = (i) => ((i - state.from + 0.5) / span) * WIDTH, base = height - 24;
      const seq = app.page.sequence;
      if (span <= WIDTH / 6) { // room for the tokens: each under its place
        g.fillStyle = "#333"; g.textAlign = "center"; g.textBaseline = "top";
        const every = Math.max(1, Math.ceil(span / (WIDTH / 48)));
        for (let i = state.from; i < state.to; i += every) g.fillText(AL.shorten(seq.tokens[i], 6), xOf(i), base + 4);
      }
      const q = xOf(state.token);
      g.textBaseline = "bottom";
      for (const [key, weight] of app.stats.topKeys(state.layer, state.head, state.token)) {
        const k = xOf(key), rise = Math.min(base - 16, 12 + Math.abs(q - k) / 2);
        g.strokeStyle = `rgba(192,57,43,${0.25 + 0.75 * weight})`; g.lineWidth = 1 + 5 * weight;
        g.beginPath(); g.moveTo(q, base); g.bezierCurveTo(q, base - rise, k, base - rise, k, base); g.stroke();
        g.fillStyle = "#c0392b"; g.fillRect(k - 2, base - 2, 4, 4);
        if (k >= 0 && k <= WIDTH) continue; // a key out of the range shown: named at the chart's edge
        const label = `${key} «${AL.shorten(seq.tokens[key], 8)}» ${weight.toFixed(2)}`;
        g.textAlign = k < 0 ? "left" : "right";
        g.fillText(k < 0 ? `← ${label}` : `${label} →`, k < 0 ? 4 : WIDTH - 4, base - rise * 0.75 - 2);
      }
    };
  }

  // ---- the text, scrolled to the token; its top keys marked ----
  function mountText(app) {
    const box = $("text"), seq = app.page.sequence, spans = [];
    const fragment = document.createDocumentFragment();
    app.page.text.forEach((token, i) => {
      const span = element("span", { class: `token ${AL.tokenClass(seq, i)}`.trim(), "data-i": String(i) }, token);
      spans.push(span);
      fragment.append(span);
    });
    box.append(fragment);
    box.addEventListener("click", (event) => {
      const i = event.target?.dataset?.i;
      if (i !== undefined) app.goTo(Number(i));
    });
    let marked = [];
    app.store.register(["layer", "head", "token"], (state) => {
      for (const span of marked) { span.classList.remove("selected", "key"); span.style.backgroundColor = ""; }
      marked = [];
      for (const [key, weight] of app.stats.topKeys(state.layer, state.head, state.token)) {
        spans[key].classList.add("key");
        spans[key].style.backgroundColor = `rgba(192,57,43,${(0.15 + 0.6 * weight).toFixed(3)})`;
        marked.push(spans[key]);
      }
      const chosen = spans[state.token];
      chosen.classList.add("selected");
      marked.push(chosen);
      box.scrollTop = chosen.offsetTop - box.clientHeight / 2; // the box (its spans' offsetParent) scrolls, not the page
      const keys = app.stats.topKeys(state.layer, state.head, state.token)
        .map(([key, w]) => `${key} «${AL.shorten(seq.tokens[key], 12)}» ${w.toFixed(2)}`).join(t(", "));
      $("query-readout").textContent = t("query {0} «{1}»: its top keys {2}", state.token, AL.shorten(seq.tokens[state.token], 16), keys);
      const at = state.layer * app.stats.heads + state.head;
      $("query-readout").dataset.value = String(at);
    });
  }

  // ---- the controls: layer, head, range ----
  function mountControls(app) {
    const { store, stats, L } = app, layer = $("length-layer"), head = $("length-head"), from = $("from"), to = $("to");
    for (let l = 0; l < stats.layers; l++) layer.append(element("option", { value: String(l) }, String(l)));
    for (let h = 0; h < stats.heads; h++) head.append(element("option", { value: String(h) }, String(h)));
    layer.addEventListener("change", () => app.select(Number(layer.value), store.state.head));
    head.addEventListener("change", () => app.select(store.state.layer, Number(head.value)));
    const typed = () => store.setState(clampRange(Number(from.value), Number(to.value) + 1, L));
    from.addEventListener("change", typed); to.addEventListener("change", typed);
    from.max = to.max = String(L - 1);
    $("whole").addEventListener("click", () => store.setState({ from: 0, to: L }));
    store.register(["layer", "head", "from", "to"], (state) => {
      layer.value = String(state.layer); head.value = String(state.head);
      from.value = String(state.from); to.value = String(state.to - 1);
      $("head-title").textContent = describeHead(app, state.layer, state.head);
      $("head-title").style.color = ROLE_COLOURS[stats.role(state.layer, state.head)];
      const seq = app.page.sequence, sinks = stats.shares(state.layer, state.head).sinks;
      $("sink-keys").textContent = t("the keys it gives the most: {0}",
        sinks.map((j) => `${j} «${AL.shorten(seq.tokens[j], 12)}»`).join(t(", ")));
    });
  }

  function mountLengthViews(app) {
    const { stats } = app;
    // another head: drawn once its numbers are decoded (a promise of it)
    app.select = (layer, head) => stats.load(layer, head).then(() => { app.store.setState({ layer, head }); });
    app.goTo = (token) => {
      const i = Math.min(app.L - 1, Math.max(0, token));
      const { from, to } = rangeShowing(app.store.state, i, app.L);
      app.store.setState({ token: i, from, to });
    };
    const profiles = mountProfiles(app);
    mountControls(app);
    chart(app, "received", 80, paintReceived(app));
    chart(app, "entropy", 60, paintLine(app, (s, i) => stats.entropy(s.layer, s.head, i), app.page.log_length, "#2e6fbd"));
    chart(app, "sink-share", 60, paintLine(app, (s, i) => stats.sinkShare(s.layer, s.head, i), 1, "#c0392b"));
    chart(app, "arcs", 150, paintArcs(app));
    mountText(app);
    return { profiles };
  }
  Object.assign(AL, { ROLE_COLOURS, ROLE_TINTS, roleName, mountLengthViews, describeHead });
})(globalThis.attnlab ??= {});
