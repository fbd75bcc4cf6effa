"""A trace as JSON and back: the arrays' encoding (JSON has no NaN or infinity) and the
checks a saved trace passes before it is a :class:`~._trace.Trace` again."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .._validation import ArgumentError, Array, is_integer
from ._variants import Variants

__all__ = ["ARRAYS", "decoded_fields", "json_field", "json_ready"]

ARRAYS = ("inputs", "Q", "K", "V", "scores", "scaled_scores", "weights", "output")


# JSON has no NaN or infinity: −∞ (a masked score) is written null, +∞ "Infinity" and
# NaN "NaN", so that every trace is valid JSON and reads back as it was.
_NON_FINITE = {"Infinity": math.inf, "NaN": math.nan}


def json_ready(value: Any) -> Any:
    """Nested lists of Python floats, the non-finite ones encoded as above."""
    if isinstance(value, list):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if value < 0 else "NaN" if math.isnan(value) else "Infinity"
    return value


def _number(value: Any) -> Any:
    """One number of :func:`json_ready`'s encoding, decoded."""
    if value is None:
        return -math.inf
    if isinstance(value, str):
        return _NON_FINITE[value]  # KeyError: not a number
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)  # OverflowError: an integer beyond float range


_decode = np.frompyfunc(_number, 1, 1)


def _from_json(value: Any) -> Array:
    """Inverse of :func:`json_ready`, as a float array (NumPy refuses nesting past 64
    levels and ragged rows, so a hostile document never recurses deeply)."""
    raw = np.array(value, dtype=object)
    return np.asarray(_decode(raw), dtype=float) if raw.size else raw.astype(float)


def json_field(value: Any) -> Any:
    """A trace's field as :meth:`Trace.to_dict` writes it."""
    if isinstance(value, np.ndarray):  # only a matrix with non-finite values needs the walk
        return value.tolist() if np.isfinite(value).all() else json_ready(value.tolist())
    return value.to_dict() if isinstance(value, Variants) else value


def _decoded(data: dict[str, Any], name: str, source: str) -> Array:
    """Field ``name`` of a saved trace as a float array, or an error naming it."""
    try:
        return _from_json(data[name])
    except (TypeError, ValueError, KeyError, OverflowError, RecursionError):
        raise ArgumentError(f"{source}: {name}: expected a matrix of numbers") from None


