"""The attention variants (windows, causal alignment, softcapping, ALiBi, sinks, mask
functions, float-mask gradients and grad_lse) in every engine, against oracles.

The oracle is float64 torch autograd written out below (:func:`torch_oracle`), step by
step as issue 21 orders it:

    Z = softcap(scale·Q·Kᵀ) + float attn_mask − slope·|j − (i + offset)|
    Z = −∞ where the bool attn_mask, a −∞ of the float one, is_causal (d > 0),
        the window (d < −left or d > right) or mask_mod rule key j out, d = j − (i + offset)
    [Z | s_h]  one sink column per head;  lse = logsumexp over it;  P = e^(Z − lse)
    O = P·V;   loss = Σ dO∘O + Σ dlse∘lse over the rows whose lse is finite

with offset 0 for causal_alignment="top_left" and S − L for "bottom_right". Its
gradients of Q, K, V, the float mask (summed by autograd to its own shape) and the sinks
are what ``result.backward(grad_output, grad_lse)`` must give. A row where nothing is
allowed gives output 0 and lse −∞ (the sink's logit with sinks).

Second oracles: torch's ``causal_lower_right`` with torch SDPA (bottom-right causal, with
gradients), and ``flex_attention`` run eagerly with the same ``mask_mod`` and a
``score_mod`` for softcap and ALiBi (forward only: torch 2.13 refuses its backward on
CPU, which the last flex test says by skipping).

Tolerances are relative to the scale of each result (its largest magnitude): 1e-12 in
float64 and 2e-5 in float32, whose inputs the oracle reads exactly in float64. The
blocked engines use blocks of 512 keys and 512 queries (256 in the fused engine's
compiled causal forward), so the block-edge tests take lengths around 256 and 512. The
big cross-product is marked slow.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _engine as _fused
from helpers import covered_product
from oracles import TOLERANCE, optional_module, requires

torch = optional_module("torch")

ENGINES = [
    "naive",
    "tiled",
    pytest.param(
        "fused", marks=pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
    ),
]
DTYPES = [pytest.param(np.float64, id="float64"), pytest.param(np.float32, id="float32")]


def available_engines() -> list[str]:
    """The engines that run here."""
    return ["naive", "tiled", *(["fused"] if _fused.available() else [])]


MaskMod = Callable[[Any, Any, Any, Any], Any]


# The mask functions: written with operators only, so that the same function runs on
# NumPy's index arrays (attnlab, the oracle) and on torch's (flex_attention).


def strided_by_head(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    """Head h drops every (h + 2)-th diagonal, and batch b its last 3·b keys of 19 and more."""
    return ((kv_idx - q_idx) % (head + 2) != 0) & (kv_idx + 3 * batch < 19)


def prefix_lm(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    """A prefix of 5 keys every query sees, then causal (top-left)."""
    return (kv_idx < 5) | (kv_idx <= q_idx)


def documents(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    """Documents of 700 positions (query and key positions alike): whole 512-blocks ruled out."""
    return q_idx // 700 == kv_idx // 700


def nothing_for_even_queries(batch: Any, head: Any, q_idx: Any, kv_idx: Any) -> Any:
    """Rows 0, 2, 4, ... see nothing; odd rows see keys of the head's parity."""
    return (q_idx % 2 == 1) & ((kv_idx + head) % 2 == 0)


@dataclass(frozen=True)
class Case:
    """One attention call: its shapes and its variants.

    ``query_batch`` and ``kv_batch`` are the batch dimensions B… of the query and of the
    key and value (the heads last; with ``gqa`` the key heads divide the query heads);
    ``alibi`` is None, "H" for slopes (H,) or "BH" for (B, H); ``float_mask`` and
    ``bool_mask`` are the mask's shape (at most one of them), ``mask_neg_inf`` puts −∞ in
    a float mask."""

    query_batch: tuple[int, ...] = (2, 3)
    kv_batch: tuple[int, ...] = (2, 3)
    L: int = 13
    S: int = 21
    E: int = 8
    Ev: int = 6
    gqa: bool = False
    is_causal: bool = False
    alignment: str = "top_left"
    window: tuple[int | None, int | None] | None = None
    softcap: float | None = None
    alibi: str | None = None
    sinks: bool = False
    float_mask: tuple[int, ...] | None = None
    mask_neg_inf: bool = False
    bool_mask: tuple[int, ...] | None = None
    mask_mod: MaskMod | None = None
    scale: float | None = None

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """B… of the result: the batch dimensions broadcast (the heads matched with GQA)."""
        if self.gqa:
            return (*np.broadcast_shapes(self.query_batch[:-1], self.kv_batch[:-1]), self.query_batch[-1])
        return tuple(np.broadcast_shapes(self.query_batch, self.kv_batch))

    @property
    def heads(self) -> int:
        """H: the last batch dimension (1 for 2-D inputs, which have none)."""
        return self.batch_shape[-1] if self.batch_shape else 1

    @property
    def offset(self) -> int:
        """The diagonal: 0 top-left, S − L bottom-right."""
        return self.S - self.L if self.alignment == "bottom_right" else 0


