"""attnlab's engine as a transformers attention function: the one signature of
transformers' ``AttentionInterface``, every keyword it passes honoured or refused.

transformers calls ``attention_forward(module, query, key, value, attention_mask,
scaling=, dropout=, **kwargs)`` from inside each attention module, with query (B, H, L, E)
after RoPE, key (B, Hk, S, E) and value (B, Hk, S, Ev) after the cache, and expects the
output (B, L, H, Ev) and the weights (B, H, L, S) or None back. The mask is what the mask
function registered beside it made (``sdpa_mask``'s: bool, True = attend, (B, 1, L, S)),
a model's own float mask, or None with the module's ``is_causal``: then, as in
transformers' sdpa, a query block of L > 1 is causal (top left) and a decode step (L = 1)
is not.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._exceptions import UnsupportedModelError
from .._validation import fail
from ..engine._attention import Attention, attention, engine_problem, row_scale_backward
from ..engine._problem import sum_to_shape
from ..engine.variants import Rules
from ..engine.variants.sinks import sinks_gradient
from ._torch import from_numpy, heads_last_copy, model_type, to_numpy, torch, transformers

__all__ = ["EngineCall", "UnsupportedModelError", "attention_forward", "recorder"]


# Keywords that reach the attention function but do not change what it computes: the
# mask carries the window, the padding and the packed sequences (the mask function builds
# them from these, as for sdpa), and the rest are the cache's and the outputs' bookkeeping,
# with every keyword transformers' models take as ``TransformersKwargs`` (flash-attention's
# packed lengths apart: they are checked against the mask, see _packed) and flash-attention's
# ``deterministic`` (ModernBERT passes it to every backend; attnlab's backward is deterministic).
_PACKED = ("cu_seq_lens_q", "cu_seq_lens_k")
_BOOKKEEPING = frozenset(
    {
        "cache_position", "use_cache", "past_key_values", "past_key_value", "cache", "return_dict", "layer_idx",
        "token_type_ids", "sliding_window", "deterministic",
        *transformers.utils.generic.TransformersKwargs.__annotations__,
    }
    - set(_PACKED)
)  # fmt: skip


@dataclass(frozen=True)
class EngineCall:
    """One attention module's call, as the engine takes it (NumPy, the compute dtype):
    query (B, H, L, E), key (B, Hk, S, E), value (B, Hk, S, Ev), ``mask`` bool or float
    (broadcasting to (B, H, L, S)) or None, the variants as one :class:`Rules` (causal,
    softcap, the sinks (H,) as NumPy), and the other keywords of :func:`attnlab.attention`
    (scale, enable_gqa, dropout_p, rng, need_weights)."""

    module: Any
    query: Any
    key: Any
    value: Any
    mask: Any
    rules: Rules
    options: dict[str, Any]

    @classmethod
    def of(
        cls, module: Any, query: Any, key: Any, value: Any, mask: Any, per_head: tuple[Any, Any], rules: Rules,
        options: dict[str, Any],
    ) -> EngineCall:  # fmt: skip
        """The call of these tensors, as NumPy arrays (float16 and bfloat16 widened to float32),
        the per-head tensors (the sinks, the length scales: (H,) or None) joining ``rules``."""
        rules = _with_tensors(rules, *per_head)
        return cls(module, to_numpy(query), to_numpy(key), to_numpy(value), to_numpy(mask), rules, options)


def _with_tensors(rules: Rules, s_aux: Any, length_scale: Any) -> Rules:
    """``rules`` with the per-head tensors the module's call gave (the sinks ``s_aux``, the length scales), as NumPy."""
    rules = rules.replace(sinks=to_numpy(s_aux))
    return rules if length_scale is None else rules.replace(length_scale=to_numpy(length_scale))


# While attnlab.hf.trace runs, the function that records a call and returns its output
# (B, H, L, Ev) as NumPy; None otherwise.
recorder: contextvars.ContextVar[Callable[[EngineCall], np.ndarray] | None] = contextvars.ContextVar(
    "attnlab_hf_recorder", default=None
)


def attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    softcap: float | None = None,
    s_aux: Any = None,
    position_bias: Any = None,
    output_attentions: bool = False,
    length_scale: Any = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    """O = dropout(softmax(Z))·V on attnlab's engine, with Z = softcap(scaling·Q·Kᵀ) +
    position_bias + mask and the sinks ``s_aux`` in the softmax's sum: transformers'
    attention function (``attn_implementation="attnlab"``).

    Args:
        module: the attention module calling (its ``is_causal``, ``training``, config).
        query: (B, H, L, E), after RoPE.
        key: (B, Hk, S, E), H a multiple of Hk (GQA).
        value: (B, Hk, S, Ev).
        attention_mask: bool (True = attend) or float (added), broadcasting to (B, H, L, S), or None.
        dropout: the weights' dropout probability (transformers passes 0 outside training).
        scaling: the scores' multiplier; None: 1/√E.
        is_causal: overrides the module's ``is_causal``; causal applies only with no mask and L > 1.
        softcap: c: the scaled scores become c·tanh(Z / c) (Gemma 2).
        s_aux: one sink logit per query head, H values (gpt-oss's (H,)).
        position_bias: a float bias added to the scores, (1 or B, H, L, S) (T5).
        output_attentions: return the weights (B, H, L, S) too; so does transformers' output
            recorder collecting attentions, which some models never pass down.
        length_scale: Scalable-Softmax's s, one per query head (H,) (a tensor, with a
            gradient where it requires one): query i's dot products times s_h·log n_i
            (``engine.variants.length_scale``), for a model whose attention passes it.
        kwargs: the cache's and outputs' bookkeeping, which does not change the result, and
            flash-attention's ``cu_seq_lens_q``/``cu_seq_lens_k`` (one row of packed
            sequences: a key of another sequence is masked).

    Returns:
        (output (B, L, H, Ev) in query's dtype and device, weights (B, H, L, S) or None).

    Raises:
        UnsupportedModelError: a keyword attnlab cannot honour (any not named here, per-token
            sinks, packed lengths of a batch or a decode step), naming the model type and the keyword.
    """
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if not isinstance(tensor, torch.Tensor):
            raise fail(name, "a torch tensor", type(tensor).__name__, TypeError)
        if tensor.ndim != 4:
            raise fail(name, "a 4-D tensor (B, heads, length, width)", f"shape {tuple(tensor.shape)}")
    unknown = sorted(
        name for name, value in kwargs.items() if name not in _BOOKKEEPING and name not in _PACKED and value is not None
    )
    if unknown:
        raise UnsupportedModelError(
            f"{model_type(module)}: attnlab's attention cannot honour the keyword(s) {', '.join(unknown)}; "
            "load the model with attn_implementation='sdpa' or 'eager'"
        )
    B, H, L = query.shape[0], query.shape[1], query.shape[-2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and attention_mask is None and L > 1
    mask = attention_mask
    if mask is not None and mask.shape[-1] > key.shape[-2]:  # a static cache's mask, longer than the keys
        mask = mask[..., : key.shape[-2]]
    if any(kwargs.get(name) is not None for name in _PACKED):
        mask = _packed(module, kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k"), mask, B, L, key.shape[-2])
    if position_bias is not None:
        mask = _with_bias(position_bias, mask)
    if s_aux is not None and s_aux.numel() != H:  # per-token sinks: not one logit per head
        raise UnsupportedModelError(
            f"{model_type(module)}: attnlab's attention cannot honour s_aux of shape {tuple(s_aux.shape)} "
            f"(its sinks are one logit per query head, ({H},)); load the model with attn_implementation='eager'"
        )
    sinks = None if s_aux is None else s_aux.reshape(H)  # (H,)
    p = float(dropout) if getattr(module, "training", False) else 0.0
    if length_scale is not None and length_scale.numel() != H:
        raise UnsupportedModelError(
            f"{model_type(module)}: attnlab's attention cannot honour length_scale of shape "
            f"{tuple(length_scale.shape)} (one s per query head, ({H},))"
        )
    scales = None if length_scale is None else length_scale.reshape(H)  # (H,)
    rules = Rules(is_causal=causal, softcap=softcap)  # the sinks and length scales join it as NumPy (_with_tensors)
    options: dict[str, Any] = dict(
        scale=scaling, enable_gqa=query.shape[1] != key.shape[1], dropout_p=p, rng=_rng() if p > 0 else None,
        need_weights=_weights_wanted(output_attentions),
    )  # fmt: skip
    record = recorder.get()
    if record is not None:
        call = EngineCall.of(module, query, key, value, mask, (sinks, scales), rules, options)
        output = from_numpy(record(call), query)  # (B, H, L, Ev)
        return output.transpose(1, 2).contiguous(), None
    output, weights = _run_engine(query, key, value, mask, (sinks, scales), rules, options)
    return output.transpose(1, 2).contiguous(), weights  # (B, L, H, Ev)


def _with_bias(position_bias: Any, mask: Any) -> Any:
    """T5's relative bias as the float mask: the bias where the mask allows, −∞ where a
    bool mask rules a key out, the bias plus a float mask. Made with torch, so that the
    bias's gradient flows back through it."""
    if mask is None:
        return position_bias
    if mask.dtype == torch.bool:
        return torch.where(mask, position_bias, -float("inf"))  # broadcast: bias (1, H, L, S), mask (B, 1, L, S)
    return position_bias + mask


def _weights_wanted(output_attentions: bool) -> bool:
    """Whether the caller wants the weights back: ``output_attentions``, or transformers'
    output recorder collecting attentions (GPT-2, among others, records them from the
    attention module's output and never passes ``output_attentions`` down: without the
    weights the recorder silently drops the layer, and the model returns no attentions)."""
    if output_attentions:
        return True
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # a transformers without the recorder: output_attentions is passed down
        return False
    collecting = _active_collector.get()
    return bool(collecting) and any(key.endswith("attentions") for key in collecting)


def _rng() -> np.random.Generator:
    """The dropout's generator, seeded from torch's default generator: ``torch.manual_seed``
    makes a training run repeat, as it does with eager attention (the masks differ from
    torch's own, which no NumPy generator can replay)."""
    seed = int(torch.randint(0, 2**62, (1,)).item())
    return np.random.default_rng(seed)


def _packed(module: Any, cu_q: Any, cu_k: Any, mask: Any, B: int, L: int, S: int) -> Any:
    """flash-attention's packed sequences (``cu_seq_lens_q``/``_k``: the cumulative lengths
    of the sequences laid end to end in one row) as a (1, 1, L, S) bool mask, True within a
    sequence, combined with ``mask``: the same attention whatever the mask function made
    of ``position_ids`` (sdpa ignores the lengths and trusts the mask; so does attnlab, but
    a key of another sequence is never seen). Only one row of the same sequences for the
    queries and the keys (training, a prefill) can be read so.

    Raises:
        UnsupportedModelError: lengths of another form (a batch, a decode step), naming the model type.
    """
    same = cu_q is not None and cu_k is not None and cu_q.shape == cu_k.shape and bool((cu_q == cu_k).all())
    if not (same and B == 1 and L == S and int(cu_q[-1]) == L and int(cu_q[0]) == 0):
        raise UnsupportedModelError(
            f"{model_type(module)}: attnlab's attention cannot honour cu_seq_lens_q/cu_seq_lens_k other than "
            f"one row of the same packed sequences for queries and keys (got batch {B}, {L} queries, {S} keys); "
            "load the model with attn_implementation='sdpa' or 'eager'"
        )
    positions = torch.arange(L, device=cu_q.device)
    sequence = torch.bucketize(positions, cu_q[1:].to(positions.dtype), right=True)  # (L,) each token's sequence
    within = (sequence[:, None] == sequence[None, :]).view(1, 1, L, S)  # (1, 1, L, S)
    if mask is None:
        return within
    if mask.dtype == torch.bool:
        return mask & within
    return mask.masked_fill(~within, -float("inf"))


def _engine_call(call: EngineCall) -> Attention:
    return attention(call.query, call.key, call.value, attn_mask=call.mask, rules=call.rules, **call.options)


class _EngineFunction(torch.autograd.Function):
    """attnlab's forward and its own backward under torch's autograd: the gradients of
    query, key, value, a float mask (T5's bias) and the sinks, from :meth:`Attention.backward`,
    and those through the weights it returns (after dropout, as eager's) where the loss
    reads them (:func:`_weights_backward`).

    What it does for speed (``attnlab bench --hf``): query, key, value and dO go to the
    engine in C order (transformers' query after RoPE and the dO of its transposed output
    are strided views, over which the engine runs 0.1–0.2 ms slower than after a copy); the
    output is made in one copy whose memory is (B, L, H, Ev), so that transformers'
    ``transpose(1, 2).contiguous()`` copies nothing more; and a float mask of only 0 and −∞
    that needs no gradient (a model's own additive mask) goes to the engine as the bool
    mask it is (mask == 0), exactly the same scores, without the float mask's gradient in
    the backward.
    """

    @staticmethod
    def forward(
        ctx: Any, query: Any, key: Any, value: Any, mask: Any, s_aux: Any, length_scale: Any, rules: Any, options: Any
    ) -> Any:
        tensors = (query, key, value, mask, s_aux, length_scale)
        result, output, weights = _forward(*tensors, rules, options, ctx.needs_input_grad[3])
        ctx.result = result
        ctx.formats = tuple(None if x is None else (x.dtype, x.device) for x in tensors)
        ctx.options = options
        ctx.set_materialize_grads(False)  # an output the loss does not use: None, not zeros
        return output, weights

    @staticmethod
    def backward(ctx: Any, grad_output: Any, grad_weights: Any) -> Any:
        result: Attention = ctx.result
        pb = result.problem
        if grad_output is None:
            d_out = np.zeros(pb.output_shape, pb.result_dtype)
        else:
            d_out = to_numpy(grad_output, pb.result_dtype, contiguous=True)
        grads = result.backward(d_out)
        wanted = [grads.query, grads.key, grads.value, grads.attn_mask, grads.sinks, grads.length_scale]
        if grad_weights is not None:  # the weights returned to transformers are in the loss too
            extra = _weights_backward(result, to_numpy(grad_weights, pb.compute_dtype), ctx.options)
            wanted = [
                w if e is None else e.astype(pb.result_dtype) if w is None else w + e
                for w, e in zip(wanted, extra, strict=True)
            ]
        return (
            *(
                from_numpy(grad, like) if needed and grad is not None else None
                for grad, like, needed in zip(wanted, ctx.formats, ctx.needs_input_grad, strict=False)
            ),
            None,  # rules
            None,  # options
        )


def _weights_backward(result: Attention, grad_weights: np.ndarray, options: dict[str, Any]) -> list[Any]:
    """The gradients (dQ, dK, dV, the float mask's, the sinks', the length scales') of
    Σ dW∘W, W the weights returned (after dropout, as eager's: W = P∘M/(1 − p),
    P = softmax(Z)): with dP = dW∘M/(1 − p), dZ = P∘(dP − rowsum(P∘dP)) = W∘dW − P·rowsum(W∘dW),
    the float mask's gradient; then softcap's 1 − tanh² and the scale, into dQ' = dZ·K and
    dK = dZᵀ·Q' (summed over each GQA group), Q' = m∘Q the query rows the engines ran
    (``engine_problem``: dQ = m∘dQ' and the length scales' from dL/dm); the sinks'
    −Σ P_sink·rowsum(W∘dW); dV is 0 (masked keys have P = 0, and so dZ = 0)."""
    pb = result.problem
    dtype = pb.compute_dtype
    weights = np.asarray(result.weights, dtype)  # W, (B…, L, S)
    if pb.dropout_p > 0:  # P before the dropout: the same forward without it
        again = dict(options, dropout_p=0.0, rng=None, need_weights=True)
        call = EngineCall(None, pb.query, pb.key, pb.value, pb.mask, pb.rules.given, again)
        probabilities = np.asarray(_engine_call(call).weights, dtype)
    else:
        probabilities = weights
    applied = weights * grad_weights  # W∘dW = P∘dP
    row = applied.sum(axis=-1)  # rowsum(P∘dP), (B…, L)
    grad_scores = applied - probabilities * row[..., None]  # dZ, (B…, L, S)
    grad_mask = None
    if pb.mask is not None and pb.mask.dtype != bool:
        grad_mask = sum_to_shape(grad_scores, pb.mask.shape)
    key = pb.key if pb.groups == 1 else np.repeat(pb.key, pb.groups, axis=-3)  # (B…, S, E), H heads
    run, multiplier = engine_problem(pb)  # run.query: Q' = m∘Q with a row scale, else Q
    softcap = pb.rules["softcap"]
    if softcap is not None:
        scores = (run.query * np.asarray(pb.scale, dtype)) @ np.swapaxes(key, -1, -2)  # scale·Q'·Kᵀ
        capped = np.tanh(scores / softcap)
        grad_scores = grad_scores * (1.0 - capped * capped)
    grad_scores *= pb.scale
    grad_query, of_variants = row_scale_backward(pb, multiplier, grad_scores @ key)  # (B…, L, E)
    grad_key = np.swapaxes(grad_scores, -1, -2) @ run.query  # (B…, S, E), H heads
    if pb.groups > 1:
        *batch, H, S, E = grad_key.shape
        grad_key = grad_key.reshape(*batch, H // pb.groups, pb.groups, S, E).sum(axis=-3)
    sinks = pb.rules["sinks"]
    grad_sinks = None if sinks is None else sinks_gradient(sinks, result.lse, row, pb.slices, pb.heads)
    grad_query, grad_key = (
        grad if grad.shape == x.shape else sum_to_shape(grad, x.shape)
        for grad, x in ((grad_query, pb.query), (grad_key, pb.key))
    )
    return [grad_query, grad_key, None, grad_mask, grad_sinks, of_variants.get("length_scale")]


def _run_engine(
    query: Any, key: Any, value: Any, mask: Any, per_head: tuple[Any, Any], rules: Rules, options: dict[str, Any]
) -> tuple[Any, Any]:
    """(output (B, H, L, Ev), weights or None): :class:`_EngineFunction`, or, where no
    gradient can flow (``torch.no_grad``, ``inference_mode``, no input requiring one), the
    same forward without autograd's bookkeeping (0.1 ms a call)."""
    inputs = (query, key, value, mask, *per_head)  # per_head: the sinks and the length scales, (H,) or None
    if torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs):
        return tuple(_EngineFunction.apply(*inputs, rules, options))
    _, output, weights = _forward(*inputs, rules, options, mask_needs_grad=False)
    return output, weights


def _forward(
    query: Any, key: Any, value: Any, mask: Any, s_aux: Any, length_scale: Any, rules: Rules, options: dict[str, Any],
    mask_needs_grad: bool,
) -> tuple[Attention, Any, Any]:  # fmt: skip
    """The engine's forward on these tensors (the sinks ``s_aux`` and the length scales
    tensors (H,) or None): its result, the output (B, H, L, Ev) in query's dtype and
    device, whose memory is (B, L, H, Ev), and the weights or None."""
    q, k, v = (to_numpy(x, contiguous=True) for x in (query, key, value))
    rules = _with_tensors(rules, s_aux, length_scale)
    result = _engine_call(EngineCall(None, q, k, v, _engine_mask(mask, mask_needs_grad), rules, options))
    weights = None if result.weights is None else from_numpy(result.weights, query)
    return result, heads_last_copy(result.exact_output, query), weights


def _engine_mask(mask: Any, needs_grad: bool) -> Any:
    """The mask as the engine takes it: a float mask that needs no gradient and holds only
    0 and −∞ as the bool mask (mask == 0) that adds the same scores, so that the backward
    computes no gradient for it; any other mask as it is (NumPy)."""
    array = to_numpy(mask)
    if needs_grad or array is None or array.dtype == bool:
        return array
    allowed = array == 0
    return allowed if (allowed | np.isneginf(array)).all() else array
