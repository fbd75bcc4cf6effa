"""One self-contained HTML page that shows a trace: scripts, styles and data inline,
nothing fetched from the network.

The page holds the raw scores Q·Kᵀ, the mask, and Q, K, V of every head; it computes
the weights itself as softmax(scale · scores) over the unmasked keys, so that its scale
slider can recompute them live.
"""

from __future__ import annotations

import html
import json
from importlib.resources import files
from pathlib import Path

import numpy as np

from ._trace import Trace, json_ready
from ._validation import MissingDependencyError, fail, output_path
from .models import ModelTrace

__all__ = ["check_path", "notebook_html", "page_data", "render_page", "show", "view", "write_page"]

_PLACEHOLDER = "__ATTNLAB_DATA__"
_NUMBERS = {"scores": "scores", "q": "Q", "k": "K", "v": "V"}  # the page's name: the trace's
MAX_PAGE_BYTES = 64 * 2**20


def _with_heads(x: np.ndarray) -> np.ndarray:
    """A trace's array with its head axis, (H, L, ·), one head or many."""
    return x if x.ndim == 3 else x[None]


def page_data(trace: Trace | ModelTrace) -> dict[str, object]:
    """What the page needs, as JSON-ready values: the tokens, and per layer (one for a
    Trace) its name and numbers."""
    if isinstance(trace, ModelTrace):
        layers = [{"name": f"layer {i}", **_layer_data(t)} for i, t in trace.layers.items()]
        return {"tokens": trace.tokens, "title": f"{trace.model}: ", "layers": layers}
    return {"tokens": trace.labels, "title": "", "layers": [{"name": "", **_layer_data(trace)}]}


def _layer_data(trace: Trace) -> dict[str, object]:
    """One attention layer's numbers, as JSON-ready values."""
    scaled = _with_heads(trace.scaled_scores)  # (H, L, L)
    # masked: −∞ after the mask where the raw score was not −∞ already (that is overflow)
    masked = np.isneginf(scaled[0]) & ~np.isneginf(_with_heads(trace.scores)[0])
    numbers = {name: _with_heads(getattr(trace, field)) for name, field in _NUMBERS.items()}  # (H, L, ·) each
    non_finite = not all(np.isfinite(x).all() for x in numbers.values())
    return {
        "scale": trace.scale,
        "d_k": int(numbers["k"].shape[-1]),
        "masked": ["".join("1" if m else "0" for m in row) for row in masked],
        "non_finite": non_finite,  # then the numbers are encoded as a trace's JSON encodes them
        **{name: json_ready(x.tolist()) if non_finite else x.tolist() for name, x in numbers.items()},
    }


def render_page(trace: Trace | ModelTrace) -> str:
    """The HTML text. The data sits in a JSON script block with '<', '>' and '&'
    escaped, so no token can end the block or inject markup; the script only ever
    writes tokens as text."""
    payload = json.dumps(page_data(trace), ensure_ascii=False, allow_nan=False)  # non-finite: encoded
    size = len(payload.encode("utf-8"))
    if size > MAX_PAGE_BYTES:
        raise fail(
            "trace",
            f"a page of at most {MAX_PAGE_BYTES // 2**20} MiB of data (a browser cannot open more); "
            "use fewer tokens or heads",
            f"{size / 2**20:.0f} MiB",
        )
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    template = files("attnlab").joinpath("_view.html").read_text(encoding="utf-8")
    return template.replace(_PLACEHOLDER, payload)


def check_path(path: str | Path) -> Path:
    """``path`` as a Path, once it names an .html file in a folder that exists."""
    return output_path(path, (".html", ".htm"))


def write_page(trace: Trace | ModelTrace, path: str | Path) -> None:
    """Write the page of ``trace`` to ``path`` (.html)."""
    check_path(path).write_text(render_page(trace), encoding="utf-8")


def view(trace: Trace | ModelTrace, path: str | Path | None = None) -> str | None:
    """The interactive page of ``trace``: written to ``path`` (.html), or returned as HTML
    text when there is no path. Self-contained: scripts, styles and data inline.

    Raises:
        ArgumentError: a path that is not an .html file in an existing folder, or a trace
            too large for a browser.
    """
    if not isinstance(trace, (Trace, ModelTrace)):
        raise fail("trace", "an attnlab.Trace or attnlab.models.ModelTrace", type(trace).__name__, TypeError)
    if path is None:
        return render_page(trace)
    write_page(trace, path)
    return None


def notebook_html(trace: Trace | ModelTrace, height: int = 900) -> str:
    """The page in a sandboxed iframe, for Jupyter: its scripts run in an opaque origin
    that can reach neither the notebook nor the network."""
    page = html.escape(render_page(trace), quote=True)
    return (  # in a div: IPython warns about HTML that starts with <iframe
        f'<div><iframe sandbox="allow-scripts allow-downloads" srcdoc="{page}" title="attnlab view" '
        f'style="width: 100%; height: {height}px; border: 1px solid #ddd"></iframe></div>'
    )


def show(trace: Trace | ModelTrace) -> None:
    """Display the page of ``trace`` in a Jupyter notebook (IPython's display).

    Raises:
        MissingDependencyError: IPython is not installed.
    """
    if not isinstance(trace, (Trace, ModelTrace)):
        raise fail("trace", "an attnlab.Trace or attnlab.models.ModelTrace", type(trace).__name__, TypeError)
    try:
        from IPython.display import HTML, display
    except ImportError:
        raise MissingDependencyError("attnlab.show needs IPython (Jupyter): pip install ipython") from None
    display(HTML(notebook_html(trace)))