def make_inputs(case: Case, dtype: Any, seed: int) -> dict[str, Any]:
    """The arrays of one call, drawn from a Generator seeded with ``seed``, in ``dtype``:
    q, k, v, grad_output, grad_lse and, where the case has them, attn_mask, alibi_slopes
    and sinks."""
    rng = np.random.default_rng(seed)
    batch = case.batch_shape

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(dtype)

    arrays: dict[str, Any] = {
        "q": normal(*case.query_batch, case.L, case.E),
        "k": normal(*case.kv_batch, case.S, case.E),
        "v": normal(*case.kv_batch, case.S, case.Ev),
        "grad_output": normal(*batch, case.L, case.Ev),
        "grad_lse": normal(*batch, case.L),
    }
    if case.float_mask is not None:
        mask = normal(*case.float_mask)
        if case.mask_neg_inf:
            mask[rng.random(case.float_mask) < 0.15] = -np.inf
        arrays["attn_mask"] = mask
    if case.bool_mask is not None:
        arrays["attn_mask"] = rng.random(case.bool_mask) < 0.7
    if case.alibi == "H":
        arrays["alibi_slopes"] = rng.uniform(0.05, 0.6, case.heads).astype(dtype)
    elif case.alibi == "BH":
        arrays["alibi_slopes"] = rng.uniform(0.05, 0.6, batch[-2:]).astype(dtype)
    if case.sinks:
        arrays["sinks"] = (2.0 * rng.standard_normal(case.heads)).astype(dtype)
    return arrays


