"""attnlab: scaled dot-product self-attention, from the seed article's pure-Python layer
to a NumPy engine with PyTorch's semantics and exact gradients.

The public names are re-exported here from private modules; ``attnlab.functional``,
``attnlab.reference``, ``attnlab.interop``, ``attnlab.models`` (pretrained checkpoints,
``pip install 'attnlab[models]'``), ``attnlab.nn`` (a small training stack),
``attnlab.distributed`` (ring attention on torch.distributed), ``attnlab.live`` (the live
page, ``attnlab.serve``) and ``attnlab.runner`` (a model opened as ``--model`` opens it,
``attnlab.load_model``) are public modules too. The design is in docs/design.md.
"""

import importlib.metadata as _metadata

from . import distributed, functional, interop, models, nn, reference
from ._exceptions import ArgumentError, ArgumentTypeError, AttnlabError, MissingDependencyError
from .engine.variants import Rules
from .functional import (
    Attention,
    Gradients,
    attention,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
    softmax,
)
from .layers import MultiheadAttention, SelfAttention
from .live import serve
from .runner import load_model
from .trace import Trace
from .viz import MissingFontWarning, plot, show, view, view_ablation

try:
    __version__ = _metadata.version("attnlab")
except _metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "Attention",
    "AttnlabError",
    "Gradients",
    "MissingDependencyError",
    "MissingFontWarning",
    "MultiheadAttention",
    "Rules",
    "SelfAttention",
    "Trace",
    "__version__",
    "attention",
    "distributed",
    "functional",
    "interop",
    "load_model",
    "models",
    "nn",
    "plot",
    "reference",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "serve",
    "show",
    "softmax",
    "view",
    "view_ablation",
]


def __dir__() -> list[str]:
    """The public API only: the layer packages (engine, layers, trace, viz, …) stay
    importable but out of ``dir(attnlab)`` and tab completion."""
    return sorted(__all__)


# Public names report where users find them: attnlab.Trace, not attnlab.trace._trace.Trace
# (help(attnlab.attention) says "in module attnlab").
for _public in (
    attention,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
    softmax,
    load_model,
    plot,
    serve,
    show,
    view,
    view_ablation,
    ArgumentError,
    ArgumentTypeError,
    Attention,
    AttnlabError,
    Gradients,
    MissingDependencyError,
    MissingFontWarning,
    MultiheadAttention,
    Rules,
    SelfAttention,
    Trace,
):
    _public.__module__ = __name__
del _public
