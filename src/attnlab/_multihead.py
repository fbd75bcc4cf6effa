"""Multi-head attention with ``torch.nn.MultiheadAttention``'s constructor, forward,
parameter names and shapes, plus an exact backward.

    head_i = Attention(query·Wq_iᵀ + bq_i, key·Wk_iᵀ + bk_i, value·Wv_iᵀ + bv_i)
    output = concat(head_1 … head_H)·Woᵀ + bo

Shapes, with N the batch, L the query length, S the key length, E = embed_dim,
H heads of D = E/H: query (L, N, E), or (N, L, E) with ``batch_first``, or (L, E)
unbatched; key (S, N, kdim) and value (S, N, vdim) likewise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._trace import Trace, build_trace
from ._validation import fail, float_array, positive_int, probability
from .functional import scaled_dot_product_attention, scaled_dot_product_attention_backward


def _xavier_uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """U(−a, a) with a = √(6 / (fan_in + fan_out)), as torch.nn.init.xavier_uniform_."""
    fan_out, fan_in = shape[0], shape[1]
    bound = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-bound, bound, size=shape)


def _additive(name: str, mask: Any, dtype: np.dtype) -> np.ndarray:
    """A MultiheadAttention mask as scores to add: bool True (= ignore) becomes −inf."""
    mask = np.asarray(mask)
    if mask.dtype == bool:
        return np.where(mask, -np.inf, 0.0).astype(dtype)
    if mask.dtype.kind != "f":
        raise fail(name, "a bool array (True = ignore) or a float array (added)", f"dtype {mask.dtype}", TypeError)
    return mask.astype(dtype)


class MultiheadAttention:
    """torch.nn.MultiheadAttention in NumPy, with ``backward``.

    Masks follow torch's MultiheadAttention: a bool ``key_padding_mask`` or
    ``attn_mask`` is True where a key is to be *ignored*; a float mask is added to the
    scores. ``is_causal=True`` applies the causal mask itself (combined with
    ``attn_mask`` if one is given); torch instead requires ``attn_mask`` and takes
    ``is_causal`` as a hint. A query whose keys are all masked gives output bo (the
    attention part is 0) and weights 0, where torch returns NaN: on purpose.

    Args:
        embed_dim: E, width of the query and of the output.
        num_heads: H, must divide E.
        dropout: dropout probability on the attention weights, in training only.
        bias: add biases to the input and output projections.
        add_bias_kv: append a learned bias_k / bias_v row to the keys and values.
        add_zero_attn: append a row of zeros to the keys and values (after the heads split).
        kdim, vdim: widths of key and value (default E).
        batch_first: inputs and outputs are (N, L, E) instead of (L, N, E).
        seed: seed of the layer's generator (initial weights, then dropout draws).
        dtype: float32 (default) or float64.
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
        self.bias, self.add_bias_kv, self.add_zero_attn = bool(bias), bool(add_bias_kv), bool(add_zero_attn)
        self.batch_first = bool(batch_first)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise fail("dtype", "float32 or float64", self.dtype, TypeError)
        self.training = True
        self._rng = np.random.default_rng(seed)
        self._cache: dict[str, Any] | None = None
        self.grads: dict[str, np.ndarray] = {}

        E = embed_dim
        params: dict[str, np.ndarray] = {}
        if self._qkv_same_embed_dim:
            params["in_proj_weight"] = _xavier_uniform(self._rng, (3 * E, E))
        else:
            params["q_proj_weight"] = _xavier_uniform(self._rng, (E, E))
            params["k_proj_weight"] = _xavier_uniform(self._rng, (E, self.kdim))
            params["v_proj_weight"] = _xavier_uniform(self._rng, (E, self.vdim))
        if bias:
            params["in_proj_bias"] = np.zeros(3 * E)
        if add_bias_kv:  # xavier_normal_ on (1, 1, E): std = √(2 / (E + E))
            params["bias_k"] = self._rng.normal(0.0, np.sqrt(1.0 / E), size=(1, 1, E))
            params["bias_v"] = self._rng.normal(0.0, np.sqrt(1.0 / E), size=(1, 1, E))
        bound = 1.0 / np.sqrt(E)  # torch.nn.Linear's kaiming_uniform_(a=√5)
        params["out_proj.weight"] = self._rng.uniform(-bound, bound, size=(E, E))
        if bias:
            params["out_proj.bias"] = np.zeros(E)
        self._params = {k: v.astype(self.dtype) for k, v in params.items()}

    @property
    def _qkv_same_embed_dim(self) -> bool:
        return self.kdim == self.embed_dim and self.vdim == self.embed_dim

    # ---- parameters -------------------------------------------------------------

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the parameters under torch's names and shapes."""
        return {k: v.copy() for k, v in self._params.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace every parameter; names and shapes must be exactly this layer's."""
        missing = sorted(set(self._params) - set(state))
        unexpected = sorted(set(state) - set(self._params))
        if missing or unexpected:
            raise fail("state", f"the keys {sorted(self._params)}", f"missing {missing}, unexpected {unexpected}")
        loaded = {}
        for name, current in self._params.items():
            value = np.asarray(state[name], dtype=self.dtype)
            if value.shape != current.shape:
                raise fail(f"state[{name!r}]", f"shape {current.shape}", f"shape {value.shape}")
            loaded[name] = value.copy()
        self._params = loaded

    def _projections(self) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """(weight, bias) of the query, key and value projections."""
        E, p = self.embed_dim, self._params
        if self._qkv_same_embed_dim:
            weights = [p["in_proj_weight"][i * E : (i + 1) * E] for i in range(3)]
        else:
            weights = [p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]]
        bias = p.get("in_proj_bias")
        return [(w, None if bias is None else bias[i * E : (i + 1) * E]) for i, w in enumerate(weights)]

    def train(self, mode: bool = True) -> MultiheadAttention:
        self.training = bool(mode)
        return self

    def eval(self) -> MultiheadAttention:
        return self.train(False)

    # ---- forward ----------------------------------------------------------------

    def _to_batch_first(self, name: str, x: Any, width: int, batched: bool) -> np.ndarray:
        x = float_array(name, x)
        expected = f"(L, N, {width})" if not self.batch_first else f"(N, L, {width})"
        if x.ndim != (3 if batched else 2) or x.shape[-1] != width:
            raise fail(name, f"shape {expected} or unbatched (L, {width})", f"shape {x.shape}")
        if x.dtype != self.dtype:
            raise fail(name, f"dtype {self.dtype} as the layer", f"dtype {x.dtype}", TypeError)
        if not batched:
            return x[None]  # (1, L, width)
        return x if self.batch_first else x.swapaxes(0, 1)  # (N, L, width)

    def _from_batch_first(self, x: np.ndarray, batched: bool) -> np.ndarray:
        if not batched:
            return x[0]
        return x if self.batch_first else x.swapaxes(0, 1)

    def _mask(
        self, attn_mask: Any, key_padding_mask: Any, is_causal: bool, N: int, L: int, S: int, extra: int
    ) -> np.ndarray | None:
        """All masks as one additive float mask (N or 1, H or 1, L, S + extra); the
        ``extra`` appended key columns (bias_k, zero_attn) are never masked."""
        H, total = self.num_heads, None
        if attn_mask is not None:
            mask = _additive("attn_mask", attn_mask, self.dtype)
            if mask.shape == (L, S):
                total = mask[None, None]  # (1, 1, L, S)
            elif mask.shape == (N * H, L, S):
                total = mask.reshape(N, H, L, S)  # (N, H, L, S)
            else:
                raise fail("attn_mask", f"shape ({L}, {S}) or ({N * H}, {L}, {S})", f"shape {mask.shape}")
        if key_padding_mask is not None:
            mask = _additive("key_padding_mask", key_padding_mask, self.dtype)
            unbatched = N == 1 and mask.shape == (S,)  # torch takes (S,) with an unbatched query
            if mask.shape != (N, S) and not unbatched:
                raise fail("key_padding_mask", f"shape ({N}, {S})", f"shape {mask.shape}")
            padding = mask.reshape(N, 1, 1, S)  # (N, 1, 1, S)
            total = padding if total is None else total + padding
        if is_causal:
            causal = np.where(np.tri(L, S, dtype=bool), 0.0, -np.inf).astype(self.dtype)  # (L, S)
            total = causal if total is None else total + causal
        if total is None or not extra:
            return total
        return np.concatenate([total, np.zeros((*total.shape[:-1], extra), self.dtype)], axis=-1)

    def __call__(
        self,
        query: Any,
        key: Any,
        value: Any,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return ``(output, weights)``: output like query but E wide; weights
        (N, L, S') averaged over heads or (N, H, L, S') per head (without N when
        unbatched), S' counting appended bias_k / zero_attn keys; None unless
        ``need_weights``."""
        batched = np.ndim(query) == 3
        q_in = self._to_batch_first("query", query, self.embed_dim, batched)  # (N, L, E)
        k_in = self._to_batch_first("key", key, self.kdim, batched)  # (N, S, kdim)
        v_in = self._to_batch_first("value", value, self.vdim, batched)  # (N, S, vdim)
        N, L, E = q_in.shape
        S = k_in.shape[1]
        if k_in.shape[:2] != v_in.shape[:2] or k_in.shape[0] != N:
            raise fail("key, value", f"the same batch N={N} and length", f"shapes {np.shape(key)}, {np.shape(value)}")
        H, D = self.num_heads, self.head_dim

        q, k, v = (x @ w.T + (0 if b is None else b) for x, (w, b) in zip((q_in, k_in, v_in), self._projections()))
        if self.add_bias_kv:
            k = np.concatenate([k, np.broadcast_to(self._params["bias_k"][0], (N, 1, E))], axis=1)  # (N, S+1, E)
            v = np.concatenate([v, np.broadcast_to(self._params["bias_v"][0], (N, 1, E))], axis=1)
        q = q.reshape(N, L, H, D).transpose(0, 2, 1, 3)  # (N, H, L, D)
        k = k.reshape(N, -1, H, D).transpose(0, 2, 1, 3)  # (N, H, S', D)
        v = v.reshape(N, -1, H, D).transpose(0, 2, 1, 3)  # (N, H, S', D)
        if self.add_zero_attn:
            k = np.concatenate([k, np.zeros((N, H, 1, D), self.dtype)], axis=2)  # (N, H, S'+1, D)
            v = np.concatenate([v, np.zeros((N, H, 1, D), self.dtype)], axis=2)
        extra = self.add_bias_kv + self.add_zero_attn
        mask = self._mask(attn_mask, key_padding_mask, is_causal, N, L, S, extra)
        dropout_p = self.dropout if self.training else 0.0
        seed = int(self._rng.integers(2**63)) if dropout_p else None

        heads, *weights, lse = scaled_dot_product_attention(
            q, k, v, mask, dropout_p, rng=seed, return_weights=need_weights, return_lse=True
        )
        attended = heads.transpose(0, 2, 1, 3).reshape(N, L, E)  # (N, L, E)
        output = attended @ self._params["out_proj.weight"].T
        if self.bias:
            output += self._params["out_proj.bias"]
        self._cache = dict(
            inputs=(q_in, k_in, v_in),
            heads=(q, k, v),
            mask=mask,
            dropout_p=dropout_p,
            seed=seed,
            attended=attended,
            batched=batched,
            attention=(heads, lse),
        )
        if not need_weights:
            return self._from_batch_first(output, batched), None
        per_head = weights[0]  # (N, H, L, S')
        averaged = per_head.mean(axis=1) if average_attn_weights else per_head  # (N, L, S') or (N, H, L, S')
        return self._from_batch_first(output, batched), averaged if batched else averaged[0]

    forward = __call__

    def trace(
        self, x: Any, *, is_causal: bool = False, scale: float | None = None, tokens: Sequence[str] | None = None
    ) -> Trace:
        """Self-attention of one sequence x (L, E), every head's intermediates kept:
        Q, K, V (H, L, D) after the in-projection, weights (H, L, L) and each head's
        output (H, L, D) before the out-projection. No dropout; no appended keys."""
        if self.add_bias_kv or self.add_zero_attn or not self._qkv_same_embed_dim:
            raise fail("trace", "a layer without add_bias_kv, add_zero_attn, kdim or vdim", "one with them")
        x = float_array("x", x)
        if x.ndim != 2 or x.shape[1] != self.embed_dim:
            raise fail("x", f"one sequence of shape (L, {self.embed_dim})", f"shape {x.shape}")
        L, H, D = x.shape[0], self.num_heads, self.head_dim
        x = x.astype(self.dtype, copy=False)
        Q, K, V = (
            (x @ w.T + (0 if b is None else b)).reshape(L, H, D).transpose(1, 0, 2)  # (H, L, D)
            for w, b in self._projections()
        )
        return build_trace(
            x, Q, K, V, scale=scale, is_causal=is_causal, tokens=None if tokens is None else list(tokens)
        )

    # ---- backward ---------------------------------------------------------------

    def backward(self, grad_output: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gradients of the last forward's output for query, key and value (in their
        layouts); fills ``self.grads`` with one gradient per ``state_dict`` entry."""
        if self._cache is None:
            raise RuntimeError("backward: call the layer (forward) first")
        c = self._cache
        q_in, k_in, v_in = c["inputs"]
        q, k, v = c["heads"]
        N, L, E = q_in.shape
        H, D = self.num_heads, self.head_dim
        grad_out = self._to_batch_first("grad_output", grad_output, E, c["batched"])  # (N, L, E)
        if grad_out.shape != (N, L, E):
            raise fail("grad_output", f"the output's shape for batch {N}, length {L}", f"shape {np.shape(grad_output)}")

        grads: dict[str, np.ndarray] = {}
        grads["out_proj.weight"] = np.einsum("nle,nlf->ef", grad_out, c["attended"])
        if self.bias:
            grads["out_proj.bias"] = grad_out.sum(axis=(0, 1))
        grad_heads = (
            (grad_out @ self._params["out_proj.weight"]).reshape(N, L, H, D).transpose(0, 2, 1, 3)
        )  # (N, H, L, D)
        heads, lse = c["attention"]
        gq, gk, gv = scaled_dot_product_attention_backward(
            grad_heads, q, k, v, c["mask"], dropout_p=c["dropout_p"], rng=c["seed"], output=heads, lse=lse
        )
        if self.add_zero_attn:  # the zero row is a constant
            gk, gv = gk[:, :, :-1], gv[:, :, :-1]
        gq = gq.transpose(0, 2, 1, 3).reshape(N, L, E)  # (N, L, E)
        gk = gk.transpose(0, 2, 1, 3).reshape(N, -1, E)  # (N, S', E)
        gv = gv.transpose(0, 2, 1, 3).reshape(N, -1, E)  # (N, S', E)
        if self.add_bias_kv:
            grads["bias_k"] = gk[:, -1].sum(axis=0).reshape(1, 1, E)
            grads["bias_v"] = gv[:, -1].sum(axis=0).reshape(1, 1, E)
            gk, gv = gk[:, :-1], gv[:, :-1]

        weight_grads = [np.einsum("nle,nlf->ef", g, x) for g, x in zip((gq, gk, gv), (q_in, k_in, v_in))]
        if self._qkv_same_embed_dim:
            grads["in_proj_weight"] = np.concatenate(weight_grads)
        else:
            grads.update(zip(("q_proj_weight", "k_proj_weight", "v_proj_weight"), weight_grads))
        if self.bias:
            grads["in_proj_bias"] = np.concatenate([g.sum(axis=(0, 1)) for g in (gq, gk, gv)])
        self.grads = {name: grads[name].astype(self.dtype, copy=False) for name in self._params}
        inputs = (g @ w for g, (w, _) in zip((gq, gk, gv), self._projections()))
        return tuple(self._from_batch_first(g, c["batched"]) for g in inputs)  # type: ignore[return-value]
