"""The pieces of a transformer block around attention: the activations and rotary position
embeddings, each as ``transformers`` computes it. The linear maps and the two norms are the
one :class:`~attnlab.layers.Linear` and :class:`~attnlab.layers.Norm` (LayerNorm, RMSNorm)
of attnlab.layers, over the memory-mapped weights (re-exported here); a pretrained network
calls their ``infer``, the forward without a backward.

Shapes: x (…, D) for a hidden state of width D; q and k (B, heads, L, head_dim) for RoPE.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import Array, MissingDependencyError, is_real
from ..layers import Linear, Norm
from ..layers._activation import gelu

__all__ = ["ACTIVATIONS", "Linear", "Norm", "Rope", "rope_frequencies", "rotate"]


def _gelu(x: Array) -> Array:
    """0.5·x·(1 + erf(x/√2)): BERT's exact GELU (``hidden_act="gelu"``)."""
    try:
        from scipy.special import erf
    except ImportError:  # pragma: no cover - scipy is in attnlab[models]
        raise MissingDependencyError("BERT's GELU needs scipy's erf: pip install 'attnlab[models]'") from None
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def _silu(x: Array) -> Array:
    """x·σ(x), written x / (1 + e^(−x)) (inf for large −x gives 0, not NaN), in one buffer."""
    y = np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(y, out=y)
    y += 1.0
    return np.divide(x, y, out=y)


def _relu(x: Array) -> Array:
    return np.maximum(x, 0)


def _gelu_tanh(x: Array) -> Array:
    """GPT-2's ``gelu_new``: the one tanh GELU, layers' (:func:`attnlab.nn.gelu`), without its backward."""
    return gelu(x).output


# transformers' ACT2FN names that these architectures use.
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "gelu": _gelu,
    "gelu_new": _gelu_tanh,
    "gelu_pytorch_tanh": _gelu_tanh,
    "silu": _silu,
    "swish": _silu,
    "relu": _relu,
}


def rope_frequencies(config: dict[str, Any], head_dim: int) -> Array:
    """RoPE's inverse frequencies θ^(−2i/head_dim), i < head_dim/2, in float64, with the
    Llama-3 rescaling when the config asks for it (``rope_type: llama3``).

    Reads both spellings: ``rope_parameters`` (transformers 5) and ``rope_theta`` with
    ``rope_scaling`` (the config.json of most checkpoints)."""
    from ._checkpoint import config_error

    try:
        params = dict(config.get("rope_scaling") or {})
        params.update(config.get("rope_parameters") or {})
        theta = _positive(params.get("rope_theta", config.get("rope_theta", 10000.0)))
        kind = params.get("rope_type", params.get("type", "default"))
        if kind == "llama3":
            factor, low, high, old_context = (
                _positive(params[key])
                for key in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
            )
    except (KeyError, TypeError, ValueError) as error:
        raise config_error(
            f"rope_parameters: expected rope_theta and, for llama3, factor, low_freq_factor, "
            f"high_freq_factor and original_max_position_embeddings as finite positive numbers ({error!r})"
        ) from None
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if kind == "default":
        return inv_freq
    if kind != "llama3":
        raise config_error(f"rope type {kind!r} is not supported; expected 'default' or 'llama3'")
    wavelength = 2 * math.pi / inv_freq
    scaled = np.where(wavelength > old_context / low, inv_freq / factor, inv_freq)
    medium = (wavelength >= old_context / high) & (wavelength <= old_context / low)
    with np.errstate(divide="ignore", invalid="ignore"):  # low == high: no medium band, its ramp never used
        smooth = (old_context / wavelength - low) / (high - low)
        return np.where(medium, (1 - smooth) * scaled / factor + smooth * scaled, scaled)


def _positive(value: Any) -> float:
    if not is_real(value) or not math.isfinite(value) or not value > 0:  # inf would make every frequency 0 or NaN
        raise ValueError(f"not a finite positive number: {value!r}")
    return float(value)


@dataclass(frozen=True)
class Rope:
    """Rotary position embedding: x·cos(pθ) + rotate_half(x)·sin(pθ) at position p, the
    two halves of each head's vector rotated as pairs (i, i + head_dim/2)."""

    inv_freq: Array  # (head_dim/2,), float64

    def tables(self, positions: Array, dtype: np.dtype) -> tuple[Array, Array]:
        """cos and sin of p·θ (L, head_dim/2) for positions (L,), computed in float64."""
        angles = np.asarray(positions, dtype=np.float64)[:, None] * self.inv_freq  # (L, head_dim/2)
        return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def rotate(x: Array, cos: Array, sin: Array) -> Array:
    """x (B, heads, L, head_dim) rotated by :meth:`Rope.tables`' cos and sin (L, head_dim/2)."""
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return np.concatenate((first * cos - second * sin, second * cos + first * sin), axis=-1)
