"""One self-contained HTML page that shows a trace: scripts, styles and data inline,
nothing fetched from the network.

A trace is over one sequence of tokens or two (cross-attention: an encoder-decoder
model's decoder tokens on the rows, its encoder's on the columns); a model's page chooses
its entries by name, grouped by kind (encoder, decoder, cross). A vision model's page
carries its image (PNG, drawn by Pillow) and draws each patch as its token, with the
chosen query's attention over the image.

The page holds the raw scores Q·Kᵀ, the mask, and Q, K, V of every head, and the
variants the trace was built with (softcap, the bias of a float mask and ALiBi, the
sinks); it computes the weights itself as softmax(softcap(scale · scores) + bias) over
the unmasked keys, as the engine does, so that its scale slider can recompute them live.
Masked cells are drawn apart (grey, struck through), and the rules are said in a note.
"""

from __future__ import annotations

import html
import re
from importlib.resources import files
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from numpy.typing import ArrayLike

from .._json import json_text
from .._validation import MissingDependencyError, fail
from ..trace import GenerationTrace, ModelTrace
from ..trace._trace import Trace
from ._html import check_path, escaped, escaped_json
from ._page_data import check_lang, opening, page_data
from ._page_size import GIVEN_SCORES_UP_TO, PAGE_LIMITS, PageShape, check_page_size, encoding, page_bytes
from ._statistics_page import cap_of, render_statistics_page, statistics_of, statistics_opening, write_statistics_page
from ._views import Views, split_pair, views_data

__all__ = [
    "GIVEN_SCORES_UP_TO",
    "PAGE_LIMITS",
    "PageShape",
    "check_page_size",
    "check_path",
    "encoding",
    "notebook_html",
    "opening",
    "page_bytes",
    "page_data",
    "render_page",
    "show",
    "view",
    "view_ablation",
    "write_page",
]

_PLACEHOLDER = "__ATTNLAB_DATA__"


def render_page(
    trace: Trace | ModelTrace,
    opens: dict[str, int] | None = None,
    views: Views | None = None,
    *,
    lang: str = "en",
) -> str:
    """The HTML text: assets/page.html with page.css and the script (assets/js/) inline, opening on
    ``opens`` (:func:`opening`'s; default the trace's own), and the ``views`` beyond the
    trace's (:mod:`._views`: a second text, generated tokens, rollout and flow, an
    ablation) with views.css and assets/js/views/, its interface in ``lang`` ("en" or "zh").
    The data sits in JSON script blocks with '<', '>' and '&' escaped, so no token can end the
    block or inject markup; the scripts only ever write tokens as text."""
    check_page_size(trace)
    payload = json_text(page_data(trace, opens, lang))
    if len(payload) > PAGE_LIMITS["page"] + 10**6:  # masks of many runs a row, past page_bytes' estimate
        shape = PageShape.of(trace)
        raise fail(
            "trace", "a page that a browser opens in a few seconds",
            f"a page of {len(payload) / 1e6:.1f} MB, at most {PAGE_LIMITS['page'] / 1e6:g} MB: masks of many runs "
            f"a row; use fewer tokens" + (" or fewer layers" if shape.layers > 1 else ""),
        )  # fmt: skip
    return _filled_page(escaped(payload), escaped_json(views_data(trace, views)))


# the page's script: its modules (assets/js/), inlined in this order into one <script> (each adds what it
# offers to the one namespace object, globalThis.attnlab), then the views' (assets/js/views/) into another
PAGE_SCRIPTS = (
    "core", "i18n", "decoding", "maths", "colours", "state", "app", "heatmap", "headview", "steps", "image",
    "notes", "fold", "modelview", "controls", "exports", "answer", "main",
)  # fmt: skip
VIEWS_SCRIPTS = ("matrix", "pair", "generation", "flows", "ablation", "head_types", "main")
_STYLE_SLOTS = {"__ATTNLAB_STYLE__": "page.css", "__ATTNLAB_VIEWS_STYLE__": "views.css"}  # in page.html: its file
_SCRIPT_SLOTS = {
    "__ATTNLAB_SCRIPT__": [f"js/{name}.js" for name in PAGE_SCRIPTS],
    "__ATTNLAB_VIEWS_SCRIPT__": [f"js/views/{name}.js" for name in VIEWS_SCRIPTS],
}
_VIEWS_PLACEHOLDER = "__ATTNLAB_VIEWS_DATA__"
_SLOT = re.compile(
    "|".join(re.escape(slot) for slot in (*_STYLE_SLOTS, *_SCRIPT_SLOTS, _VIEWS_PLACEHOLDER, _PLACEHOLDER))
)


