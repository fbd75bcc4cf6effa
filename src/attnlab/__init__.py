"""attnlab: scaled dot-product self-attention, from the seed article's pure-Python layer
to a NumPy engine with PyTorch's semantics and exact gradients."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import interop, reference
from ._multihead import MultiheadAttention
from ._self_attention import SelfAttention
from ._trace import Trace
from .functional import (
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
    softmax,
)

try:
    __version__ = version("attnlab")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "MultiheadAttention",
    "SelfAttention",
    "Trace",
    "__version__",
    "interop",
    "reference",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "softmax",
]
