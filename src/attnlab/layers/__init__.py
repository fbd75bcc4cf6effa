"""Layers on the engine: the linear map and head split with their backwards, the seed's
single-head :class:`SelfAttention`, and torch's :class:`MultiheadAttention`."""

from ._linear import linear, linear_backward, merge_heads, split_heads
from ._multihead import MultiheadAttention
from ._self_attention import SelfAttention

__all__ = ["MultiheadAttention", "SelfAttention", "linear", "linear_backward", "merge_heads", "split_heads"]
