"""The one dispatch of the analyses that run a model (ablate, head_types): an attnlab
model runs in NumPy, a transformers model through attnlab.hf."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._validation import fail

__all__ = ["runner_for"]

R = TypeVar("R")


def runner_for(
    model: Any,
    tokenizer: Any,
    numpy: Callable[[Any], R],
    transformers: Callable[[Any, Any], R],
    argument: str,
    expected: str,
) -> R:
    """``numpy(model)`` for an :class:`attnlab.models.Model` (which has its own tokenizer:
    ``tokenizer`` must be None), ``transformers(model, tokenizer)`` for a transformers
    model; an ArgumentTypeError naming ``argument`` and ``expected`` for anything else."""
    from ..models._model import Model

    if isinstance(model, Model):
        if tokenizer is not None:
            raise fail("tokenizer", "None for an attnlab model (it has its own)", type(tokenizer).__name__)
        return numpy(model)
    if type(model).__module__.startswith("transformers.") and hasattr(model, "set_attn_implementation"):
        return transformers(model, tokenizer)
    raise fail(argument, expected, type(model).__name__, TypeError)