def asset_files() -> dict[str, str]:
    """Each file the page inlines (assets/…: page.css, views.css and the script's modules), by its path
    under assets, with its text."""
    assets = files("attnlab.viz") / "assets"
    names = [*_STYLE_SLOTS.values(), *(name for names in _SCRIPT_SLOTS.values() for name in names)]
    return {name: assets.joinpath(*name.split("/")).read_text(encoding="utf-8") for name in names}


def _filled_page(payload: str, views_payload: str = "null") -> str:
    """assets/page.html with page.css and views.css in its <style>s, the script's modules (PAGE_SCRIPTS,
    then VIEWS_SCRIPTS) in its <script>s, ``payload`` (escaped JSON) in its data block and
    ``views_payload`` in the views' block: one pass, so nothing filled in is searched for slots again (a
    token may read __ATTNLAB_SCRIPT__)."""
    text = asset_files()
    filling = {slot: text[name] for slot, name in _STYLE_SLOTS.items()}
    filling.update({slot: "".join(text[name] for name in names) for slot, names in _SCRIPT_SLOTS.items()})
    filling[_PLACEHOLDER] = payload
    filling[_VIEWS_PLACEHOLDER] = views_payload
    page = files("attnlab.viz") / "assets" / "page.html"
    return _SLOT.sub(lambda slot: filling[slot[0]], page.read_text(encoding="utf-8"))


def write_page(
    trace: Trace | ModelTrace,
    path: str | Path,
    opens: dict[str, int] | None = None,
    views: Views | None = None,
    *,
    lang: str = "en",
) -> None:
    """Write the page of ``trace`` to ``path`` (.html), opening on ``opens``, with ``views``, in
    ``lang`` (see :func:`render_page`)."""
    check_path(path).write_text(render_page(trace, opens, views, lang=lang), encoding="utf-8")


@runtime_checkable
class Traceable(Protocol):
    """A model the page can run: one that names the ``backend`` it runs on and gives its
    trace of a text, ``trace(text)`` (:func:`attnlab.load_model`'s runner, an
    :class:`attnlab.models.Model`); a layer's ``trace`` (of an array) is not one."""

    backend: str

    def trace(self, text: Any) -> Trace | ModelTrace: ...


# what a page, rollout and flow draw from: said when they are given something else
DRAWN = "a Trace, a ModelTrace, a pair of them, or a model from attnlab.load_model"


def traced(
    subject: Trace | ModelTrace | tuple[ModelTrace, ModelTrace] | Traceable, text: Any
) -> Trace | ModelTrace | tuple[ModelTrace, ModelTrace]:
    """The trace a page draws: ``subject`` itself (a trace, a pair), or a model's trace of ``text``.

    Raises:
        ArgumentError: a model without a text, or a text with a trace.
        ArgumentTypeError: ``subject`` none of these (named ``trace``; a transformers
            model: opened by :func:`attnlab.load_model` first).
    """
    if isinstance(subject, (Trace, ModelTrace, tuple)):
        if text is not None:
            raise fail("text", "None for a trace (it is drawn as it is); a text with a model", "a text")
        return subject
    if not isinstance(subject, Traceable):
        transformers = type(subject).__module__.startswith("transformers.")
        hint = " (a transformers model: attnlab.load_model(model, tokenizer=…) first)" if transformers else ""
        raise fail("trace", DRAWN + hint, type(subject).__name__, TypeError)
    if text is None:
        raise fail("text", "the text to run the model on", "None")
    return subject.trace(text)