def variant_keywords(case: Case, arrays: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``attnlab.attention`` for ``case`` (all but the engine)."""
    return {
        "attn_mask": arrays.get("attn_mask"),
        "is_causal": case.is_causal,
        "causal_alignment": case.alignment,
        "window": case.window,
        "softcap": case.softcap,
        "alibi_slopes": arrays.get("alibi_slopes"),
        "sinks": arrays.get("sinks"),
        "mask_mod": case.mask_mod,
        "scale": case.scale,
        "enable_gqa": case.gqa,
    }


def mask_mod_verdict(case: Case) -> np.ndarray:
    """The mask function on the whole problem, (B…, L, S): ``batch`` indexes the flattened
    dimensions before the heads (row-major), ``head`` the last batch dimension."""
    assert case.mask_mod is not None
    q_idx, kv_idx = np.arange(case.L).reshape(case.L, 1), np.arange(case.S).reshape(1, case.S)
    if not case.batch_shape:  # 2-D inputs: one slice, batch 0 and head 0
        return case.mask_mod(np.int64(0), np.int64(0), q_idx, kv_idx)
    *leading, heads = case.batch_shape
    tail = (1, 1, 1)  # the head, query and key dimensions
    batch = np.ravel_multi_index(np.indices(leading), leading).reshape(*leading, *tail) if leading else np.zeros(())
    head = np.arange(heads).reshape(heads, 1, 1)
    allowed = case.mask_mod(batch.astype(np.int64), head, q_idx, kv_idx)
    return np.broadcast_to(allowed, (*case.batch_shape, case.L, case.S))


@dataclass(frozen=True)
class Expected:
    """The oracle's results in float64: output (B…, L, Ev), lse (B…, L), and the gradients
    (None where the input is not there)."""

    output: np.ndarray
    lse: np.ndarray
    query: np.ndarray
    key: np.ndarray
    value: np.ndarray
    attn_mask: np.ndarray | None
    sinks: np.ndarray | None


def torch_oracle(case: Case, arrays: dict[str, Any]) -> Expected:
    """The variants in float64 torch autograd, in the order of the module docstring."""
    f64 = torch.float64

    def leaf(name: str) -> Any:
        x = arrays.get(name)
        if x is None or x.dtype == bool:
            return None
        return torch.tensor(x.astype(np.float64), dtype=f64, requires_grad=True)

    q, k, v, float_mask, sinks = (leaf(n) for n in ("q", "k", "v", "attn_mask", "sinks"))
    keys, values = k, v
    if case.gqa:  # each key/value head serves H / Hk query heads, consecutively
        groups = case.query_batch[-1] // case.kv_batch[-1]
        keys, values = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(case.E)
    scores = scale * (q @ keys.transpose(-1, -2))  # (B…, L, S)
    if case.softcap is not None:
        scores = case.softcap * torch.tanh(scores / case.softcap)
    if float_mask is not None:
        scores = scores + float_mask
    distance = torch.arange(case.S)[None, :] - (torch.arange(case.L)[:, None] + case.offset)  # d, (L, S)
    if case.alibi is not None:
        slopes = torch.tensor(arrays["alibi_slopes"].astype(np.float64), dtype=f64)  # (H,) or (B, H)
        slopes = slopes[..., None, None] if case.batch_shape else slopes.reshape(1, 1)  # 2-D: one head
        scores = scores - slopes * distance.abs().to(f64)
    allowed = torch.ones((*case.batch_shape, case.L, case.S), dtype=torch.bool)
    if case.bool_mask is not None:
        allowed = allowed & torch.from_numpy(arrays["attn_mask"])
    if float_mask is not None:
        allowed = allowed & ~torch.isneginf(float_mask.detach())
    if case.is_causal:
        allowed = allowed & (distance <= 0)
    if case.window is not None:
        left, right = case.window
        if left is not None:
            allowed = allowed & (distance >= -left)
        if right is not None:
            allowed = allowed & (distance <= right)
    if case.mask_mod is not None:
        allowed = allowed & torch.from_numpy(np.array(mask_mod_verdict(case)))  # a writable copy
    scores = scores.masked_fill(~allowed, -math.inf)
    if sinks is not None:  # one more column, the head's sink logit, in every row
        per_head = sinks[:, None, None] if case.batch_shape else sinks.reshape(1, 1)  # (H, 1, 1); 2-D: one head
        column = per_head.expand(*case.batch_shape, case.L, 1)
        scores = torch.cat([scores, column], dim=-1)  # (B…, L, S + 1)
    anything = torch.isfinite(scores).any(dim=-1)  # (B…, L): rows with some key (or a sink)
    lse = torch.where(anything, torch.logsumexp(torch.where(anything[..., None], scores, 0.0), dim=-1), -math.inf)
    weights = torch.exp(scores - torch.where(anything, lse, 0.0)[..., None])[..., : case.S]  # P, (B…, L, S)
    output = weights @ values  # (B…, L, Ev)
    grad_output = torch.tensor(arrays["grad_output"].astype(np.float64), dtype=f64)
    grad_lse = torch.tensor(arrays["grad_lse"].astype(np.float64), dtype=f64)
    loss = (grad_output * output).sum() + torch.where(torch.isfinite(lse), grad_lse * lse, 0.0).sum()
    loss.backward()
    return Expected(
        output.detach().numpy(),
        lse.detach().numpy(),
        q.grad.numpy(),
        k.grad.numpy(),
        v.grad.numpy(),
        None if float_mask is None else float_mask.grad.numpy(),
        None if sinks is None else sinks.grad.numpy(),
    )


def assert_matches(actual: Any, expected: np.ndarray, dtype: Any, what: str) -> None:
    """``actual`` has ``expected``'s shape, the dtype asked for, the same infinities, and
    its finite values within the dtype's tolerance of the scale of ``expected``."""
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    assert actual.dtype == np.dtype(dtype), f"{what}: dtype {actual.dtype}, expected {np.dtype(dtype)}"
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(actual[~finite], expected[~finite], err_msg=f"{what}: non-finite entries")
    scale = float(np.max(np.abs(expected[finite]), initial=0.0))
    error = np.abs(actual[finite].astype(np.float64) - expected[finite])
    limit = TOLERANCE[np.dtype(dtype)]["of_scale"] * max(scale, 1e-300)
    worst = float(np.max(error, initial=0.0))
    assert worst <= limit, f"{what}: max error {worst:.3g} > {limit:.3g} (scale {scale:.3g})"


def assert_result_matches(result: al.Attention, grads: al.Gradients, expected: Expected, dtype: Any) -> None:
    """Output, lse and every gradient of attnlab's call against the oracle's."""
    label = f"engine {result.engine}"
    assert_matches(result.output, expected.output, dtype, f"{label}: output")
    assert_matches(result.lse, expected.lse, dtype, f"{label}: lse")
    for name in ("query", "key", "value"):
        assert_matches(getattr(grads, name), getattr(expected, name), dtype, f"{label}: grad {name}")
    for name in ("attn_mask", "sinks"):
        ours, theirs = getattr(grads, name), getattr(expected, name)
        if theirs is None:
            assert ours is None, f"{label}: grads.{name} should be None"
        else:
            assert ours is not None, f"{label}: grads.{name} is None"
            assert_matches(ours, theirs, dtype, f"{label}: grads.{name}")


def run_attnlab(case: Case, arrays: dict[str, Any], engine: str) -> tuple[al.Attention, al.Gradients]:
    """attnlab's forward on ``engine`` and its backward with grad_output and grad_lse."""
    result = al.attention(arrays["q"], arrays["k"], arrays["v"], engine=engine, **variant_keywords(case, arrays))
    assert result.engine == engine
    return result, result.backward(arrays["grad_output"], arrays["grad_lse"])


def check(case: Case, engines: list[str], dtype: Any, seed: int) -> tuple[dict[str, Any], Expected]:
    """Every engine of ``engines`` against the oracle on one case; returns the inputs and
    the oracle's results."""
    arrays = make_inputs(case, dtype, seed)
    expected = torch_oracle(case, arrays)
    for engine in engines:
        assert_result_matches(*run_attnlab(case, arrays, engine), expected, dtype)
    return arrays, expected


LONGER_QUERIES = {"L": 21, "S": 13}  # L > S: bottom-right causal leaves rows with nothing allowed

# One variant at a time (batch (2, 3), L=13 and S=21 unless said).
VARIANTS = {
    "causal-top-left": Case(is_causal=True),
    "causal-top-left-L>S": Case(is_causal=True, **LONGER_QUERIES),
    "causal-bottom-right": Case(is_causal=True, alignment="bottom_right"),
    "causal-bottom-right-L>S": Case(is_causal=True, alignment="bottom_right", **LONGER_QUERIES),
    "window-both-sides": Case(window=(3, 2)),
    "window-left-only": Case(window=(4, None)),
    "window-right-only": Case(window=(None, 1)),
    "window-zero": Case(window=(0, 0)),
    "window-masking-one-corner-left": Case(window=(11, None)),  # only d = −12, at (i, j) = (12, 0)
    "window-masking-one-corner-right": Case(window=(None, 19)),  # only d = 20, at (0, 20)
    "window-bottom-right": Case(window=(2, 3), alignment="bottom_right"),
    "window-bottom-right-L>S": Case(window=(2, 3), alignment="bottom_right", **LONGER_QUERIES),
    "softcap": Case(softcap=1.5, scale=1.0),
    "softcap-saturated": Case(softcap=0.3, scale=2.0),
    "alibi-H": Case(alibi="H"),
    "alibi-BH": Case(alibi="BH"),
    "alibi-bottom-right": Case(alibi="H", alignment="bottom_right"),
    "alibi-bottom-right-L>S": Case(alibi="BH", alignment="bottom_right", **LONGER_QUERIES),
    "sinks": Case(sinks=True),
    "float-mask": Case(float_mask=(13, 21)),
    "float-mask-with-neg-inf": Case(float_mask=(2, 3, 13, 21), mask_neg_inf=True),
    "bool-mask": Case(bool_mask=(2, 3, 13, 21)),
    "mask-mod": Case(mask_mod=strided_by_head),
    "mask-mod-prefix-lm": Case(mask_mod=prefix_lm),
    "mask-mod-empty-rows": Case(mask_mod=nothing_for_even_queries),
    "3-d-inputs-heads-only": Case(
        query_batch=(3,),
        kv_batch=(3,),
        is_causal=True,
        alignment="bottom_right",
        alibi="H",
        sinks=True,
        mask_mod=strided_by_head,
        float_mask=(3, 1, 21),
    ),
    "2-d-inputs-one-head": Case(
        query_batch=(),
        kv_batch=(),
        window=(4, 2),
        softcap=2.0,
        alibi="H",
        sinks=True,
        mask_mod=prefix_lm,
        float_mask=(13, 21),
    ),
}


@requires("torch")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", VARIANTS.values(), ids=VARIANTS.keys())
def test_each_variant_matches_the_oracle(case, engine, dtype):
    check(case, [engine], dtype, seed=10)


# Variants together, with GQA and broadcast batch dimensions.
COMBINATIONS = {
    "gqa-bottom-right-window-softcap-sinks": Case(
        query_batch=(2, 4), kv_batch=(2, 2), gqa=True, is_causal=True, alignment="bottom_right",
        window=(5, None), softcap=2.0, sinks=True,
    ),
    "broadcast-alibi-BH-mask-mod-float-mask": Case(
        query_batch=(2, 1, 3), kv_batch=(1, 4, 3), alibi="BH", mask_mod=strided_by_head, float_mask=(4, 1, 1, 21),
    ),
    "gqa-broadcast-everything-L>S": Case(
        query_batch=(3, 1, 4), kv_batch=(1, 2, 2), gqa=True, L=21, S=13, is_causal=True, alignment="bottom_right",
        window=(6, 0), softcap=3.0, alibi="BH", sinks=True, float_mask=(4, 21, 13), mask_neg_inf=True,
        mask_mod=strided_by_head, scale=0.5,
    ),
    "top-left-causal-alibi-sinks-bool-mask": Case(is_causal=True, alibi="H", sinks=True, bool_mask=(3, 1, 21)),
    "window-softcap-float-mask-neg-inf": Case(window=(2, 4), softcap=1.0, float_mask=(13, 21), mask_neg_inf=True),
    "bottom-right-mask-mod-empty-rows-sinks": Case(
        alignment="bottom_right", is_causal=True, mask_mod=nothing_for_even_queries, sinks=True, **LONGER_QUERIES
    ),
}  # fmt: skip


@requires("torch")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", COMBINATIONS.values(), ids=COMBINATIONS.keys())
def test_combinations_match_the_oracle(case, engine, dtype):
    check(case, [engine], dtype, seed=11)


# Float masks of every broadcast shape against the (2, 3, L, S) attention: the gradient
# comes back summed to the mask's own shape.
MASK_SHAPES = {
    "L,S": (13, 21),
    "H,L,S": (3, 13, 21),
    "1,S": (1, 21),
    "L,1": (13, 1),
    "B,1,1,S": (2, 1, 1, 21),
    "S": (21,),
    "0-d": (),
}


@requires("torch")
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", MASK_SHAPES.values(), ids=MASK_SHAPES.keys())
def test_the_float_mask_gradient_is_summed_to_its_shape(shape, engine):
    case = Case(float_mask=shape, window=(6, 3), sinks=True)
    arrays, _ = check(case, [engine], np.float64, seed=12)
    grads = run_attnlab(case, arrays, engine)[1]
    assert grads.attn_mask.shape == shape


# Lengths around the block edges (512 keys, 512 queries; 256 in the fused engine's
# compiled causal forward), one slice of two heads of width 8 in float64.
EDGE_VARIANTS = {
    "window-bottom-right-causal": dict(window=(300, 0), is_causal=True, alignment="bottom_right"),
    "softcap-alibi-sinks": dict(softcap=2.0, alibi="H", sinks=True, scale=1.0),
    "mask-mod-documents-float-mask": dict(mask_mod=documents, float_mask=(1, "S")),
    "causal-top-left": dict(is_causal=True),  # the fused engine's compiled tasks
    "window-right-alibi-bottom-right": dict(window=(None, 40), alibi="H", alignment="bottom_right"),
    "window-tight": dict(window=(1, 1)),  # the band's edges on the blocks' edges
    "float-mask-H,L,S-bottom-right-causal": dict(float_mask=("H", "L", "S"), is_causal=True, alignment="bottom_right"),
    "float-mask-L,1-sinks": dict(float_mask=("L", 1), sinks=True),
}
EDGE_LENGTHS = [(255, 513), (256, 256), (257, 1025), (511, 512), (512, 511), (513, 513), (513, 257), (1025, 255)]
# the default run: each variant at the lengths that matter most to it
EDGE_DEFAULT = [
    ("window-bottom-right-causal", (257, 1025)),
    ("window-bottom-right-causal", (1025, 255)),
    ("softcap-alibi-sinks", (511, 513)),
    ("mask-mod-documents-float-mask", (513, 1025)),
    ("causal-top-left", (257, 512)),
    ("causal-top-left", (1025, 511)),
    ("window-right-alibi-bottom-right", (512, 256)),
    ("window-tight", (1025, 1025)),
    ("float-mask-H,L,S-bottom-right-causal", (1025, 513)),
    ("float-mask-L,1-sinks", (513, 257)),
]


def edge_case(variant: str, lengths: tuple[int, int]) -> Case:
    """``EDGE_VARIANTS[variant]`` on batch (1, 2) at (L, S) = ``lengths``."""
    L, S = lengths
    spec = dict(EDGE_VARIANTS[variant])
    if "float_mask" in spec:  # its shape, in letters
        spec["float_mask"] = tuple({"H": 2, "L": L, "S": S}.get(n, n) for n in spec["float_mask"])
    return Case(query_batch=(1, 2), kv_batch=(1, 2), L=L, S=S, **spec)


@requires("torch")
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("variant", "lengths"), EDGE_DEFAULT, ids=[f"{v}-L{L}-S{S}" for v, (L, S) in EDGE_DEFAULT])
def test_lengths_around_the_block_edges(variant, lengths, engine):
    check(edge_case(variant, lengths), [engine], np.float64, seed=13)


