"""Attention rollout and attention flow (Abnar & Zuidema 2020, "Quantifying Attention Flow
in Transformers"): how much of each input token reaches each position after every layer,
through the weights of a traced model and its residual connections.

Both start from one matrix per layer, the residual attention

    Â_l = normalise_rows(0.5·I + 0.5·A_l),    A_l = the mean of the chosen heads' weights (L, L),

(the rows of 0.5·I + 0.5·A already sum to 1 where A's do; the renormalisation, as in the
paper, matters only where they do not: a sink took some weight, a row was fully masked).
Row i of Â_l is how position i after layer l mixes the positions before it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._progress import progress_bar
from .._validation import Array, fail, flag, is_integer, optional_callable
from ..runner._runner import layer_weights
from ..trace import ModelTrace
from ..viz._page import Traceable, traced

__all__ = ["FLOW_SCALE", "MAX_FLOW_PROBLEMS", "flow", "flow_length_limit", "residual_attention", "rollout"]

# flow's capacities are integers: Â·FLOW_SCALE rounded (see flow's docstring).
FLOW_SCALE = 2**24
# the most max-flow problems (layers·L²) that attnlab view --rollout and the live page solve:
# 64 tokens on 6 layers (MiniLM, 7–11 s), 28 on SmolLM2's 30 (about 14 s); minutes past it
MAX_FLOW_PROBLEMS = 6 * 64**2


def flow_length_limit(layers: int) -> int:
    """The most tokens whose flow over ``layers`` layers is at most MAX_FLOW_PROBLEMS
    max-flow problems: ⌊√(MAX_FLOW_PROBLEMS / layers)⌋."""
    return math.isqrt(MAX_FLOW_PROBLEMS // max(layers, 1))


def residual_attention(trace: ModelTrace | Traceable, heads: Sequence[int] | None = None, *, text: Any = None) -> Array:
    """Each layer's residual attention Â_l = normalise_rows(0.5·I + 0.5·A_l), A_l the mean
    of the chosen heads' weights, in float64.

    Args:
        trace: a model's trace with every layer traced (``model.trace(text)``,
            ``attnlab.hf.trace(model, text)``), self-attention only; or a model with ``text``
            (:func:`attnlab.load_model`'s, an :class:`attnlab.models.Model`), whose trace
            of every layer is read.
        heads: the heads to average in every layer, indices in 0..H − 1; None: all of them.
        text: the text a model runs on; None for a trace.

    Returns:
        (layers, L, L): [l, i, j] is how much position i after layer l takes from position j
        before it.

    Raises:
        ArgumentError: a trace with a layer missing, with cross-attention or an
            encoder-decoder model's entries, with weights that are not (H, L, L) or not
            finite; heads out of range, repeated or none; a model without a text, a trace
            with one.
        ArgumentTypeError: a trace that is not a ModelTrace and a subject that is neither a
            trace nor such a model (a transformers model: opened by :func:`attnlab.load_model`
            first), heads that are not integers.
    """
    weights = layer_weights(traced(trace, text))  # (layers, H, L, L)
    chosen = _heads(heads, weights.shape[1])
    A = weights[:, chosen].mean(axis=1)  # (layers, H', L, L) -> (layers, L, L)
    residual = 0.5 * np.eye(A.shape[-1]) + 0.5 * A
    return residual / residual.sum(axis=-1, keepdims=True)


def rollout(trace: ModelTrace | Traceable, *, heads: Sequence[int] | None = None, text: Any = None) -> Array:
    """Attention rollout: R_0 = Â_0 and R_l = Â_l · R_{l−1}, the product of the residual
    attention matrices (see :func:`residual_attention`) from the first layer up.

    Args:
        trace: a model's trace with every layer traced, self-attention only; or a model
            with ``text`` (see :func:`residual_attention`).
        heads: the heads averaged in every layer (indices in 0..H − 1); None: all.
        text: the text a model runs on; None for a trace.

    Returns:
        (layers, L, L) float64: [l, i, j] is the share of input token j in position i after
        layer l (each row sums to 1).

    Raises:
        ArgumentError, ArgumentTypeError: as :func:`residual_attention`.
    """
    residual = residual_attention(trace, heads, text=text)
    rolled = np.empty_like(residual)
    rolled[0] = residual[0]
    for layer in range(1, len(residual)):
        rolled[layer] = residual[layer] @ rolled[layer - 1]
    return rolled


def flow(
    trace: ModelTrace | Traceable,
    *,
    heads: Sequence[int] | None = None,
    text: Any = None,
    progress: bool = False,
    check: Callable[[], object] | None = None,
) -> Array:
    """Attention flow: the maximum flow from each input token to each position after each
    layer, over the layer graph whose nodes are the L positions before the first layer and
    after every layer, with an edge from position j at level l to position i at level l + 1
    of capacity Â_l[i, j] (see :func:`residual_attention`).

    The maximum flows are SciPy's (:func:`scipy.sparse.csgraph.maximum_flow`, Dinic's
    algorithm), which takes integer capacities: each is round(Â·2²⁴) (:data:`FLOW_SCALE`),
    so each is within 2⁻²⁵ of Â, and the flow, exact for the rounded capacities, is within
    m·2⁻²⁵ of the real-valued one, m the number of edges of a minimum cut (tested against a
    floating-point linear programme to 1e-6). The flows are not renormalised (the paper's
    code divides each position's row by its sum: ``f / f.sum(-1, keepdims=True)``). It solves
    layers·L² flow problems, each over up to (layers + 1)·L nodes and layers·L² edges: meant
    for short texts (on 2 shared cores: 0.6–0.9 s at 4 layers × 32 tokens, 2–4 s at 12 × 32, 7–11 s at 6 × 64).

    Args:
        trace: a model's trace with every layer traced, self-attention only; or a model
            with ``text`` (see :func:`residual_attention`).
        heads: the heads averaged in every layer (indices in 0..H − 1); None: all.
        text: the text a model runs on; None for a trace.
        progress: show a progress bar on stderr, flow problems solved of layers·L².
        check: called before each position's L flow problems (layers·L times); an
            exception it raises stops flow and is raised (the live page stops a request
            its reader replaced or left this way). None: nothing is called.

    Returns:
        (layers, L, L) float64: [l, i, j] is the maximum flow from input token j to position
        i after layer l, at most 1 (position i's incoming capacities sum to 1).

    Raises:
        ArgumentError, ArgumentTypeError: as :func:`residual_attention`; a ``progress``
            that is not a bool, a ``check`` that is not callable.
        MissingDependencyError: SciPy is not installed (``attnlab[models]``).
        Exception: whatever ``check`` raises.
    """
    from scipy.sparse.csgraph import maximum_flow

    show_progress = flag("progress", progress)
    optional_callable("check", check)
    residual = residual_attention(trace, heads, text=text)
    layers, L, _ = residual.shape
    capacities = np.rint(residual * FLOW_SCALE).astype(np.int32)  # (layers, L, L)
    flows = np.zeros((layers, L, L))
    with progress_bar(layers * L * L, "flow", "flow", enabled=show_progress) as bar:
        for layer in range(layers):
            graph = _layer_graph(capacities[: layer + 1])
            top = (layer + 1) * L
            for i in range(L):
                if check is not None:
                    check()
                for j in range(L):
                    flows[layer, i, j] = maximum_flow(graph, j, top + i, method="dinic").flow_value
                bar.update(L)
    return flows / FLOW_SCALE


def _layer_graph(capacities: Array) -> Any:
    """The capacities (n, L, L) as the sparse adjacency matrix of n + 1 levels of L nodes,
    node l·L + j for position j at level l: an edge from (l, j) to (l + 1, i) of capacity
    [l, i, j] where it is not 0."""
    from scipy.sparse import csr_matrix

    n, L, _ = capacities.shape
    level, i, j = np.nonzero(capacities)  # each (n, L, L) entry that is an edge
    size = (n + 1) * L
    return csr_matrix((capacities[level, i, j], (level * L + j, (level + 1) * L + i)), shape=(size, size))


def _heads(heads: Any, count: int) -> list[int]:
    """``heads`` as a list of distinct head indices in 0..count − 1; None: all."""
    if heads is None:
        return list(range(count))
    if isinstance(heads, (str, bytes)) or not isinstance(heads, Sequence) or not all(map(is_integer, heads)):
        raise fail("heads", "a sequence of head indices or None", repr(heads), TypeError)
    chosen = [int(h) for h in heads]
    if not chosen or len(set(chosen)) != len(chosen) or not all(0 <= h < count for h in chosen):
        raise fail("heads", f"distinct head indices in 0..{count - 1}, at least one", repr(heads))
    return chosen
