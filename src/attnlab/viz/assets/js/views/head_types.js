// attnlab view: head types, each head of the model view outlined and labelled by its dominant kind,
// with a legend. Drawn once: it reads no state.
(function (AL) {
  "use strict";
  const { t, element, panel } = AL;
  // a kind of head (attnlab.analysis.HEAD_KINDS) in words
  const kindOfHead = (kind) => ({
    previous: t("previous"), induction: t("induction"), sink: t("sink"), self: t("self"), cls: t("cls"), sep: t("sep"),
    punctuation: t("punctuation"),
  })[kind] ?? kind;
  const KIND_COLOURS = {
    previous: "#1f77b4", induction: "#d62728", sink: "#7f7f7f", self: "#2ca02c", cls: "#9467bd", sep: "#8c564b",
    punctuation: "#e377c2",
  };
  function mountHeadTypes(app, views) {
    const types = views.head_types;
    const box = panel("head-types-view", t("head types:"), t("each head of the model view is outlined and labelled " +
      "by its dominant kind, the share of its attention on that kind of key ({0} or more; unlabelled: none reaches it)",
    types.threshold) + (types.repeat ? t("; induction on {0} random tokens repeated", types.repeat) : ""));
    const legend = element("div", { class: "head-types-legend", id: "head-types-legend" });
    for (const kind of types.kinds) {
      const item = element("span", { class: "head-type", "data-kind": kind }, kindOfHead(kind));
      item.style.borderColor = KIND_COLOURS[kind];
      legend.appendChild(item);
    }
    box.appendChild(legend);
    for (const canvas of document.querySelectorAll("#grid canvas[data-layer]")) {
      const layer = views.page_layers[Number(canvas.dataset.layer)], head = Number(canvas.dataset.head);
      const kind = types.dominant[layer]?.[head];
      if (!kind) continue;
      const score = types.scores[layer][head];
      canvas.style.outline = `3px solid ${KIND_COLOURS[kind]}`;
      canvas.title += t(": {0}", `${kindOfHead(kind)} ${score.toFixed(2)}`);
      const label = element("div", { class: "head-type", "data-kind": kind }, `${kindOfHead(kind)} ${score.toFixed(2)}`);
      label.style.borderColor = KIND_COLOURS[kind];
      canvas.parentElement.appendChild(label);
    }
  }
  Object.assign(AL, { mountHeadTypes });
})(globalThis.attnlab ??= {});