@pytest.mark.slow
@requires("torch")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lengths", EDGE_LENGTHS, ids=[f"L{L}-S{S}" for L, S in EDGE_LENGTHS])
@pytest.mark.parametrize("variant", EDGE_VARIANTS)
def test_every_variant_at_every_block_edge(variant, lengths, dtype):
    check(edge_case(variant, lengths), available_engines(), dtype, seed=14)


@requires("torch")
@pytest.mark.parametrize("sinks", [False, True], ids=["no-sinks", "sinks"])
@pytest.mark.parametrize("engine", ENGINES)
def test_rows_with_nothing_allowed_give_zero_and_the_sinks_logit(engine, sinks):
    # bottom-right causal with L = 9 > S = 4: queries 0..4 see no key (j <= i − 5)
    case = Case(query_batch=(1, 2), kv_batch=(1, 2), L=9, S=4, is_causal=True, alignment="bottom_right", sinks=sinks)
    arrays, _ = check(case, [engine], np.float64, seed=15)
    result, grads = run_attnlab(case, arrays, engine)
    assert np.all(result.output[..., :5, :] == 0.0)
    expected_lse = np.broadcast_to(arrays["sinks"][:, None], (1, 2, 5)) if sinks else np.full((1, 2, 5), -np.inf)
    np.testing.assert_array_equal(result.lse[..., :5], expected_lse)
    assert np.all(np.isfinite(result.lse[..., 5:]))
    assert all(np.isfinite(g).all() for g in grads)
    assert np.all(grads.query[..., :5, :] == 0.0)