def view(
    trace: Trace | ModelTrace | tuple[ModelTrace, ModelTrace] | Traceable,
    path: str | Path | None = None,
    *,
    text: Any = None,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    generation: GenerationTrace | None = None,
    rollout: ArrayLike | None = None,
    flow: ArrayLike | None = None,
    lang: str = "en",
    in_browser: bool = False,
) -> str | None:
    """The interactive page of ``trace``, self-contained: scripts, styles and data inline.

    Args:
        trace: an :class:`attnlab.Trace` or a model's :class:`attnlab.models.ModelTrace`;
            or a pair (A, B) of ModelTraces of two texts through one model (the same
            layers): A in the main views, and A and B side by side under the same layer
            and head with their difference where the tokens align (a longest common
            subsequence of the tokens, gaps of one length paired position by position).
            Or a model (:func:`attnlab.load_model`'s, an :class:`attnlab.models.Model`)
            with ``text``: the page of its trace; past the page of weights' cap (a head of
            at most PAGE_LIMITS["head_cells"] cells: 4,096 tokens), the statistics page of
            its :meth:`~attnlab.runner.Runner.statistics` instead, saying so at its top. Or
            an :class:`attnlab.trace.ModelStatistics`: its statistics page (every layer's
            and head's received attention, entropy, sink share, distance profile and role,
            a query's top keys).
        path: the .html file to write; None returns the page as HTML text.
        text: the text a model runs on (every layer); None for a trace.
        layer: the layer it opens on (a model's layer number, among the traced ones;
            the statistics page's: an index in 0..layers − 1).
        head: the head it opens on.
        query: the query it opens on (a token's position, 0..L−1; the statistics page's
            token, its top keys drawn and the text scrolled to it).
        generation: a :class:`attnlab.models.GenerationTrace` (``Model.trace_generation``,
            ``attnlab.hf.trace_generation``) of the tokens the trace is over: a view of
            each generated token's attention over everything before it.
        rollout: attention rollout over the trace's tokens, (layers, L, L) (as
            ``attnlab.analysis.rollout`` gives): a view of a layer's matrix and a query's row.
        flow: attention flow, (layers, L, L) (``attnlab.analysis.flow``), beside the rollout.
        lang: the language of the page's interface (headings, labels, buttons, notes):
            "en" (default) or "zh" (Simplified Chinese); the numbers and tokens are the same.
        in_browser: with a model (a BERT encoder: builtin:coref, all-MiniLM-L6-v2) and
            ``text``: the page carries the model's weights and tokenizer and runs it, opening
            on ``text``: its reader types a sentence and every view is recomputed in the
            browser, with a scale for every layer and heads to ablate (see
            :mod:`attnlab.viz._inpage`); no layer, head, query or other view with it.

    Each of layer, head and query left None is the trace's own (a model's answering head
    where its config names one, such as builtin:coref's layer 1, head 0 on the pronoun),
    else the first traced layer, head 0, query 0. A link's ``#layer=…&head=…&query=…`` wins
    over all of them.

    Raises:
        ArgumentError: a path that is not an .html file in an existing folder, a trace
            too large for a browser, a layer, head or query out of range, a view that
            does not fit the trace (see :func:`._views.views_data`), or a ``lang`` other
            than "en" or "zh"; a model without a ``text``, a trace with one.
        ArgumentTypeError: a trace, pair or generation of another type.
        ArgumentError: ``in_browser`` without a model and a text, with another view, or
            with a model the page cannot run (not a BERT encoder, or past the page's size).
    """
    if in_browser:
        return _in_browser(trace, path, text, lang, (layer, head, query, generation, rollout, flow))
    if (stats := statistics_of(trace, text)) is not None:  # past the page of weights: the statistics page
        for name, given in (("generation", generation), ("rollout", rollout), ("flow", flow)):
            if given is not None:
                raise fail(name, "None with a model's statistics (a page of weights' view)", type(given).__name__)
        opens, cap = statistics_opening(stats, layer, head, query), cap_of(stats)
        if path is None:
            return render_statistics_page(stats, lang=lang, opens=opens, cap=cap)
        write_statistics_page(stats, path, lang=lang, opens=opens, cap=cap)
        return None
    first, second = split_pair(traced(trace, text))
    _check_trace(first)
    if generation is not None and not isinstance(generation, GenerationTrace):
        raise fail("generation", "an attnlab.models.GenerationTrace", type(generation).__name__, TypeError)
    opens = opening(first, layer, head, query)
    views = Views(second, generation, rollout, flow)  # type: ignore[arg-type]  # views_data checks the arrays
    if path is None:
        return render_page(first, opens, views, lang=lang)
    write_page(first, path, opens, views, lang=lang)
    return None


def _in_browser(model: Any, path: str | Path | None, text: Any, lang: str, others: tuple[object, ...]) -> str | None:
    """:func:`view`'s page that runs ``model`` (:mod:`._inpage`), once nothing else is asked of it."""
    from ._inpage import DATA_SLOT, in_browser_page

    if not isinstance(model, Traceable) or not isinstance(text, str):
        raise fail("in_browser", "a model and a text (the page runs the model on what its reader types)",
                   f"{type(model).__name__} and text={text!r}")  # fmt: skip
    if any(x is not None for x in others):
        raise fail("in_browser", "no layer, head, query, generation, rollout or flow (the page runs every layer)",
                   "one of them")  # fmt: skip
    target = None if path is None else check_path(path)
    page = in_browser_page(model, text, _filled_page(DATA_SLOT), lang=lang)
    if target is None:
        return page
    target.write_text(page, encoding="utf-8")
    return None


