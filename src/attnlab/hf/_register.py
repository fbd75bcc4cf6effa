"""attnlab under the name "attnlab" in transformers' two registries: the attention
function and, beside it, the mask function (without one transformers would hand the
function ``attention_mask=None`` and the padding would be lost)."""

from __future__ import annotations

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
    silently run its own attention instead.

    Args:
        model: a transformers ``PreTrainedModel``.

    Raises:
        UnsupportedModelError: naming the model type.
    """
    if not type(model).is_backend_compatible():
        model_type = getattr(model.config, "model_type", type(model).__name__)
        raise UnsupportedModelError(
            f"{model_type}: this architecture computes attention in its own code, not through transformers' "
            "attention interface, so attnlab cannot run it (attn_implementation='attnlab' would be ignored)"
        )