@pytest.mark.parametrize("engine", ENGINES)
def test_mask_mod_is_called_with_broadcast_integer_indices(engine):
    # batch (2, 3) before the heads, 4 heads: batch indexes the 6 flattened leading slices
    calls: list[tuple[np.ndarray, ...]] = []

    def recording(batch, head, q_idx, kv_idx):
        calls.append((batch, head, q_idx, kv_idx))
        return (kv_idx + batch + head) % 5 != 0

    rng = np.random.default_rng(16)
    q, k, v = (rng.standard_normal((2, 3, 4, 9, 8)) for _ in range(3))
    result = al.attention(q, k, v, mask_mod=recording, engine=engine)
    result.backward(np.ones_like(result.output))
    assert calls
    seen_batch, seen_head = set(), set()
    for batch, head, q_idx, kv_idx in calls:
        for index in (batch, head, q_idx, kv_idx):
            assert isinstance(index, np.ndarray) and index.dtype.kind == "i"
        np.broadcast_shapes(batch.shape, head.shape, q_idx.shape, kv_idx.shape)  # they broadcast
        assert q_idx.min() >= 0 and q_idx.max() < 9 and kv_idx.min() >= 0 and kv_idx.max() < 9
        seen_batch.update(np.unique(batch).tolist())
        seen_head.update(np.unique(head).tolist())
    assert seen_batch == set(range(6)) and seen_head == set(range(4))
    # and the verdict is the one of those indices: batch = 3·b0 + b1
    b = (3 * np.arange(2)[:, None] + np.arange(3)[None, :])[:, :, None, None, None]  # (2, 3, 1, 1, 1)
    h = np.arange(4)[:, None, None]  # (4, 1, 1)
    allowed = (np.arange(9)[None, :] + b + h) % 5 != 0  # (2, 3, 4, 1, 9): the key decides
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(8)
    scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(result.output, (weights / weights.sum(-1, keepdims=True)) @ v, atol=1e-12)


