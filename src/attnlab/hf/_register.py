"""attnlab under the name "attnlab" in transformers' two registries: the attention
function and, beside it, the mask function (without one transformers would hand the
function ``attention_mask=None`` and the padding would be lost)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from typing import Any

from ._backend import UnsupportedModelError, attention_forward
from ._torch import transformers

__all__ = ["NAME", "check_model", "register"]

NAME = "attnlab"


def register() -> None:
    """Register attnlab's attention function and sdpa's mask function (bool, True =
    attend, or None where ``is_causal`` says it) as ``attn_implementation="attnlab"``.
    Importing ``attnlab.hf`` calls it; calling it again changes nothing.

    Raises:
        MissingDependencyError: torch or transformers is not installed (``attnlab[hf]``).
    """
    from transformers.masking_utils import sdpa_mask

    transformers.AttentionInterface.register(NAME, attention_forward)
    transformers.AttentionMaskInterface.register(NAME, sdpa_mask)


def check_model(model: Any) -> None:
    """Refuse a model whose attention does not go through transformers' attention
    interface (Falcon's, for one): it would accept ``attn_implementation="attnlab"`` and
    silently run its own attention instead. Each attention module that holds no other
    (BertSelfAttention, not BertAttention around it) must dispatch through the interface.

    Args:
        model: a transformers ``PreTrainedModel``.

    Raises:
        UnsupportedModelError: naming the model type and the attention class that does not.
    """
    model_type = getattr(model.config, "model_type", type(model).__name__)
    attentions = {type(m) for m in model.modules() if _is_attention(m) and not any(map(_is_attention, _below(m)))}
    bypassing = sorted(cls.__name__ for cls in attentions if not _dispatches(cls))
    if not attentions:
        raise UnsupportedModelError(f"{model_type}: no attention module, so nothing for attnlab to run or trace")
    if bypassing:
        raise UnsupportedModelError(
            f"{model_type}: {', '.join(bypassing)} computes attention in its own code, not through transformers' "
            "attention interface, so attnlab cannot run it (attn_implementation='attnlab' would be ignored)"
        )


def _is_attention(module: Any) -> bool:
    return "Attention" in type(module).__name__


def _below(module: Any) -> Iterator[Any]:
    modules = module.modules()
    next(modules)  # the module itself
    return modules


def _dispatches(cls: type) -> bool:
    """Whether the class's forward looks its attention function up in transformers'
    interface (its source names ALL_ATTENTION_FUNCTIONS; without the source, its module)."""
    try:
        return _INTERFACE in inspect.getsource(cls.forward)  # type: ignore[attr-defined]
    except (OSError, TypeError):
        return _INTERFACE in vars(sys.modules[cls.__module__])


_INTERFACE = "ALL_ATTENTION_FUNCTIONS"