def decoded_fields(data: Any, source: str) -> dict[str, Any]:
    """The fields of a saved trace, checked: :meth:`Trace.from_dict`'s keywords to ``Trace``."""
    if not isinstance(data, dict):
        raise ArgumentError(f"{source}: expected a trace (a dict as Trace.to_dict gives)")
    missing = [name for name in (*ARRAYS, "scale") if name not in data]
    if missing:
        raise ArgumentError(f"{source}: not a trace, missing {', '.join(missing)}")
    arrays = {name: _decoded(data, name, source) for name in ARRAYS}
    if arrays["inputs"].ndim != 2 or 0 in arrays["inputs"].shape:
        raise ArgumentError(f"{source}: inputs: expected a (L, d_model) matrix, got shape {arrays['inputs'].shape}")
    L = arrays["inputs"].shape[0]
    weights = arrays["weights"]
    if weights.ndim not in (2, 3) or weights.shape[-2] != L or weights.shape[-1] < 1:
        raise ArgumentError(
            f"{source}: weights: expected shape (L, S) or (H, L, S) with L={L} input rows, got {weights.shape}"
        )
    S = weights.shape[-1]
    for name in ("scores", "scaled_scores"):
        if arrays[name].shape != weights.shape:
            raise ArgumentError(
                f"{source}: {name}: expected shape {weights.shape} as weights, got {arrays[name].shape}"
            )
    queries = weights.shape[:-1]  # (L,) or (H, L): Q and the output have one row per query and head
    keys = (*weights.shape[:-2], S)  # (S,) or (H, S): K and V one per key and head
    for name, like, rows in (("Q", "Q", queries), ("K", "Q", keys), ("V", "V", keys), ("output", "V", queries)):
        shape, expected = arrays[name].shape, (*rows, arrays[like].shape[-1] if arrays[like].ndim else -1)
        if arrays[name].ndim != len(expected) or shape != expected or shape[-1] < 1:
            raise ArgumentError(f"{source}: {name}: expected shape {(*rows, 'width')}, got {shape}")
    layer_output = None
    if data.get("layer_output") is not None:
        layer_output = _decoded(data, "layer_output", source)
        if layer_output.ndim != 2 or layer_output.shape[0] != L or weights.ndim != 3:
            wanted = f"shape ({L}, width) beside (H, L, L) weights"
            raise ArgumentError(f"{source}: layer_output: expected {wanted}, got {layer_output.shape}")
    tokens = data.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != L):
        raise ArgumentError(
            f"{source}: tokens: expected {L} labels, one per input row, got "
            f"{len(tokens) if isinstance(tokens, list) else type(tokens).__name__}"
        )
    if tokens is not None and not all(isinstance(t, str) for t in tokens):
        bad = next(t for t in tokens if not isinstance(t, str))
        raise ArgumentError(f"{source}: tokens: expected labels (strings), got {json.dumps(bad)}")
    key_tokens = _saved_key_tokens(data, S, source)
    scale = data["scale"]
    try:
        finite = not isinstance(scale, bool) and isinstance(scale, (int, float)) and math.isfinite(scale)
    except OverflowError:  # an integer beyond float range
        finite = False
    if not finite:
        got = f"an integer of {len(str(scale))} digits" if type(scale) is int else repr(scale)  # a bool: True
        raise ArgumentError(f"{source}: scale: expected a finite number, got {got}")
    # kept as saved, lone surrogates (a Linux argument's undecodable bytes) included: each
    # display (text, plot, page) escapes them and control characters, as display_text says
    labels = None if tokens is None else [str(t) for t in tokens]
    seed = data.get("random_seed")
    if seed is not None and (not is_integer(seed) or seed < 0):
        raise ArgumentError(f"{source}: random_seed: expected a whole number ≥ 0 or null, got {seed!r}")
    bias, variants = _saved_variants(data, weights.shape, source)
    _check_not_numbers(arrays, float(scale), bias, source)
    return {
        "scale": float(data["scale"]), "tokens": labels, "layer_output": layer_output, "random_seed": seed,
        "bias": bias, "variants": variants, "key_tokens": key_tokens, **arrays,
    }  # fmt: skip


def _saved_key_tokens(data: dict[str, Any], keys: int, source: str) -> list[str] | None:
    """A saved trace's key tokens: null (absent in traces from before), or ``keys`` strings, one per key."""
    key_tokens = data.get("key_tokens")
    if key_tokens is None:
        return None
    if not isinstance(key_tokens, list) or len(key_tokens) != keys:
        got = f"{len(key_tokens)} labels" if isinstance(key_tokens, list) else type(key_tokens).__name__
        raise ArgumentError(f"{source}: key_tokens: expected {keys} labels, one per key (S = {keys}), got {got}")
    if not all(isinstance(t, str) for t in key_tokens):
        bad = next(t for t in key_tokens if not isinstance(t, str))
        raise ArgumentError(f"{source}: key_tokens: expected labels (strings), got {json.dumps(bad)}")
    return list(key_tokens)


# Below this no score of any dtype overflows (it is float16's largest number), so a saved
# score that is not a number there was not computed: it was written in.
_NO_OVERFLOW = 65504.0


