// attnlab view: a vision model's image, its patches as thumbnails (each a token: a click makes it
// the query), the tokens apart ([CLS], registers) as buttons, and the query's weight (the head on
// show) over each patch, 0 → the largest on viridis at 0.6 opacity.
(function (AL) {
  "use strict";
  const { $, t, sequenceName, element, tokenLabel, weightColour } = AL;
  function mountImage(app) {
    const picture = app.page.image; // null, or the PNG (base64), its height and width, the grid (rows,
    if (picture === null) return { overlayWeights: () => null }; // cols), its sequence and the patches' tokens
    const cols = picture.grid[1], [ph, pw] = [picture.height / picture.grid[0], picture.width / cols];
    const patchOf = new Map(picture.patches.map((token, p) => [token, p])); // token index → patch index
    // whether the shown layer's queries (rows) or keys (columns) are the image's patches
    const patchesAreQueries = (state) => app.shown(state).layer.rows === picture.sequence;
    const patchesAreKeys = (state) => app.shown(state).layer.cols === picture.sequence;
    const choose = (token) => { if (patchesAreQueries(app.state)) app.select(token, true); };
    const size = Math.max(10, Math.min(40, Math.floor(520 / cols)));
    // patch p's thumbnail: a canvas of the patch's own pixels, shown `size` pixels wide; a click chooses it
    const thumbnails = picture.patches.map((token, p) => {
      const small = element("canvas", { "data-token": String(token), "data-patch": String(p),
        title: t("patch {0}: row {1}, column {2} (token {3})", p, Math.floor(p / cols), p % cols, token) });
      small.width = pw;
      small.height = ph;
      small.style.width = `${size}px`;
      small.style.height = `${Math.round((size * ph) / pw)}px`;
      small.addEventListener("click", () => choose(token));
      return small;
    });
    // the tokens that are not patches ([CLS], a distillation token, registers), drawn apart as buttons
    const apart = app.sequences[picture.sequence].tokens.flatMap((text, i) => {
      if (patchOf.has(i)) return [];
      const button = element("button", { type: "button", class: "apart-token", "data-token": String(i),
        title: t("token {0}: not a patch", i) }, text);
      button.addEventListener("click", () => choose(i));
      return [button];
    });
    $("image-panel").hidden = false;
    $("patches").style.gridTemplateColumns = `repeat(${cols}, ${size}px)`;
    $("patches").replaceChildren(...thumbnails);
    $("apart").replaceChildren(...apart);
    const overlay = $("overlay"), shownWidth = Math.max(224, cols * size + 2 * (cols - 1)); // as wide as the thumbnails
    overlay.width = picture.width;
    overlay.height = picture.height;
    overlay.style.width = `${shownWidth}px`;
    overlay.style.height = `${Math.round((shownWidth * picture.height) / picture.width)}px`;
    overlay.addEventListener("click", (event) => {
      const box = overlay.getBoundingClientRect();
      const x = ((event.clientX - box.left) / box.width) * picture.width, y = ((event.clientY - box.top) / box.height) * picture.height;
      const p = Math.floor(y / ph) * cols + Math.floor(x / pw);
      if (p >= 0 && p < picture.patches.length) choose(picture.patches[p]);
    });
    const image = new Image();
    image.onload = () => app.setState({ picture: image });
    image.src = "data:image/png;base64," + picture.png; // a data: URL, as the page's policy allows: nothing fetched
    // each thumbnail: its patch's pixels, exactly (one canvas pixel per image pixel)
    function drawPatches(state) {
      if (state.picture === null) return;
      thumbnails.forEach((small, p) => {
        small.getContext("2d").drawImage(state.picture, (p % cols) * pw, Math.floor(p / cols) * ph, pw, ph, 0, 0, pw, ph);
      });
    }
    // what the thumbnails do for the shown layer: choose its query, or nothing; the chosen one marked
    function markPatches(state) {
      const queries = patchesAreQueries(state), { rowSeq } = app.shown(state);
      $("patches").classList.toggle("inert", !queries);
      $("patches-note").textContent = queries
        ? t("{0} patches ({1} × {2}), each a token: click one to make it the query", picture.patches.length,
          picture.grid[0], cols)
        : t("{0} patches ({1} × {2}); this layer's queries are the {3} tokens", picture.patches.length, picture.grid[0],
          cols, sequenceName(rowSeq.name));
      const chosen = (e) => queries && Number(e.dataset.token) === state.query;
      for (const e of [...thumbnails, ...$("apart").children]) e.classList.toggle("selected", chosen(e));
    }
    // the shown query's weight on each patch (the head on show), or null when the keys are not the patches
    function overlayWeights(state = app.state) {
      if (!patchesAreKeys(state)) return null;
      const w = app.weights(state.head, state), { S } = app.shown(state);
      return picture.patches.map((j) => w[state.query * S + j]);
    }
    // the image, and over each patch the query's weight on it, 0 (dark) → the largest of them (bright)
    function drawOverlay(state) {
      if (state.picture === null) return;
      const ctx = overlay.getContext("2d"), values = overlayWeights(state), { rowSeq, colSeq } = app.shown(state);
      ctx.globalAlpha = 1;
      ctx.drawImage(state.picture, 0, 0);
      if (values === null) {
        $("overlay-note").textContent = t("this layer's keys are the {0} tokens, not the image's patches",
          sequenceName(colSeq.name));
        return;
      }
      const top = Math.max(0, ...values.filter(Number.isFinite)), total = values.reduce((a, x) => a + (Number.isFinite(x) ? x : 0), 0);
      ctx.globalAlpha = 0.6;
      values.forEach((a, p) => {
        const [r, g, b] = weightColour(a, top);
        ctx.fillStyle = `rgb(${r},${g},${b})`;
        ctx.fillRect((p % cols) * pw, Math.floor(p / cols) * ph, pw, ph);
      });
      ctx.globalAlpha = 1;
      if (patchesAreQueries(state) && patchOf.has(state.query)) {
        const p = patchOf.get(state.query);
        ctx.strokeStyle = "#d00";
        ctx.lineWidth = Math.max(1, pw / 8);
        ctx.strokeRect((p % cols) * pw, Math.floor(p / cols) * ph, pw, ph);
      }
      $("overlay-note").textContent = t("query {0} ({1}), head {2}: its weight on each patch, 0 (dark) → {3} (bright, " +
        "the largest); the patches take {4} of it, the tokens apart {5}", state.query, tokenLabel(rowSeq, state.query),
        state.head, top.toFixed(4), total.toFixed(4), (1 - total).toFixed(4));
    }
    app.store.register(["picture"], drawPatches);
    app.store.register(["layer", "head", "scale", "query", "picture"], drawOverlay);
    app.store.register(["layer", "query"], markPatches);
    return { overlayWeights };
  }
  Object.assign(AL, { mountImage });
})(globalThis.attnlab ??= {});
