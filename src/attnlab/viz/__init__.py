"""Pictures of a trace: :func:`plot` (matplotlib, ``attnlab[viz]``) and the interactive
page (:func:`view`, :func:`show`, and a trace's Jupyter display, registered here);
:func:`font_families`, the fonts that draw a text, for one's own figures."""

from ..trace import register_notebook_html
from ._page import notebook_html, show, view, view_ablation
from ._plot import MissingFontWarning, font_families, plot

register_notebook_html(notebook_html)

__all__ = ["MissingFontWarning", "font_families", "plot", "show", "view", "view_ablation"]