def _check_not_numbers(arrays: dict[str, Array], scale: float, bias: Array | None, source: str) -> None:
    """A saved trace's NaN and infinities, where the engine makes them: a score s = q·k is
    non-finite only past overflow, Σ|q||k| ≥ :data:`_NO_OVERFLOW`; a weight is NaN only in a
    row where some scaled score can overflow (|scale|·Σ|q||k| ≥ it, or a bias is +∞, NaN or
    beyond it). Elsewhere a NaN or null (−∞) was written in by hand, and is refused.

    Raises:
        ArgumentError: a non-finite score, or a NaN weight, where none can arise.
    """
    Q, K = np.abs(arrays["Q"]), np.abs(arrays["K"])
    with np.errstate(all="ignore"):
        bound = Q @ np.swapaxes(K, -1, -2)  # (…, L, L): |q·k| ≤ Σ|q||k|, NaN where q or k is
    scores = arrays["scores"]
    written = ~np.isfinite(scores) & (bound < _NO_OVERFLOW)
    if written.any():
        *_, i, j = np.argwhere(written)[0]
        got = scores[tuple(np.argwhere(written)[0])]
        where = "null (−∞)" if np.isneginf(got) else str(got)
        raise ArgumentError(
            f"{source}: scores: expected q·k, a finite number where it cannot overflow, got {where} at row {i}, "
            f"column {j}"
        )
    with np.errstate(all="ignore"):
        overflows = ~(abs(scale) * bound < _NO_OVERFLOW)  # (…, L, L), NaN bounds included
        if bias is not None:
            overflows |= ~((bias < _NO_OVERFLOW) & ~np.isnan(bias))
    can_be_nan = overflows.any(axis=-1, keepdims=True)  # (…, L, 1): the row's softmax can see +∞ or NaN
    weights = arrays["weights"]
    written = np.isnan(weights) & ~can_be_nan
    if written.any():
        *_, i, j = np.argwhere(written)[0]
        raise ArgumentError(
            f"{source}: weights: expected numbers (no score of row {i} can overflow), got NaN at row {i}, column {j}"
        )
    with np.errstate(invalid="ignore"):  # a softmax's weights: each in [0, 1], a row summing to at most 1 (sinks: less)
        outside = ~can_be_nan & ~((weights >= 0) & (weights <= 1 + 1e-6))
        sums = np.where(can_be_nan[..., 0], 0.0, np.nansum(weights, axis=-1))
    expected = "a softmax's weights (each in [0, 1], a row's sum at most 1)"
    if outside.any():
        cell = tuple(np.argwhere(outside)[0])
        got = json.dumps(json_field(np.asarray(weights[cell]).reshape(1))[0])
        raise ArgumentError(f"{source}: weights: expected {expected}, got {got} at row {cell[-2]}, column {cell[-1]}")
    over = sums > 1 + 1e-5
    if over.any():
        cell = tuple(np.argwhere(over)[0])
        raise ArgumentError(f"{source}: weights: expected {expected}, got a sum of {sums[cell]:.6g} in row {cell[-1]}")
    for name in ("inputs", "Q", "K", "V", "output"):  # NaN only where a row's weights can be NaN
        nan = np.isnan(arrays[name]) if name != "output" else np.isnan(arrays[name]) & ~can_be_nan
        if nan.any():
            raise ArgumentError(
                f"{source}: {name}: expected numbers, got NaN at {tuple(map(int, np.argwhere(nan)[0]))}"
            )


def _saved_variants(data: dict[str, Any], shape: tuple[int, ...], source: str) -> tuple[Array | None, Variants | None]:
    """A saved trace's bias (checked to be of the scores' ``shape``) and variants, each None when not saved."""
    bias = None
    if data.get("bias") is not None:
        bias = _decoded(data, "bias", source)
        if bias.shape != shape:
            raise ArgumentError(f"{source}: bias: expected shape {shape} as weights, got {bias.shape}")
    heads = 1 if len(shape) == 2 else shape[0]
    variants = None if data.get("variants") is None else Variants.from_dict(data["variants"], source, heads)
    return bias, variants
