"""Conversion between ``attnlab.MultiheadAttention`` and ``torch.nn.MultiheadAttention``.

torch is imported only inside these functions; install it with
``pip install 'attnlab[torch]'``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validation import MissingDependencyError, fail
from .layers._multihead import MultiheadAttention

__all__ = ["from_torch", "to_torch"]

_DTYPES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("attnlab.interop needs PyTorch: pip install 'attnlab[torch]'") from None
    return torch


def _config(module: Any) -> dict[str, Any]:
    return dict(
        embed_dim=module.embed_dim,
        num_heads=module.num_heads,
        dropout=module.dropout,
        bias=module.in_proj_bias is not None,
        add_bias_kv=module.bias_k is not None,
        add_zero_attn=module.add_zero_attn,
        kdim=module.kdim,
        vdim=module.vdim,
        batch_first=module.batch_first,
    )


def from_torch(module: Any) -> MultiheadAttention:
    """A ``MultiheadAttention`` with the torch module's configuration, parameters,
    dtype and training mode.

    Args:
        module: a ``torch.nn.MultiheadAttention``.

    Raises:
        ArgumentTypeError: ``module`` is something else, or its parameters are not all
            float32 or all float64 (a float16 or bfloat16 module is refused, not widened:
            the layer computes in float32 or float64 only).
        MissingDependencyError: torch is not installed.
    """
    torch = _torch()
    if not isinstance(module, torch.nn.MultiheadAttention):
        raise fail("module", "a torch.nn.MultiheadAttention", type(module).__name__, TypeError)
    dtypes = {str(p.dtype).removeprefix("torch.") for p in module.parameters()}
    if len(dtypes) != 1 or not dtypes <= set(_DTYPES.values()):
        got = "parameters of dtype " + ", ".join(sorted(dtypes))
        raise fail("module", "a module with float32 or float64 parameters (all of one dtype)", got, TypeError)
    dtype = np.float64 if dtypes == {"float64"} else np.float32
    layer = MultiheadAttention(**_config(module), dtype=dtype)
    layer.load_state_dict({k: v.detach().cpu().numpy() for k, v in module.state_dict().items()})
    return layer.train(module.training)


def to_torch(layer: MultiheadAttention) -> Any:
    """A ``torch.nn.MultiheadAttention`` with the layer's configuration, parameters,
    dtype and training mode.

    Args:
        layer: an :class:`attnlab.MultiheadAttention`.

    Raises:
        ArgumentTypeError: ``layer`` is something else.
        MissingDependencyError: torch is not installed.
    """
    torch = _torch()
    if not isinstance(layer, MultiheadAttention):
        raise fail("layer", "an attnlab.MultiheadAttention", type(layer).__name__, TypeError)
    module = torch.nn.MultiheadAttention(
        layer.embed_dim,
        layer.num_heads,
        layer.dropout,
        layer.bias,
        layer.add_bias_kv,
        layer.add_zero_attn,
        layer.kdim,
        layer.vdim,
        layer.batch_first,
        dtype=getattr(torch, _DTYPES[layer.dtype]),
    )
    module.load_state_dict({k: torch.from_numpy(v) for k, v in layer.state_dict().items()})
    return module.train(layer.training)
