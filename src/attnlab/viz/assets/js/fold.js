// attnlab view: a model view of many layers folds to fit one screen: past FOLD_PAST layers it shows the
// layer on show and up to AROUND layers either side, with a button "+ N more layers" that unfolds it (and
// folds it again). Folded, the rows follow the layer on show.
(function (AL) {
  "use strict";
  const { $, t } = AL;
  const FOLD_PAST = 6, AROUND = 2;
  // the layer positions a folded view shows: the window of 2·AROUND + 1 around `shown`, within 0..count − 1
  function foldedLayers(count, shown) {
    const first = Math.max(0, Math.min(shown - AROUND, count - (2 * AROUND + 1)));
    return Array.from({ length: Math.min(count, 2 * AROUND + 1) }, (_, k) => first + k);
  }
  function mountFold(app) {
    const rows = [...$("grid").querySelectorAll("tr[data-layer]")];
    if (rows.length <= FOLD_PAST) return;
    const button = document.createElement("button");
    button.type = "button";
    button.id = "fold";
    $("grid-box").after(button);
    let folded = true;
    const draw = (state) => {
      const shown = new Set(foldedLayers(rows.length, state.layer));
      rows.forEach((row) => { row.hidden = folded && !shown.has(Number(row.dataset.layer)); });
      button.textContent = folded ? t("+ {0} more layers", rows.length - shown.size) : t("fold to {0} layers", shown.size);
      button.setAttribute("aria-expanded", String(!folded));
    };
    button.addEventListener("click", () => { folded = !folded; draw(app.state); });
    app.store.register(["layer"], draw);
  }
  Object.assign(AL, { foldedLayers, mountFold });
})(globalThis.attnlab ??= {});
