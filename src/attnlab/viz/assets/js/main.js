// attnlab view: the page opens. Its language (the JSON's `lang`) chosen and page.html's own text put in
// it, the app over the JSON block #attnlab-data, each view mounted on it,
// everything drawn once, the link applied, the model view's thumbnails drawn after, and
// window.attnlabView: what the views beyond a trace (views/) and the browser tests read and call.
(function (AL) {
  "use strict";
  const { $, useLanguage, translatePage, createApp, actions, mountHeatmap, mountHeadView, mountSteps, mountImage,
    mountModelView, mountControls, mountExports, mountAnswer, colour } = AL;
  const page = JSON.parse($("attnlab-data").textContent);
  useLanguage(page.lang);
  translatePage(page.lang);
  const app = createApp(page);
  const heatmap = mountHeatmap(app);
  Object.assign(app, actions(app));
  mountControls(app, (state) => { const { cell, rowCell } = heatmap.layoutOf(state); return Math.min(cell, rowCell); });
  mountHeadView(app);
  mountSteps(app);
  mountAnswer(app);
  const image = mountImage(app);
  const modelView = mountModelView(app);
  const exports = mountExports(app, heatmap);
  app.store.render();
  app.applyLink();
  window.addEventListener("hashchange", app.applyLink);
  // usable: the opened head's heatmap, head view and steps drawn and the controls bound (ms since the page
  // began to load); the model view's thumbnails are drawn after, in slices
  const usableAt = performance.now();
  if (app.page.model) modelView.drawThumbnails();
  AL.app = app; // the views beyond a trace (views/) mount on it
  const labelled = (labels) => labels.flatMap((t, i) => (t === null ? [] : [[i, t]]));
  const { select, setHead, setScale, useLayer, openHead } = app;
  window.attnlabView = {
    weights: (h) => Array.from(app.weights(h)),
    weightRows: (h, rows) => rows.map((i) => Array.from(app.weights(h).subarray(i * app.shown().S, (i + 1) * app.shown().S))),
    setScale, setHead, useLayer, openHead, select, exportSVG: exports.exportSVG, exportPNG: exports.exportPNG, colour,
    get axisLabels() { return labelled(heatmap.layoutOf().shown); },
    get keyAxisLabels() { return labelled(heatmap.layoutOf().shownKeys); },
    get geometry() { const { margin, cell, rowCell } = heatmap.layoutOf(); return { margin, cell, rowCell }; },
    get lengths() { return [app.shown().L, app.shown().S]; }, overlayWeights: () => image.overlayWeights(),
    get scale() { return app.state.scale; }, get head() { return app.state.head; }, get layer() { return app.state.layer; },
    get query() { return app.state.query; },
    get imageReady() { return app.page.image === null || app.state.picture !== null; },
    usableAt, get thumbnails() { return { ...app.state.thumbnails }; },
    ready: true,
  };
})(globalThis.attnlab ??= {});
