// attnlab view: the views beyond a trace open, each mounted on the page's app from the JSON block
// #attnlab-views (null: none), in order, and drawn once.
(function (AL) {
  "use strict";
  const { $, app, mountPair, mountGeneration, mountFlows, mountAblation, mountHeadTypes } = AL;
  const views = JSON.parse($("attnlab-views").textContent);
  const mounts = { pair: mountPair, generation: mountGeneration, flows: mountFlows, ablation: mountAblation,
    head_types: mountHeadTypes };
  const shown = views === null ? [] : Object.keys(mounts).filter((name) => views[name]);
  for (const name of shown) mounts[name](app, views);
  if (shown.length) app.store.render();
  window.attnlabViews = { ready: true, count: shown.length };
})(globalThis.attnlab ??= {});
