"""Traces: every intermediate of one attention forward (:class:`Trace`) or of a model's
traced attention modules (:class:`ModelTrace`) or the statistics of every layer's weights
at any length (:class:`ModelStatistics`), as text, JSON and, through
:mod:`attnlab.viz`, a page."""

from ._build import build_trace
from ._display import register_notebook_html
from ._generation import GenerationTrace
from ._labels import LANGUAGES
from ._model_statistics import ModelStatistics
from ._model_trace import KINDS, ModelTrace
from ._trace import Trace
from ._variants import Variants

__all__ = [
    "KINDS",
    "LANGUAGES",
    "GenerationTrace",
    "ModelStatistics",
    "ModelTrace",
    "Trace",
    "Variants",
    "build_trace",
    "register_notebook_html",
]