def view_ablation(
    trace: ModelTrace,
    ablation: dict[str, Any],
    path: str | Path | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    lang: str = "en",
) -> str | None:
    """The page of ``trace`` with an ablation's layers × heads heatmap: each cell the
    effect of ablating that head, and a click on it opens that head in the main views.

    Args:
        trace: the model's trace of the ablated text (every layer, for every cell to open).
        ablation: ``{"effect": layers × heads floats (None: not ablated), "metric":
            "Δ log p(target)" or "KL", "target": a token or None, "mode": "zero", "mean"
            or "patch"}``, as ``attnlab.analysis.ablate(...).to_dict()`` gives (its other
            keys ignored).
        path: the .html file to write; None returns the page as HTML text.
        layer: the layer it opens on, as :func:`view` takes it.
        head: the head it opens on.
        query: the query it opens on.
        lang: the language of its interface, "en" (default) or "zh", as :func:`view` takes it.

    Raises:
        ArgumentError, ArgumentTypeError: what :func:`view` refuses, and an ablation of
            another shape than the model's layers × heads or with other fields.
    """
    if not isinstance(trace, ModelTrace):
        raise fail("trace", "an attnlab.models.ModelTrace", type(trace).__name__, TypeError)
    opens = opening(trace, layer, head, query)
    views = Views(ablation=ablation)
    if path is None:
        return render_page(trace, opens, views, lang=lang)
    write_page(trace, path, opens, views, lang=lang)
    return None


def _check_trace(trace: object) -> None:
    if not isinstance(trace, (Trace, ModelTrace)):
        raise fail("trace", "an attnlab.Trace or attnlab.models.ModelTrace", type(trace).__name__, TypeError)


def notebook_html(
    trace: Trace | ModelTrace,
    height: int = 900,
    opens: dict[str, int] | None = None,
    views: Views | None = None,
    *,
    lang: str = "en",
) -> str:
    """The page in a sandboxed iframe, for Jupyter, opening on ``opens``, with ``views``, in
    ``lang`` (see :func:`render_page`): its scripts run in an opaque origin that can reach
    neither the notebook nor the network."""
    return framed(render_page(trace, opens, views, lang=lang), height)


def framed(page: str, height: int = 900) -> str:
    """A page's HTML text in a sandboxed iframe ``height`` px high, for Jupyter: its scripts run in an
    opaque origin that can reach neither the notebook nor the network."""
    page = html.escape(page, quote=True)
    return (  # in a div: IPython warns about HTML that starts with <iframe
        f'<div><iframe sandbox="allow-scripts allow-downloads" srcdoc="{page}" title="attnlab view" '
        f'style="width: 100%; height: {height}px; border: 1px solid #ddd"></iframe></div>'
    )


def show(
    trace: Trace | ModelTrace | tuple[ModelTrace, ModelTrace] | Traceable,
    *,
    text: Any = None,
    layer: int | None = None,
    head: int | None = None,
    query: int | None = None,
    lang: str = "en",
    in_browser: bool = False,
) -> None:
    """Display the page of ``trace`` in a Jupyter notebook (IPython's display).

    Args:
        trace: an :class:`attnlab.Trace` or a model's :class:`attnlab.models.ModelTrace`,
            or a pair of ModelTraces of two texts, or a model with ``text`` (see :func:`view`).
        text: the text a model runs on; None for a trace.
        layer: the layer it opens on, as :func:`view` takes it.
        head: the head it opens on.
        query: the query it opens on.
        lang: the language of its interface, "en" (default) or "zh", as :func:`view` takes it.
        in_browser: the page that runs the model on what its reader types, as :func:`view` takes it.

    Raises:
        ArgumentError: a layer, head or query out of range, or another ``lang``, a model
            without a ``text``, ``in_browser`` with a model it cannot run (see :func:`view`).
        MissingDependencyError: IPython is not installed.
    """
    check_lang(lang)
    if in_browser:
        shown = framed(_in_browser(trace, None, text, lang, (layer, head, query)) or "", 1200)
    else:
        first, second = split_pair(traced(trace, text))
        _check_trace(first)
        shown = notebook_html(first, opens=opening(first, layer, head, query), views=Views(second), lang=lang)
    try:
        from IPython.display import HTML, display
    except ImportError:
        raise MissingDependencyError("attnlab.show needs IPython (Jupyter): pip install ipython") from None
    display(HTML(shown))