@requires("torch")
@pytest.mark.parametrize("engine", ENGINES)
def test_the_functional_forms_take_the_variants_and_grad_lse(engine):
    case = Case(
        query_batch=(2, 4), kv_batch=(2, 2), gqa=True, is_causal=True, alignment="bottom_right", window=(4, None),
        softcap=2.5, alibi="H", sinks=True, float_mask=(4, 13, 21), mask_mod=prefix_lm, scale=0.4,
    )  # fmt: skip
    arrays = make_inputs(case, np.float64, seed=17)
    expected = torch_oracle(case, arrays)
    keywords = variant_keywords(case, arrays)
    positional = [keywords.pop(name) for name in ("attn_mask", "is_causal", "scale", "enable_gqa")]
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    output, lse = al.scaled_dot_product_attention(
        q, k, v, positional[0], 0.0, *positional[1:], return_lse=True, engine=engine, **keywords
    )
    assert_matches(output, expected.output, np.float64, "output")
    assert_matches(lse, expected.lse, np.float64, "lse")
    for saved in ({}, {"output": output, "lse": lse}):  # recomputed, or from the forward's results
        grads = al.scaled_dot_product_attention_backward(
            arrays["grad_output"], q, k, v, *positional, engine=engine, grad_lse=arrays["grad_lse"],
            **keywords, **saved,
        )  # fmt: skip
        for name in ("query", "key", "value", "attn_mask", "sinks"):
            assert_matches(getattr(grads, name), getattr(expected, name), np.float64, f"grad {name}")


# The second oracles.


@requires("torch")
@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs")  # it gives 0 in torch 2.13
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("lengths", [(7, 19), (19, 7), (12, 12)], ids=["L<S", "L>S", "L=S"])
def test_bottom_right_causal_is_torchs_causal_lower_right(lengths, engine):
    from torch.nn.attention.bias import causal_lower_right

    L, S = lengths
    rng = np.random.default_rng(18)
    q, k, v = rng.standard_normal((2, 3, L, 8)), rng.standard_normal((2, 3, S, 8)), rng.standard_normal((2, 3, S, 5))
    grad = rng.standard_normal((2, 3, L, 5))
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=causal_lower_right(L, S))
    expected.backward(torch.tensor(grad))
    result = al.attention(q, k, v, is_causal=True, causal_alignment="bottom_right", engine=engine)
    assert_matches(result.output, expected.detach().numpy(), np.float64, "output")
    for ours, theirs in zip(result.backward(grad), (tq, tk, tv), strict=True):
        assert_matches(ours, theirs.grad.numpy(), np.float64, "gradient")


