// attnlab serve, the live page: a text box over the page attnlab view writes. On Enter the text
// (with the second text, generated tokens, rollout, ablated heads) goes to the server, which traces
// it with its model and answers with the new page; the page is shown in the frame below, opening
// on the layer, head and query the reader had, scrolled where the reader was, its model view unfolded if
// it was (an ablation's click does not send the reader back to the top). Only the newest request's answer is shown: an
// older one is aborted here and dropped by the server if it has not run.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const settings = JSON.parse($("live-settings").textContent);
  const token = new URLSearchParams(location.search).get("token") ?? "";
  const client = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`; // this page, for the server
  const frame = $("page"), status = $("status"), note = $("answer-note");
  let number = 0, controller = null, ablated = [], shown = { text: null, ablated: [] }, opened = {}; // opened: the trace's own view
  let place = null; // where the reader was in the last page: its scroll and whether its model view was unfolded
  $("model").textContent = `· ${settings.model}`;
  $("text").value = settings.text;
  $("generate").max = settings.maxGenerate;
  $("flow-limit").textContent = settings.maxFlowTokens === null ? "" : `(flow up to ${settings.maxFlowTokens} tokens)`;

  function say(text, kind = "") {
    status.textContent = text;
    status.className = kind;
  }
  // the layer, head and query on show in the frame's page (window.attnlabView)
  function onShow() {
    const view = frame.contentWindow?.attnlabView;
    return view?.ready ? { layer: view.layer, head: view.head, query: view.query } : {};
  }
  // what the reader chose, kept by the next page: each of layer, head and query moved away from the
  // trace's own view (left there, the new page opens on its own: builtin:coref's on the new pronoun)
  function chosen() {
    const here = onShow();
    return Object.fromEntries(Object.entries(here).filter(([key, value]) => value !== opened[key]));
  }
  function request() {
    const text = $("text").value;
    if (text !== shown.text) ablated = []; // ablations belong to the text they were made on
    return {
      client, number: ++number, text, second: $("second").value.trim() === "" ? null : $("second").value,
      generate: Number($("generate").value) || 0, rollout: $("rollout").checked, ablate: ablated, ...chosen(),
    };
  }
  async function redraw() {
    const body = request(), mine = body.number;
    controller?.abort();
    controller = new AbortController();
    say("computing…", "busy");
    live.busy = true;
    let response, answer;
    try {
      response = await fetch("api/page", {
        method: "POST", body: JSON.stringify(body), signal: controller.signal,
        headers: { "Content-Type": "application/json", "X-Attnlab-Token": token },
      });
      answer = await response.json();
    } catch (error) {
      if (error.name === "AbortError" || mine !== number) return;
      say(`the server did not answer (${error.message}); is attnlab serve still running?`, "error");
      live.busy = false;
      return;
    }
    if (mine !== number || response.status === 409) return; // a newer request replaced this one
    live.busy = false;
    if (!response.ok) {
      say(answer.error ?? `the server answered ${response.status}`, "error");
      ablated = shown.ablated; // a head the model could not ablate is not asked for again
      live.errors += 1;
      return;
    }
    shown = { text: body.text, ablated };
    opened = answer.own;
    const before = frame.contentWindow, fold = frame.contentDocument?.getElementById("fold");
    place = before ? { x: before.scrollX, y: before.scrollY, unfolded: fold?.getAttribute("aria-expanded") === "true" } : null;
    frame.srcdoc = answer.page;
    say("");
    note.textContent = describe(answer);
    $("clear-ablation").hidden = ablated.length === 0;
    live.shown = { ...body, generated: answer.generated };
    live.answers += 1;
  }
  function describe(answer) {
    const parts = [...answer.notes];
    if (answer.generated !== null) parts.push(`generated: ${JSON.stringify(answer.generated)}`);
    const a = answer.ablation;
    if (a) {
      const metric = a.metric === "kl" ? "KL(p ‖ p ablated)" : `Δ log p(${JSON.stringify(a.target)})`;
      const effects = a.effect.flatMap((row, l) => row.flatMap((x, h) => (x === null ? [] : [`${l}.${h}: ${x.toFixed(4)}`])));
      parts.push(`ablated (${a.mode}) heads, ${metric} of the next token after the text (predicted unablated: ` +
        `${JSON.stringify(a.predicted)}): ${effects.join(", ")}`);
    }
    return parts.join(" · ");
  }
  // a click on a head of the model view (which opens it) also ablates it, when the box says so
  frame.addEventListener("load", () => {
    if (place?.unfolded) frame.contentDocument.getElementById("fold")?.click();
    if (place) frame.contentWindow.scrollTo(place.x, place.y);
    const grid = frame.contentDocument?.getElementById("grid");
    grid?.addEventListener("click", () => {
      if (!$("ablate-mode").checked) return;
      const { layer, head } = onShow();
      if (layer === undefined || ablated.some(([l, h]) => l === layer && h === head)) return;
      ablated = [...ablated, [layer, head]];
      redraw();
    });
  });
  $("form").addEventListener("submit", (event) => { event.preventDefault(); redraw(); });
  $("clear-ablation").addEventListener("click", () => { ablated = []; redraw(); });
  const live = { ready: true, busy: false, answers: 0, errors: 0, shown: null, redraw };
  window.attnlabServe = live;
  redraw();
})();
