"""Attention rollout and flow for view --rollout and plot --stage rollout, computed by
``attnlab.analysis`` (imported only when asked for, so that every other command runs
without it)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .._validation import Array
from ..trace import ModelTrace
from ..trace._trace import Trace
from ._inputs import InputError

__all__ = ["check_rollout_size", "require_analysis", "rollout_and_flow"]


def require_analysis(option: str) -> tuple[Callable[..., Array], Callable[..., Array]]:
    """attnlab.analysis's rollout and flow; before any work, a one-line error where it is missing."""
    try:
        from ..analysis import flow, rollout
    except ImportError:
        raise InputError(
            f"{option}: attention rollout needs attnlab.analysis, which this attnlab does not have"
        ) from None
    return rollout, flow


def check_rollout_size(layers: int, tokens: int, option: str) -> None:
    """Refuse, before the model runs, a rollout (and its flow, where flow_length_limit takes
    the text) too large for the page's views: what ``rollout_and_flow`` would compute."""
    from ..analysis._rollout import flow_length_limit
    from ..viz._views import check_flows_size

    check_flows_size(layers, tokens, 2 if tokens <= flow_length_limit(layers) else 1, option)


def rollout_and_flow(trace: Trace | ModelTrace, option: str = "--rollout") -> tuple[Array, Array | None]:
    """The rollout (layers, L, L) of a model's trace of every layer, and its flow while the
    text takes at most MAX_FLOW_PROBLEMS max-flows, the live page's limit too (else None,
    said on standard error)."""
    rollout, flow = require_analysis(option)
    from ..analysis._rollout import flow_length_limit  # with analysis, which require_analysis found

    if not isinstance(trace, ModelTrace):
        raise InputError(f"{option}: expected --model (rollout runs over a model's layers), got a single layer")
    if len(trace.layers) != trace.num_layers:
        raise InputError(
            f"{option}: expected every layer traced (drop --layer), got {len(trace.layers)} of {trace.num_layers}"
        )
    check_rollout_size(trace.num_layers, len(trace.tokens), option)  # two texts, a generation: after their runs
    rolled = rollout(trace)
    limit = flow_length_limit(trace.num_layers)
    if len(trace.tokens) > limit:
        why = f"it solves L² max-flows per layer, minutes past {limit} tokens on {trace.num_layers} layers"
        print(f"attnlab: {option}: flow left out past {limit} tokens ({why})", file=sys.stderr)
        return rolled, None
    return rolled, flow(trace, progress=sys.stderr.isatty())
