"""A small training stack in NumPy, on attnlab's attention and its exact gradients: every
layer's forward returns its output and a function that carries its backward (see
:mod:`._modules`)."""

from ._modules import (
    RNN,
    AdamW,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    Parameter,
    SelfAttention,
    TransformerBlock,
    clip_grad_norm,
    cross_entropy,
    gelu,
)

__all__ = [
    "RNN",
    "AdamW",
    "Embedding",
    "LayerNorm",
    "Linear",
    "Module",
    "Parameter",
    "SelfAttention",
    "TransformerBlock",
    "clip_grad_norm",
    "cross_entropy",
    "gelu",
]
