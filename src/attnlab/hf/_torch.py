"""torch, imported once for attnlab.hf, and the conversions between its tensors and the
engine's arrays: float16 and bfloat16 computed in float32, the results cast back."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import MissingDependencyError
from ..trace._display import shown_name

try:
    import torch
    import transformers
except ImportError:
    raise MissingDependencyError("attnlab.hf needs PyTorch and transformers: pip install 'attnlab[hf]'") from None

__all__ = ["from_numpy", "heads_last_copy", "model_name", "model_type", "to_numpy", "torch", "transformers"]


def model_type(model: Any) -> str:
    """What the messages call a transformers model or module: its config's ``model_type``
    ("gpt2"), or its class's name when it has none."""
    return str(getattr(getattr(model, "config", None), "model_type", None) or type(model).__name__)


def model_name(model: Any) -> str:
    """A transformers model's name, as a trace or an ablation records it: the hub id or
    folder or file it was loaded from, by its own name (:func:`shown_name`), else its
    config's ``model_type``."""
    return shown_name(str(getattr(model.config, "_name_or_path", "") or model.config.model_type))


def to_numpy(tensor: Any, dtype: Any = None, *, contiguous: bool = False) -> Any:
    """A tensor's values as a NumPy array (None stays None): float32 and float64 as they
    are (no copy on the CPU), float16 and bfloat16 widened to float32, or ``dtype``.
    ``contiguous``: in C order, copied by NumPy if the tensor is a strided view, as
    transformers' query (B, H, L, E) after RoPE is of a (B, L, H, E) buffer: the engine's
    products over a strided slice cost it more than the copy. NumPy copies on the calling
    thread; torch's copy would first wake its OpenMP threads, asleep while the engine ran,
    which costs more than the copy itself."""
    if tensor is None:
        return None
    tensor = tensor.detach()
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    array = tensor.cpu().numpy()
    if contiguous:
        array = np.ascontiguousarray(array)
    return array if dtype is None or array.dtype == bool else array.astype(dtype, copy=False)


def from_numpy(array: np.ndarray, like: Any) -> Any:
    """``array`` as a tensor of ``like``'s dtype and device (``like``: a tensor or a
    (dtype, device) pair)."""
    dtype, device = (like.dtype, like.device) if hasattr(like, "dtype") else like
    return torch.from_numpy(np.require(array, requirements=("C", "W"))).to(dtype=dtype, device=device)


def heads_last_copy(array: np.ndarray, like: Any) -> Any:
    """A (B, H, L, Ev) array as a tensor of ``like``'s dtype and device whose memory is
    (B, L, H, Ev): the one copy made, in the layout transformers' attention output is
    transposed to, so that its ``transpose(1, 2).contiguous()`` copies nothing."""
    dtype, device = (like.dtype, like.device) if hasattr(like, "dtype") else like
    heads_last = np.swapaxes(array, -3, -2).copy()  # (B, L, H, Ev), always our own (a decode step's is C order already)
    return torch.from_numpy(heads_last).transpose(-3, -2).to(dtype=dtype, device=device)  # (B, H, L, Ev) view
