"""A small training stack in NumPy, on attnlab's attention and its exact gradients: every
layer's forward returns its output and a function that carries its backward.

Layers (:mod:`._layers`): Linear (torch's: W (out, in)), Embedding, LayerNorm, gelu (tanh
form, the one ``gelu_new``), RNN (tanh, backpropagation through time). Attention
(:mod:`._attention`): MultiheadSelfAttention (attnlab's engine forward and backward; the
layer the pretrained models' blocks hold too), TransformerBlock (BERT's
order: attention, residual, LayerNorm, feed-forward, residual, LayerNorm). Training
(:mod:`._training`): cross_entropy, AdamW, clip_grad_norm, train (the one training loop).
``SelfAttention`` is a deprecated alias of MultiheadSelfAttention.
"""

from typing import Any

from .._exceptions import deprecated
from . import _attention, _layers, _training
from ._attention import *  # noqa: F403 (each module's __all__)
from ._layers import *  # noqa: F403
from ._training import *  # noqa: F403

__all__ = [*_layers.__all__, *_attention.__all__, *_training.__all__]

_DEPRECATED = {"SelfAttention": "MultiheadSelfAttention"}


def __getattr__(name: str) -> Any:
    """The deprecated aliases, each with a DeprecationWarning; AttributeError for any other name."""
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        deprecated(f"attnlab.nn.{name}", f"attnlab.nn.{new}")
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
