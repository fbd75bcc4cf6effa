"""Multi-head attention with ``torch.nn.MultiheadAttention``'s constructor, forward,
parameter names and shapes, plus an exact backward.

    head_h = attention(query·Wq_hᵀ + bq_h, key·Wk_hᵀ + bk_h, value·Wv_hᵀ + bv_h)
    output = concat(head_1 … head_H)·Woᵀ + bo

Shapes, with torch's letter N for the batch: N batch, L query length, S key length,
D = embed_dim, H heads of E = D/H each, Dk = kdim, Dv = vdim. query (L, N, D), or
(N, L, D) with ``batch_first``, or (L, D) unbatched; key (S, N, Dk) and value (S, N, Dv)
likewise. Inside, everything is batch first, and S' counts the keys after appending
bias_k and the zero row.

Masks follow torch's MultiheadAttention: a bool ``key_padding_mask`` or ``attn_mask`` is
True where a key is to be *ignored*; a float mask is added to the scores.
``is_causal=True`` applies the causal mask itself (combined with ``attn_mask`` if one is
given); torch instead requires ``attn_mask`` and takes ``is_causal`` as a hint. A query
whose keys are all masked gives output bo (the attention part is 0) and weights 0, where
torch returns NaN: on purpose.

The forward also takes the engine's variants (keyword-only, torch has none of them):
``window``, ``causal_alignment``, ``softcap``, ``alibi_slopes``, ``sinks`` and
``mask_mod``, passed to :func:`attnlab.attention` as they are. ``mask_mod`` has
FlexAttention's polarity, True where a query *may* attend: the opposite of this layer's
bool masks. The keys appended by ``add_bias_kv`` and ``add_zero_attn`` have no position:
``is_causal`` and ``window`` never mask them (the band is then built over the S real
keys, its offset S − L with "bottom_right"), and ALiBi and ``mask_mod``, which would need
their positions, are refused with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._validation import (
    Array,
    array_of,
    fail,
    fits_in_memory,
    flag,
    float_array,
    int_seed,
    layer_dtype,
    positive_int,
    probability,
)
from ..engine._attention import Attention, Gradients, attention
from ..engine._problem import sum_to_shape
from ..engine.variants import Alignment, Band, MaskMod, Rules, offset
from ..engine.variants.window import check_window
from ..trace._build import build_trace
from ..trace._trace import Trace
from ._linear import linear, linear_backward, merge_heads, split_heads
from ._module import Module, Parameter

__all__ = ["MultiheadAttention"]


def _initial_parameters(
    rng: np.random.Generator, D: int, Dk: int, Dv: int, bias: bool, add_bias_kv: bool
) -> dict[str, Array]:
    """torch's initialisation, drawn from ``rng``: Xavier-uniform projections, zero
    biases, Xavier-normal bias_k and bias_v, and out_proj as torch.nn.Linear."""

    def xavier_uniform(fan_out: int, fan_in: int) -> Array:  # U(−a, a), a = √(6 / (fan_in + fan_out))
        bound = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-bound, bound, size=(fan_out, fan_in))

    params: dict[str, Array] = {}
    if Dk == D and Dv == D:
        params["in_proj_weight"] = xavier_uniform(3 * D, D)
    else:
        params["q_proj_weight"] = xavier_uniform(D, D)
        params["k_proj_weight"] = xavier_uniform(D, Dk)
        params["v_proj_weight"] = xavier_uniform(D, Dv)
    if bias:
        params["in_proj_bias"] = np.zeros(3 * D)
    if add_bias_kv:  # xavier_normal_ on (1, 1, D): std = √(2 / (D + D))
        params["bias_k"] = rng.normal(0.0, np.sqrt(1.0 / D), size=(1, 1, D))
        params["bias_v"] = rng.normal(0.0, np.sqrt(1.0 / D), size=(1, 1, D))
    bound = 1.0 / np.sqrt(D)  # torch.nn.Linear's kaiming_uniform_(a=√5)
    params["out_proj.weight"] = rng.uniform(-bound, bound, size=(D, D))
    if bias:
        params["out_proj.bias"] = np.zeros(D)
    return params


def _additive(name: str, mask: Any, dtype: np.dtype) -> Array:
    """A MultiheadAttention mask as scores to add: bool True (= ignore) becomes −inf."""
    mask = array_of(name, mask)
    if mask.dtype == bool:
        return np.where(mask, -np.inf, 0.0).astype(dtype)
    if mask.dtype.kind != "f":
        raise fail(name, "a bool array (True = ignore) or a float array (added)", f"dtype {mask.dtype}", TypeError)
    return mask.astype(dtype)


def _combined_mask(
    attn_mask: Any, key_padding_mask: Any, band: Array | None, shape: tuple[int, int, int, int], extra: int, dtype: Any
) -> Array | None:
    """All masks as one additive mask (N or 1, H or 1, L, S + extra) for attention of
    ``shape`` (N, H, L, S), ``band`` the (L, S) keys that is_causal and the window allow
    (None: all); the ``extra`` appended key columns are never masked."""
    N, H, L, S = shape
    total = None
    if attn_mask is not None:
        mask = _additive("attn_mask", attn_mask, dtype)
        if mask.shape not in ((L, S), (N * H, L, S)):
            raise fail("attn_mask", f"shape ({L}, {S}) or ({N * H}, {L}, {S})", f"shape {mask.shape}")
        total = mask.reshape(-1, H, L, S) if mask.ndim == 3 else mask  # (N, H, L, S) or (L, S)
    if key_padding_mask is not None:
        mask = _additive("key_padding_mask", key_padding_mask, dtype)
        if mask.shape != (N, S) and not (N == 1 and mask.shape == (S,)):  # torch takes (S,) unbatched
            raise fail("key_padding_mask", f"shape ({N}, {S})", f"shape {mask.shape}")
        padding = mask.reshape(N, 1, 1, S)  # (N, 1, 1, S)
        total = padding if total is None else total + padding
    if band is not None:
        allowed = np.where(band, 0.0, -np.inf).astype(dtype)  # (L, S)
        total = allowed if total is None else total + allowed
    if total is None or not extra:
        return total
    return np.concatenate([total, np.zeros((*total.shape[:-1], extra), dtype)], axis=-1)  # (…, L, S + extra)


@dataclass(frozen=True)
class _Forward:
    """One forward of the layer: what it returned and what its backward needs (the
    engine's convention: the result carries its backward, here the layer's)."""

    layer: MultiheadAttention

    inputs: tuple[Array, Array, Array]  # query (N, L, D), key (N, S, Dk), value (N, S, Dv)
    attention: Attention  # over heads q (N, H, L, E), k and v (N, H, S', E)
    merged: Array  # the heads' outputs side by side, (N, L, D)
    output: Array  # (N, L, D)
    batched: bool
    float_mask_shape: tuple[int, ...] | None  # the caller's float attn_mask's, (L, S) or (N·H, L, S)

    def backward(self, grad_output: Any) -> tuple[Gradients, dict[str, Array]]:
        """The input gradients and one gradient per parameter (see :meth:`MultiheadAttention.backward`)."""
        return self.layer._backward(self, grad_output)

    def mask_gradient(self, grad: Array | None) -> Array | None:
        """The gradient of the caller's float attn_mask, in its shape, from that of the mask
        the engine was given (the sum of every mask, (…, L, S'): the appended keys dropped)."""
        shape = self.float_mask_shape
        if shape is None or grad is None:
            return None
        grad = grad[..., : self.inputs[1].shape[1]]  # the S real keys, (…, L, S)
        if len(shape) == 2:
            return sum_to_shape(grad, shape)  # (L, S)
        N, H = self.attention.problem.batch_shape
        return np.broadcast_to(grad, (N, H, *grad.shape[-2:])).reshape(shape).copy()  # (N·H, L, S)


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention in NumPy, with ``backward``; masks as in the module's docstring.

    Its parameters are :class:`Parameter` objects under torch's names, in ``dtype``
    (``named_parameters``, ``parameters``, ``zero_grad`` and the training mode are the one
    :class:`Module`'s), with ``state_dict``/``load_state_dict``; ``grads`` holds the
    gradients of the last backward by name.

    Args:
        embed_dim: D.
        num_heads: H, a divisor of D.
        dropout: the probability of zeroing an attention weight, in training only.
        bias: biases in the input and output projections.
        add_bias_kv: a learned row appended to the keys and values.
        add_zero_attn: a zero row appended after the heads split.
        kdim: the width of key (default D).
        vdim: the width of value (default D).
        batch_first: (N, L, D) instead of (L, N, D).
        seed: keyword-only, not torch's: the seed of ``generator``, which draws the
            initial weights and then the dropout masks.
        dtype: keyword-only, not torch's: float32 (default) or float64.

    Raises:
        ValueError, TypeError: an argument that cannot be used, named in the message.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        *,
        seed: int | None = None,
        dtype: Any = np.float32,
    ) -> None:
        self.embed_dim = positive_int("embed_dim", embed_dim)
        self.num_heads = positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise fail("num_heads", f"a divisor of embed_dim={embed_dim}", num_heads)
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else positive_int("kdim", kdim)
        self.vdim = embed_dim if vdim is None else positive_int("vdim", vdim)
        self.dropout = probability("dropout", dropout)
        self.bias, self.add_bias_kv = flag("bias", bias), flag("add_bias_kv", add_bias_kv)
        self.add_zero_attn, self.batch_first = flag("add_zero_attn", add_zero_attn), flag("batch_first", batch_first)
        self.dtype = layer_dtype(dtype)
        numbers = embed_dim * (2 * embed_dim + self.kdim + self.vdim)  # q, out (D, D); k (D, kdim); v (D, vdim)
        per_number = 8 + self.dtype.itemsize  # drawn as float64, kept in the layer's dtype
        how = f"{numbers:,} numbers, {per_number} bytes each (drawn as float64, kept as {self.dtype})"
        fits_in_memory("embed_dim", "weights (4 projections of embed_dim rows)", numbers * per_number, how)
        self.training = True
        self.generator = np.random.default_rng(None if seed is None else int_seed("seed", seed))
        params = _initial_parameters(self.generator, embed_dim, self.kdim, self.vdim, self.bias, self.add_bias_kv)
        self._params: dict[str, Parameter] = {k: Parameter(v.astype(self.dtype)) for k, v in params.items()}
        self._last: _Forward | None = None

    def __repr__(self) -> str:
        return f"MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads}, dtype={self.dtype})"

    @property
    def grads(self) -> dict[str, Array]:
        """The gradient of each parameter under torch's names, as the last backward set
        them (``zero_grad`` zeroes them; empty before any backward)."""
        return {name: p.grad for name, p in self._params.items() if p._grad is not None}

    def _arrays(self) -> dict[str, Array]:
        """The parameters' arrays under torch's names (the live ones)."""
        return {name: p.value for name, p in self._params.items()}

    def state_dict(self) -> dict[str, Array]:
        """Copies of the parameters under torch's names and shapes."""
        return {k: v.copy() for k, v in self._arrays().items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace every parameter; names and shapes must be exactly this layer's.

        Args:
            state: torch's names to arrays, as :meth:`state_dict` gives them.

        Raises:
            ValueError: a name missing or unknown, or a shape that is not this layer's.
        """
        for name, value in _checked_state(state, self._arrays(), self.dtype).items():
            self._params[name].value = value

    def __call__(
        self, query: ArrayLike, key: ArrayLike, value: ArrayLike, key_padding_mask: ArrayLike | None = None,
        need_weights: bool = True, attn_mask: ArrayLike | None = None, average_attn_weights: bool = True,
        is_causal: bool = False, *, window: tuple[int | None, int | None] | None = None,
        causal_alignment: Alignment = "top_left", softcap: float | None = None, alibi_slopes: ArrayLike | None = None,
        sinks: ArrayLike | None = None, mask_mod: MaskMod | None = None, rules: Rules | None = None,
    ) -> tuple[Array, Array | None]:  # fmt: skip
        """Return ``(output, weights)``: output like query; weights (N, L, S') averaged
        over heads or (N, H, L, S') per head (without N when unbatched), None unless
        ``need_weights``. The forward is kept for :meth:`backward`.

        Args:
            query: (N, L, E) (batch_first), (L, N, E), or (L, E) unbatched.
            key: (N, S, kdim) in the same layout.
            value: (N, S, vdim) in the same layout.
            key_padding_mask: None, or (N, S): bool True (or float −inf) ignores that key.
            need_weights: also return the attention weights.
            attn_mask: None, or (L, S) or (N·H, L, S): bool True masks, float is added
                (torch's MultiheadAttention polarity); a float one gets a gradient.
            average_attn_weights: average the returned weights over the heads.
            is_causal: query i attends to keys j <= i + offset only.
            window: keyword-only, as every argument after it: (left, right), query i
                attends to keys −left <= j − (i + offset) <= right only (None on a side:
                unbounded).
            causal_alignment: the offset of ``is_causal``, ``window`` and ALiBi: 0 for
                "top_left" (torch's), S − L for "bottom_right" (flash-attn's).
            softcap: c > 0: each head's scaled scores z become c·tanh(z/c) before any mask.
            alibi_slopes: (H,) or (N, H): adds −slope·|j − (i + offset)| to the scores.
            sinks: (H,): one logit per head joined to each softmax, then dropped.
            mask_mod: FlexAttention's ``mask_mod(batch, head, q_idx, kv_idx)`` on integer
                arrays: True where the query *may* attend (not this layer's polarity).
            rules: the variants as one ``engine.variants.Rules`` in place of the keywords
                from ``is_causal`` on (not both).

        Raises:
            ValueError, TypeError: shapes, masks, dtypes or variants that do not fit the
                layer (ALiBi and ``mask_mod`` with appended keys among them).
        """
        average = flag("average_attn_weights", average_attn_weights)
        given = Rules(is_causal=flag("is_causal", is_causal), causal_alignment=causal_alignment, window=window,
                      softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod)  # fmt: skip
        inputs = (query, key, value)
        forward = self._forward(
            inputs, key_padding_mask, attn_mask, flag("need_weights", need_weights), given.unless(rules)
        )
        self._last = forward
        return self._returned(forward, average)

    forward = __call__

    def backward(self, grad_output: ArrayLike) -> Gradients:
        """Gradients of the last forward's output: ``dq, dk, dv = layer.backward(g)`` in
        their layouts, and ``.attn_mask`` (a float attn_mask's, in its shape; else None)
        and ``.sinks`` (H,) (None without); fills ``self.grads`` with one gradient per
        ``state_dict`` entry.

        Args:
            grad_output: the gradient of the last forward's output, of its shape and dtype.

        Raises:
            RuntimeError: no forward yet.
            ValueError, TypeError: ``grad_output`` not of the output's shape or dtype.
        """
        if self._last is None:
            raise RuntimeError("backward: call the layer (forward) first")
        grads, param_grads = self._last.backward(grad_output)
        for name, grad in param_grads.items():
            self._params[name].grad = grad  # set, not added: the last backward's
        return grads

    def trace(
        self, x: Any, *, is_causal: bool = False, scale: float | None = None, tokens: Sequence[str] | None = None,
        rules: Rules | None = None,
    ) -> Trace:  # fmt: skip
        """Self-attention of one sequence x (L, D), every head's intermediates kept:
        Q, K, V (H, L, E) after the in-projection, weights (H, L, L), each head's output
        (H, L, E) before the out-projection, and the layer's output (L, D) after it.
        No dropout; no appended keys. The variants are the forward's, and the trace
        records them.

        Args:
            x: one sequence, (L, D), unbatched whatever ``batch_first`` says.
            is_causal: token i attends to tokens 0..i only.
            scale: multiplies each head's Q·Kᵀ; default 1/√E, E = D / H the width of
                one head.
            tokens: L labels of the rows (None: positions).
            rules: the variants as one ``engine.variants.Rules`` (per-head values (H,)),
                as the forward takes it; ``is_causal`` is its keyword, given one way or
                the other.

        Raises:
            ValueError: a layer with add_bias_kv, add_zero_attn, kdim or vdim, or x not (L, D).
        """
        if self.add_bias_kv or self.add_zero_attn or "in_proj_weight" not in self._params:
            raise fail("self", "a layer without add_bias_kv, add_zero_attn, kdim or vdim to trace", "one with them")
        x = self._batch_first("x", x, self.embed_dim, batched=False)  # (1, L, D)
        Q, K, V = (split_heads(linear(x, w, b), self.num_heads)[0] for w, b in self._projections())  # (H, L, E)
        trace = build_trace(x[0], Q, K, V, scale=scale, is_causal=is_causal, rules=rules, tokens=tokens)
        trace.layer_output = self._out_proj(merge_heads(trace.output[None]))[0]  # (1, L, D) -> (L, D)
        return trace

    def _returned(self, forward: _Forward, average: bool) -> tuple[Array, Array | None]:
        """What the layer's call returns: the output in the layer's layout, and the weights
        (N, L, S') averaged over heads or (N, H, L, S'), unbatched as the input was."""
        output, weights = self._layout(forward.output, forward.batched), forward.attention.weights  # (N, H, L, S')
        if weights is None:
            return output, None
        weights = weights.mean(axis=1) if average else weights  # (N, L, S') or (N, H, L, S')
        return output, weights if forward.batched else weights[0]

    def _projections(self) -> list[tuple[Array, Array | None]]:
        """(weight, bias) of the query, key and value projections."""
        D, p = self.embed_dim, self._arrays()
        if "in_proj_weight" in p:
            weights = [p["in_proj_weight"][i * D : (i + 1) * D] for i in range(3)]
        else:
            weights = [p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]]
        bias = p.get("in_proj_bias")
        return [(w, None if bias is None else bias[i * D : (i + 1) * D]) for i, w in enumerate(weights)]

    def _out_proj(self, merged: Array) -> Array:
        """The heads side by side (…, D) through the output projection."""
        p = self._arrays()
        return linear(merged, p["out_proj.weight"], p.get("out_proj.bias"))

    def _batch_first(self, name: str, x: Any, width: int, batched: bool) -> Array:
        """``x`` as (N, L, width) in the layer's dtype, from the caller's layout."""
        x = float_array(name, x)
        expected = f"(N, L, {width})" if self.batch_first else f"(L, N, {width})"
        if x.ndim != (3 if batched else 2) or x.shape[-1] != width:
            raise fail(name, f"shape {expected} or unbatched (L, {width})", f"shape {x.shape}")
        if x.dtype != self.dtype:
            raise fail(name, f"dtype {self.dtype} as the layer", f"dtype {x.dtype}", TypeError)
        if not batched:
            return x[None]  # (1, L, width)
        return x if self.batch_first else x.swapaxes(0, 1)  # (N, L, width)

    def _layout(self, x: Array, batched: bool) -> Array:
        """Batch-first (N, L, ·) back to the caller's layout."""
        return (x if self.batch_first else x.swapaxes(0, 1)) if batched else x[0]

    def _forward(
        self, inputs: tuple[Any, Any, Any], key_padding_mask: Any, attn_mask: Any, need_weights: bool, rules: Rules
    ) -> _Forward:
        """Check the inputs, project, split into heads, attend, merge, project out."""
        batched = array_of("query", inputs[0]).ndim == 3
        widths = (self.embed_dim, self.kdim, self.vdim)
        query, key, value = (
            self._batch_first(name, x, width, batched)
            for name, x, width in zip(("query", "key", "value"), inputs, widths, strict=True)
        )  # (N, L, D), (N, S, Dk), (N, S, Dv)
        N, L, D = query.shape
        S = key.shape[1]
        if key.shape[:2] != value.shape[:2] or key.shape[0] != N:
            raise fail("key, value", f"the same batch N={N} and length", f"shapes {key.shape}, {value.shape}")
        H, p = self.num_heads, self._arrays()
        q, k, v = (linear(x, w, b) for x, (w, b) in zip((query, key, value), self._projections(), strict=True))
        if self.add_bias_kv:
            k = np.concatenate([k, np.broadcast_to(p["bias_k"][0], (N, 1, D))], axis=1)  # (N, S + 1, D)
            v = np.concatenate([v, np.broadcast_to(p["bias_v"][0], (N, 1, D))], axis=1)
        q, k, v = (split_heads(x, H) for x in (q, k, v))  # (N, H, L, E), (N, H, S', E), (N, H, S', E)
        if self.add_zero_attn:
            zero = np.zeros((N, H, 1, self.head_dim), self.dtype)
            k, v = np.concatenate([k, zero], axis=2), np.concatenate([v, zero], axis=2)  # (N, H, S' + 1, E)
        extra = self.add_bias_kv + self.add_zero_attn
        band, engine_rules = _engine_rules(rules, (L, S), extra)
        mask = _combined_mask(attn_mask, key_padding_mask, band, (N, H, L, S), extra, self.dtype)
        dropout_p = self.dropout if self.training else 0.0
        rng = self.generator if dropout_p else None
        result = attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, need_weights=need_weights, rng=rng, rules=engine_rules
        )
        merged = merge_heads(result.output)  # (N, L, D)
        output = self._out_proj(merged)  # (N, L, D)
        float_mask = attn_mask is not None and array_of("attn_mask", attn_mask).dtype != bool
        return _Forward(
            layer=self, inputs=(query, key, value), attention=result, merged=merged, output=output, batched=batched,
            float_mask_shape=np.shape(attn_mask) if float_mask else None,
        )  # fmt: skip

    def _backward(self, forward: _Forward, grad_output: Any) -> tuple[Gradients, dict[str, Array]]:
        """The input gradients (in the caller's layout, with the float attn_mask's and the
        sinks') and one gradient per parameter."""
        N, L, D = forward.output.shape
        grad_out = self._batch_first("grad_output", grad_output, D, forward.batched)  # (N, L, D)
        if grad_out.shape != (N, L, D):
            raise fail("grad_output", f"the output's shape for batch {N}, length {L}", f"shape {np.shape(grad_output)}")
        p, grads = self._arrays(), {}
        grad_merged, grads["out_proj.weight"], grads["out_proj.bias"] = linear_backward(
            grad_out, forward.merged, p["out_proj.weight"]
        )
        of_heads = forward.attention.backward(split_heads(grad_merged, self.num_heads))
        gq, gk, gv = of_heads  # (N, H, ·, E)
        if self.add_zero_attn:  # the zero row is a constant
            gk, gv = gk[:, :, :-1], gv[:, :, :-1]
        gq, gk, gv = (merge_heads(g) for g in (gq, gk, gv))  # (N, L, D), (N, S', D), (N, S', D)
        if self.add_bias_kv:
            grads["bias_k"] = gk[:, -1].sum(axis=0).reshape(1, 1, D)
            grads["bias_v"] = gv[:, -1].sum(axis=0).reshape(1, 1, D)
            gk, gv = gk[:, :-1], gv[:, :-1]
        projected = [
            linear_backward(g, x, w)
            for g, x, (w, _) in zip((gq, gk, gv), forward.inputs, self._projections(), strict=True)
        ]
        if "in_proj_weight" in p:
            grads["in_proj_weight"] = np.concatenate([weight for _, weight, _ in projected])
        else:
            grads.update(
                zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), (w for _, w, _ in projected), strict=True)
            )
        grads["in_proj_bias"] = np.concatenate([bias for _, _, bias in projected])
        param_grads = {name: grads[name].astype(self.dtype, copy=False) for name in p}
        dq, dk, dv = (self._layout(grad_x, forward.batched) for grad_x, _, _ in projected)
        mask = forward.mask_gradient(of_heads.attn_mask)
        # the heads' gradients of the variants' values (the sinks', …) as they are
        return dataclasses.replace(of_heads, query=dq, key=dk, value=dv, attn_mask=mask), param_grads


def _checked_state(state: Any, current: dict[str, Array], dtype: np.dtype) -> dict[str, Array]:
    """Copies of ``state``'s arrays, once its names, shapes and dtypes match ``current``."""
    if not isinstance(state, dict):
        raise fail("state", "a dict of arrays (from state_dict())", type(state).__name__, TypeError)
    missing = sorted(set(current) - set(state))
    unexpected = sorted(set(state) - set(current))
    if missing or unexpected:
        raise fail("state", f"the keys {sorted(current)}", f"missing {missing}, unexpected {unexpected}")
    loaded = {}
    for name, now in current.items():
        value = array_of(f"state[{name!r}]", state[name])
        if value.dtype.kind not in "fiu":
            raise fail(f"state[{name!r}]", "an array of numbers", f"dtype {value.dtype}", TypeError)
        if value.shape != now.shape:
            raise fail(f"state[{name!r}]", f"shape {now.shape}", f"shape {value.shape}")
        loaded[name] = value.astype(dtype)
    return loaded


# the variants a layer with appended keys takes: the band's (built into its mask) and those that need no position
_WITH_APPENDED_KEYS = frozenset({"is_causal", "window", "causal_alignment", "softcap", "sinks"})


def _engine_rules(rules: Rules, lengths: tuple[int, int], extra: int) -> tuple[Array | None, Rules]:
    """The (L, S) keys that is_causal and the window allow, to build into the layer's mask
    (None: the engine applies them), and the variants the engine is given. Without
    appended keys the engine is given them all; with ``extra`` appended keys, which have
    no position, the band is built over the S real keys here (the appended ones stay
    unmasked), softcap and the sinks go to the engine, and every other variant (ALiBi,
    mask_mod, those that count or place keys) is refused."""
    if not extra:
        return None, rules
    for name in rules.given():
        if name not in _WITH_APPENDED_KEYS:
            expected = "None with add_bias_kv or add_zero_attn (the keys they append have no position)"
            raise fail(name, expected, "a value")
    L, S = lengths
    band = Band.of(rules.is_causal, check_window(rules.window), offset(rules.causal_alignment, lengths), lengths)
    allowed = band.allowed(slice(0, L), slice(0, S)) if band.limits(lengths) else None
    return allowed, Rules(softcap=rules.softcap, sinks=rules.sinks)
