"""Layers on the engine: the one module system (:class:`Module`, :class:`Parameter`, and
:class:`Forward`, the result of a forward that carries its backward), the one
:class:`Linear`, :class:`LayerNorm`/:class:`RMSNorm` and :class:`Embedding` (nn's and
the pretrained models'), the linear map and head split with their backwards, the seed's
single-head :class:`SelfAttention`, and torch's :class:`MultiheadAttention`."""

from ._embedding import Embedding
from ._linear import Linear, linear, linear_backward, merge_heads, split_heads
from ._module import Backward, Forward, Module, Parameter
from ._multihead import MultiheadAttention
from ._norm import LayerNorm, Norm, RMSNorm
from ._self_attention import SelfAttention

__all__ = [
    "Backward", "Embedding", "Forward", "LayerNorm", "Linear", "Module", "MultiheadAttention", "Norm", "Parameter",
    "RMSNorm", "SelfAttention", "linear", "linear_backward", "merge_heads", "split_heads",
]  # fmt: skip
