"""Pictures of a trace: :func:`plot` (matplotlib, ``attnlab[viz]``) and the interactive
page (:func:`view`, :func:`show`, and a trace's Jupyter display, registered here)."""

from ..trace import register_notebook_html
from ._page import notebook_html, show, view, view_ablation
from ._plot import MissingFontWarning, plot

register_notebook_html(notebook_html)

__all__ = ["MissingFontWarning", "plot", "show", "view", "view_ablation"]
