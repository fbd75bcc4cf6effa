"""Opening a model: :func:`as_runner`, the runner of a model already made (an attnlab
model, a transformers model and its tokenizer, a runner)."""

from __future__ import annotations

from typing import Any

from .._validation import fail
from ._runner import Runner

__all__ = ["as_runner"]


def as_runner(model: Any, tokenizer: Any, argument: str, expected: str) -> Runner:
    """The runner of ``model``: itself where it is one (``attnlab.load_model``'s; then
    ``tokenizer`` must be None, it has its own), a :class:`NumpyRunner` for an
    :class:`attnlab.models.Model` (``tokenizer`` None), a :class:`TransformersRunner` for a
    transformers model and its ``tokenizer``.

    Raises:
        ArgumentTypeError: anything else, named ``argument``, ``expected`` said.
        ArgumentError: a tokenizer given with a model that has its own.
        UnsupportedModelError: a transformers model attnlab's backend cannot run, or an
            encoder-decoder model.
    """
    from ..models._model import Model

    if isinstance(model, Runner):
        if tokenizer is not None:
            raise fail("tokenizer", "None for a loaded model (it has its own)", type(tokenizer).__name__)
        return model
    if isinstance(model, Model):
        if tokenizer is not None:
            raise fail("tokenizer", "None for an attnlab model (it has its own)", type(tokenizer).__name__)
        from ._numpy import NumpyRunner

        return NumpyRunner(model)
    if type(model).__module__.startswith("transformers.") and hasattr(model, "set_attn_implementation"):
        from ._transformers import TransformersRunner  # torch, imported for a transformers model only

        return TransformersRunner(model, tokenizer)
    raise fail(argument, expected, type(model).__name__, TypeError)