def flex_attention(case: Case, arrays: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """torch's flex_attention, eager, on ``case``: its mask_mod (and is_causal, the window)
    as a block mask made on the CPU, softcap and ALiBi as a score_mod; (output, lse)."""
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask
    from torch.nn.attention.flex_attention import flex_attention as flex

    offset, slopes = case.offset, arrays.get("alibi_slopes")
    slopes = None if slopes is None else torch.tensor(slopes.astype(np.float64))  # (H,)

    def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        allowed = kv_idx >= 0
        if case.is_causal:
            allowed = allowed & (kv_idx <= q_idx + offset)
        if case.window is not None:
            left, right = case.window
            if left is not None:
                allowed = allowed & (kv_idx >= q_idx + offset - left)
            if right is not None:
                allowed = allowed & (kv_idx <= q_idx + offset + right)
        return allowed if case.mask_mod is None else allowed & case.mask_mod(b, h, q_idx, kv_idx)

    def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        if case.softcap is not None:
            score = case.softcap * torch.tanh(score / case.softcap)
        if slopes is not None:
            score = score - slopes[h] * torch.abs(kv_idx - q_idx - offset)
        return score

    B, H = case.batch_shape
    q, k, v = (torch.tensor(arrays[n].astype(np.float64)) for n in ("q", "k", "v"))  # no grad: CPU has no backward
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        block_mask = create_block_mask(mask_mod, B, H, case.L, case.S, device="cpu")
        output, aux = flex(
            q, k, v, score_mod=score_mod, block_mask=block_mask, scale=case.scale, enable_gqa=case.gqa,
            return_aux=AuxRequest(lse=True),
        )  # fmt: skip
    return output.numpy(), aux.lse.numpy()


FLEX_CASES = {
    "mask-mod": Case(mask_mod=strided_by_head),
    "mask-mod-empty-rows": Case(mask_mod=nothing_for_even_queries),
    "softcap": Case(softcap=0.8, scale=1.5),
    "alibi": Case(alibi="H"),
    "gqa-bottom-right-window-softcap-alibi-mask-mod": Case(
        query_batch=(2, 4), kv_batch=(2, 2), gqa=True, is_causal=True, alignment="bottom_right", window=(5, 2),
        softcap=2.0, alibi="H", mask_mod=prefix_lm, L=21, S=13,
    ),
    "documents-causal-L300-S700": Case(
        query_batch=(1, 2), kv_batch=(1, 2), L=300, S=700, mask_mod=documents, window=(None, 0),
    ),
}  # fmt: skip


@requires("torch")
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", FLEX_CASES.values(), ids=FLEX_CASES.keys())
def test_flex_attention_agrees(case, engine):
    arrays = make_inputs(case, np.float64, seed=19)
    output, lse = flex_attention(case, arrays)
    result = al.attention(arrays["q"], arrays["k"], arrays["v"], engine=engine, **variant_keywords(case, arrays))
    assert_matches(result.output, output, np.float64, "output")
    assert_matches(result.lse, lse, np.float64, "lse")


@requires("torch")
@pytest.mark.parametrize("engine", ENGINES)
def test_sinks_are_flex_attention_renormalised_by_its_lse(engine):
    # a sink s joins the softmax: O_sink = O·σ(lse − s) and lse_sink = logaddexp(lse, s)
    case = Case(mask_mod=nothing_for_even_queries, window=(3, 3))
    sinks = np.random.default_rng(20).standard_normal(3)
    arrays = make_inputs(case, np.float64, seed=20)
    output, lse = flex_attention(case, arrays)
    kept = np.where(np.isneginf(lse), 0.0, 1.0 / (1.0 + np.exp(sinks[:, None] - lse)))[..., None]
    arrays["sinks"] = sinks
    result = al.attention(arrays["q"], arrays["k"], arrays["v"], engine=engine, **variant_keywords(case, arrays))
    assert_matches(result.output, output * kept, np.float64, "output")
    assert_matches(result.lse, np.logaddexp(lse, np.broadcast_to(sinks[:, None], lse.shape)), np.float64, "lse")


@requires("torch")
def test_flex_attention_gradients():
    from torch.nn.attention.flex_attention import flex_attention as flex

    q, k, v = (torch.zeros(1, 1, 4, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            flex(q, k, v).sum().backward()
    except NotImplementedError as error:  # torch 2.13: "FlexAttention does not support backward on CPU"
        pytest.skip(f"flex_attention has no backward here ({error}); the gradients are checked against the oracle")
    pytest.fail("flex_attention has a backward on the CPU now: compare attnlab's gradients with it")


# Bad input: each an ArgumentError (ArgumentTypeError for a wrong type) naming the argument.

BAD_ARGUMENTS = {
    "window-negative-left": ("window", dict(window=(-1, 0)), al.ArgumentError),
    "window-negative-right": ("window", dict(window=(None, -3)), al.ArgumentError),
    "window-not-a-pair": ("window", dict(window=(2,)), al.ArgumentTypeError),
    "window-float-side": ("window", dict(window=(1.5, 0)), al.ArgumentTypeError),
    "softcap-zero": ("softcap", dict(softcap=0.0), al.ArgumentError),
    "softcap-negative": ("softcap", dict(softcap=-2.0), al.ArgumentError),
    "softcap-nan": ("softcap", dict(softcap=math.nan), al.ArgumentError),
    "softcap-inf": ("softcap", dict(softcap=math.inf), al.ArgumentError),
    "softcap-a-string": ("softcap", dict(softcap="2"), al.ArgumentTypeError),
    "sinks-too-short": ("sinks", dict(sinks=np.zeros(2)), al.ArgumentError),
    "sinks-too-long": ("sinks", dict(sinks=np.zeros(4)), al.ArgumentError),
    "sinks-per-batch": ("sinks", dict(sinks=np.zeros((2, 3))), al.ArgumentError),
    "alignment-unknown": ("causal_alignment", dict(causal_alignment="bottom-right"), al.ArgumentError),
    "alignment-none": ("causal_alignment", dict(causal_alignment=None), al.ArgumentError),
    "alibi-wrong-heads": ("alibi_slopes", dict(alibi_slopes=np.ones(4)), al.ArgumentError),
    "alibi-wrong-batch": ("alibi_slopes", dict(alibi_slopes=np.ones((3, 3))), al.ArgumentError),
    "alibi-three-dimensions": ("alibi_slopes", dict(alibi_slopes=np.ones((1, 2, 3))), al.ArgumentError),
    "alibi-strings": ("alibi_slopes", dict(alibi_slopes=np.array(["a", "b", "c"])), al.ArgumentTypeError),
    "mask-mod-not-callable": ("mask_mod", dict(mask_mod=3), al.ArgumentTypeError),
}


@pytest.mark.parametrize(("name", "keywords", "error"), BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_bad_variant_arguments_are_refused(name, keywords, error):
    rng = np.random.default_rng(21)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    for call in (al.attention, al.scaled_dot_product_attention):
        with pytest.raises(error) as raised:
            call(q, k, v, **keywords)
        assert raised.value.argument == name and str(raised.value).startswith(f"{name}:")
    with pytest.raises(error, match=f"^{name}:"):
        al.scaled_dot_product_attention_backward(np.ones((2, 3, 5, 4)), q, k, v, **keywords)


BAD_MASK_MODS = {
    "int-array": lambda b, h, q, kv: (kv - q).astype(np.int64),
    "float-array": lambda b, h, q, kv: (kv >= q).astype(np.float64),
    "python-bool": lambda b, h, q, kv: True,
    "list": lambda b, h, q, kv: [[True]],
    "wrong-shape": lambda b, h, q, kv: np.ones((3, 1, 1), dtype=bool),
    "too-large": lambda b, h, q, kv: np.ones((*np.broadcast_shapes(b.shape, q.shape, kv.shape)[:-1], 99), bool),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("mask_mod", BAD_MASK_MODS.values(), ids=BAD_MASK_MODS.keys())
def test_a_mask_mod_that_does_not_return_a_fitting_bool_array_is_refused(mask_mod, engine):
    rng = np.random.default_rng(22)
    q, k, v = (rng.standard_normal((2, 2, 5, 4)) for _ in range(3))
    with pytest.raises(al.ArgumentError, match=r"^mask_mod:") as raised:
        al.attention(q, k, v, mask_mod=mask_mod, engine=engine)
    assert raised.value.argument == "mask_mod"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("shape", [(2, 3, 6), (2, 3, 5, 1), (3, 5), ()], ids=["L+1", "extra-dim", "no-batch", "0-d"])
def test_a_grad_lse_of_the_wrong_shape_is_refused(shape, engine):
    rng = np.random.default_rng(23)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    grad = np.ones((2, 3, 5, 4))
    result = al.attention(q, k, v, sinks=np.zeros(3), engine=engine)
    with pytest.raises(al.ArgumentError, match=r"^grad_lse:") as raised:
        result.backward(grad, np.zeros(shape))
    assert raised.value.argument == "grad_lse"
    with pytest.raises(al.ArgumentError, match=r"^grad_lse:"):
        al.scaled_dot_product_attention_backward(
            grad, q, k, v, sinks=np.zeros(3), engine=engine, grad_lse=np.zeros(shape)
        )


# The big cross-product: every combination of the variants on one small GQA shape with
# broadcast batch dimensions, every engine, both dtypes.

CAUSAL = {
    "no-causal": dict(),
    "causal-top-left": dict(is_causal=True),
    "causal-bottom-right": dict(is_causal=True, alignment="bottom_right"),
    "bottom-right": dict(alignment="bottom_right"),  # the window's and ALiBi's diagonal only
}
WINDOWS = {"no-window": None, "window-5,0": (5, 0), "window-none,3": (None, 3), "window-4,6": (4, 6)}
SOFTCAPS = {"no-softcap": None, "softcap-1.5": 1.5}
ALIBIS = {"no-alibi": None, "alibi-H": "H", "alibi-BH": "BH"}
SINKS = {"no-sinks": False, "sinks": True}
MASKS = {
    "no-mask": {},
    "float-mask": dict(float_mask=(3, 1, 11), mask_neg_inf=True),
    "bool-mask": dict(bool_mask=(9, 11)),
}
MASK_MODS = {"no-mask-mod": None, "mask-mod": strided_by_head}
LENGTHS = {"L<S": (9, 11), "L>S": (11, 9)}
DTYPE_NAMES = {"float64": np.float64, "float32": np.float32}
# 4,608 cases in all; every run takes their pairwise cover (every two values of any two
# dimensions meet in some case), pytest -m exhaustive the rest
DIMENSIONS = [LENGTHS, CAUSAL, WINDOWS, SOFTCAPS, ALIBIS, SINKS, MASKS, MASK_MODS, DTYPE_NAMES]
PRODUCT = covered_product([list(d) for d in DIMENSIONS])


@requires("torch")
@pytest.mark.parametrize("lengths, causal, window, softcap, alibi, sinks, mask, mask_mod, dtype", PRODUCT)
def test_the_cross_product_of_variants_matches_the_oracle(
    lengths, causal, window, softcap, alibi, sinks, mask, mask_mod, dtype
):
    L, S = LENGTHS[lengths]
    dtype = DTYPE_NAMES[dtype]
    masks = dict(MASKS[mask])
    if "float_mask" in masks:
        masks["float_mask"] = (3, 1, S)
    if "bool_mask" in masks:
        masks["bool_mask"] = (L, S)
    case = Case(
        query_batch=(2, 1, 3), kv_batch=(1, 2, 1), gqa=True, L=L, S=S, window=WINDOWS[window],
        softcap=SOFTCAPS[softcap], alibi=ALIBIS[alibi], sinks=SINKS[sinks], mask_mod=MASK_MODS[mask_mod],
        **CAUSAL[causal], **masks,
    )  # fmt: skip
    check(case, available_engines(), dtype, seed=24)


def test_the_cases_are_what_their_names_say():
    # the oracle's own inputs: shapes, the batch of the (B, H) slopes, L > S where named
    assert Case(query_batch=(3, 1, 4), kv_batch=(1, 2, 2), gqa=True).batch_shape == (3, 2, 4)
    assert Case(query_batch=(2, 1, 3), kv_batch=(1, 4, 3)).batch_shape == (2, 4, 3)
    assert make_inputs(Case(alibi="BH"), np.float64, 0)["alibi_slopes"].shape == (2, 3)
    for name, case in VARIANTS.items():
        assert ("L>S" in name) == (case.L > case.S)


@pytest.mark.parametrize("engine", ENGINES)
def test_sinks_over_zero_heads_give_empty_gradients(engine):
    """Nothing to attend and no head: every gradient is empty, the sinks' of shape (0,)."""
    query, key, value = np.zeros((2, 0, 4, 3)), np.zeros((2, 0, 5, 3)), np.zeros((2, 0, 5, 2))
    result = al.attention(query, key, value, sinks=np.zeros(0), engine=engine)
    grads = result.backward(np.zeros((2, 0, 4, 2)))
    assert [g.shape for g in grads] == [(2, 0, 4, 3), (2, 0, 5, 3), (2, 0, 5, 2)]
    assert grads.sinks.shape == (0,)
