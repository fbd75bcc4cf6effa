"""torch, imported once for attnlab.hf, and the conversions between its tensors and the
engine's arrays: float16 and bfloat16 computed in float32, the results cast back."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import MissingDependencyError

try:
    import torch
    import transformers
except ImportError:
    raise MissingDependencyError("attnlab.hf needs PyTorch and transformers: pip install 'attnlab[hf]'") from None

__all__ = ["from_numpy", "to_numpy", "torch", "transformers"]


def to_numpy(tensor: Any, dtype: Any = None) -> Any:
    """A tensor's values as a NumPy array (None stays None): float32 and float64 as they
    are (no copy on the CPU), float16 and bfloat16 widened to float32, or ``dtype``."""
    if tensor is None:
        return None
    tensor = tensor.detach()
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.float()
    array = tensor.cpu().numpy()
    return array if dtype is None or array.dtype == bool else array.astype(dtype, copy=False)


def from_numpy(array: np.ndarray, like: Any) -> Any:
    """``array`` as a tensor of ``like``'s dtype and device (``like``: a tensor or a
    (dtype, device) pair)."""
    dtype, device = (like.dtype, like.device) if hasattr(like, "dtype") else like
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype=dtype, device=device)
