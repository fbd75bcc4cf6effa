"""The checks of a model's trace, built or read back: every entry over the tokens its kind
says, its kinds and module names, the source sequence, and the image against its patch
grid (:class:`~attnlab.trace.ModelTrace` holds the fields; this module says when they fit)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from .._validation import ArgumentError
from ._trace import Trace

# ModelTrace is typed Any here: its module imports this one, and a TYPE_CHECKING import
# back would be the one cycle in the package (lint-imports counts it)
ModelTrace = Any

__all__ = ["KINDS", "check_model_trace", "image_sequence", "model_trace_from_dict"]

# "self": a decoder-only or encoder-only model's layer; an encoder-decoder model's two
# self-attentions ("encoder", over the source; "decoder", over the tokens) and its "cross"
# attention (the decoder's queries over the encoder's keys)
KINDS = ("self", "encoder", "decoder", "cross")


def image_sequence(trace: ModelTrace) -> str | None:
    """Which sequence a trace's image's patches are: "source" (an encoder-decoder's, TrOCR's), "tokens", or None."""
    return None if trace.patch_grid is None else "source" if trace.source_tokens is not None else "tokens"


def check_model_trace(trace: ModelTrace, source: str) -> None:
    """Refuse a model's trace whose parts do not fit together.

    Raises:
        ArgumentError: naming ``source`` and the first field that does not fit: a kind not
            in :data:`KINDS` (or "self" beside an encoder-decoder's kinds), a module or kind
            missing for a traced entry, an entry not over the tokens its kind says, a source
            sequence whose lists differ in length, an image that is not uint8 (height,
            width, 3), or a patch grid that does not cut the image evenly or whose rows·cols
            is not the number of patch tokens.
    """
    traced = sorted(trace.layers)
    for name, values in (("kinds", trace.kinds), ("modules", trace.modules)):
        if values and not set(traced) <= set(values):
            missing = next(i for i in traced if i not in values)
            raise ArgumentError(f"{source}: {name}: expected one for every traced entry, none for entry {missing}")
    bad = next((k for k in trace.kinds.values() if k not in KINDS), None)
    if bad is not None:
        raise ArgumentError(f"{source}: kinds: expected each one of {', '.join(KINDS)}, got {bad!r}")
    if "self" in trace.kinds.values() and len(set(trace.kinds.values())) > 1:
        raise ArgumentError(
            f"{source}: kinds: expected either self (one sequence) or encoder, decoder and cross (two), got both"
        )
    names = list(trace.modules.values())
    if not all(isinstance(m, str) and m for m in names) or len(set(names)) != len(names):
        raise ArgumentError(f"{source}: modules: expected distinct module paths (non-empty strings)")
    _check_source(trace, source)
    for i in traced:
        _check_entry(trace, i, source)
    _check_image(trace, source)


def _check_source(trace: ModelTrace, source: str) -> None:
    """The source sequence: present where an entry is over it, its lists one per token."""
    two = any(k in ("encoder", "cross") for k in trace.kinds.values())
    if trace.source_tokens is None:
        if two:
            raise ArgumentError(
                f"{source}: source_tokens: expected the encoder's tokens beside encoder or cross entries"
            )
        return
    tokens = trace.source_tokens
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or not tokens:
        raise ArgumentError(f"{source}: source_tokens: expected a list of strings")
    n = len(tokens)
    ids = trace.source_ids
    if ids is not None and ids != [] and not (len(ids) == n and all(type(i) is int for i in ids)):
        raise ArgumentError(f"{source}: source_ids: expected null, [] or {n} integers, one per source token")
    if len(trace.source_special) != n or not all(type(x) is bool for x in trace.source_special):
        raise ArgumentError(f"{source}: source_special: expected {n} booleans, one per source token")
    if len(trace.source_parts) != n or not all(isinstance(x, str) for x in trace.source_parts):
        raise ArgumentError(f"{source}: source_parts: expected {n} strings, one per source token")


def _check_entry(trace: ModelTrace, i: int, source: str) -> None:
    """Entry ``i`` over the tokens its kind says: rows and keys."""
    kind, where = trace.kind(i), f"{source}, layer {i}" + (f" ({trace.modules[i]})" if i in trace.modules else "")
    one = trace.layers[i]
    rows = trace.source_tokens if kind == "encoder" else trace.tokens
    assert rows is not None  # _check_source: an encoder entry has its source
    sequence = "source tokens" if kind == "encoder" else "tokens"
    if one.tokens != rows:
        raise ArgumentError(f"{where}: tokens: {first_difference(rows, one.tokens, sequence)}")
    if kind == "cross":
        keys = trace.source_tokens
        assert keys is not None
        if one.key_tokens != keys:
            raise ArgumentError(f"{where}: key_tokens: {first_difference(keys, one.key_tokens, 'source tokens')}")
    elif one.num_keys != len(rows) or one.key_tokens not in (None, rows):
        got = one.num_keys if one.key_tokens is None else f"{one.num_keys}, labelled otherwise"
        raise ArgumentError(f"{where}: expected {kind} attention's keys, the {len(rows)} {sequence}, got {got}")


def first_difference(tokens: list[str], got: list[str] | None, sequence: str = "tokens") -> str:
    """Where an entry's tokens part from the trace's: "expected …, got …" naming the first token that differs."""
    if got is None or len(got) != len(tokens):
        return f"expected the trace's {len(tokens)} {sequence}, got {'none' if got is None else len(got)}"
    i = next(i for i, (want, have) in enumerate(zip(tokens, got, strict=True)) if want != have)
    return f"expected the trace's {sequence}, got token {i} {got[i]!r} where the trace has {tokens[i]!r}"


def _check_image(trace: ModelTrace, source: str) -> None:
    """The image, uint8 (height, width, 3), cut evenly by the patch grid into as many
    patches as the image's sequence has tokens that are not special."""
    image, grid = trace.image, trace.patch_grid
    if (image is None) != (grid is None):
        raise ArgumentError(f"{source}: image and patch_grid: expected both (a vision model's trace) or neither")
    if image is None or grid is None:
        return
    if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3):
        got = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
        raise ArgumentError(f"{source}: image: expected uint8 pixels (height, width, 3), got {got}")
    if len(grid) != 2 or not all(type(n) is int and n > 0 for n in grid):
        raise ArgumentError(f"{source}: patch_grid: expected (rows, cols), two whole numbers > 0, got {grid!r}")
    (height, width, _), (rows, cols) = image.shape, grid
    if height % rows or width % cols:
        raise ArgumentError(
            f"{source}: patch_grid: expected rows and cols that cut the {height}×{width} image into equal patches, "
            f"got {rows}×{cols}"
        )
    on_source = image_sequence(trace) == "source"
    special = trace.source_special if on_source else trace.special
    patches = special.count(False)
    if patches != rows * cols:
        sequence = "source tokens" if on_source else "tokens"
        raise ArgumentError(
            f"{source}: patch_grid: expected {patches} patches, one per {sequence[:-1]} not marked special "
            f"([CLS] and the like), got {rows}×{cols} = {rows * cols}"
        )


def model_trace_from_dict(cls: Any, data: Any, source: str) -> Any:
    """See :meth:`ModelTrace.from_dict`."""
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict) or not data["layers"]:
        raise ArgumentError(f"{source}: expected a model's trace, with its layers (as ModelTrace.to_dict gives)")
    tokens, ids = data.get("tokens"), data.get("ids")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArgumentError(f"{source}: tokens: expected a list of strings")
    if not isinstance(ids, list) or len(ids) not in (0, len(tokens)) or not all(type(i) is int for i in ids):
        raise ArgumentError(f"{source}: ids: expected {len(tokens)} integers, one per token (or [], none)")
    num_layers, num_heads = data.get("num_layers"), data.get("num_heads")
    if not (type(num_layers) is int and type(num_heads) is int and num_layers > 0 and num_heads > 0):
        got = f"{num_layers!r} and {num_heads!r}"
        raise ArgumentError(f"{source}: num_layers and num_heads: expected positive integers, got {got}")
    layers = {}
    for key, layer in data["layers"].items():
        if not key.isdigit() or not int(key) < num_layers:
            raise ArgumentError(f"{source}: layers: expected indices in 0..{num_layers - 1}, got {key!r}")
        trace = Trace.from_dict(layer, f"{source}, layer {key}")
        if trace.num_heads != num_heads:
            raise ArgumentError(f"{source}, layer {key}: expected the trace's {num_heads} heads, got {trace.num_heads}")
        layers[int(key)] = trace
    special = _flags(data, "special", len(tokens), bool, "booleans", source)
    parts = _flags(data, "parts", len(tokens), str, "strings", source)
    template = _flags(data, "template", len(tokens), bool, "booleans", source)
    notes = data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ArgumentError(f"{source}: notes: expected a list of texts")
    opens = data.get("opens")
    if opens is not None and not (
        isinstance(opens, dict)
        and set(opens) <= {"layer", "head", "query"}
        and all(type(x) is int and x >= 0 for x in opens.values())
    ):
        raise ArgumentError(f"{source}: opens: expected null or whole numbers ≥ 0 under layer, head, query")
    architecture, kv_heads = data.get("architecture", ""), data.get("num_key_value_heads", 0)
    if not isinstance(architecture, str):
        raise ArgumentError(f"{source}: architecture: expected a text, got {type(architecture).__name__}")
    if not (type(kv_heads) is int and 0 <= kv_heads <= num_heads and (kv_heads == 0 or num_heads % kv_heads == 0)):
        raise ArgumentError(
            f"{source}: num_key_value_heads: expected 0 (unknown) or a divisor of the {num_heads} heads, "
            f"got {kv_heads!r}"
        )
    fields: dict[str, Any] = {
        "opens": opens, "template": template, "notes": notes, "architecture": architecture,
        "num_key_value_heads": kv_heads,
    }  # fmt: skip
    fields.update(_saved_names(data, num_layers, source))
    fields.update(_saved_source(data, source))
    fields.update(_saved_image(data, source))
    made = cls(
        str(data.get("model")), ids, tokens, dict(sorted(layers.items())), num_layers, num_heads, special, parts,
    )  # fmt: skip
    for name, value in fields.items():  # set after: the check below sees them all at once
        setattr(made, name, value)
    check_model_trace(made, source)  # an old trace too: every layer over the trace's tokens
    return made


def _flags(data: dict[str, Any], name: str, n: int, kind: type, words: str, source: str) -> list[Any]:
    """A saved list of ``n`` values of ``kind`` (a trace from before has none: the defaults)."""
    values = data.get(name)
    if values is None:
        return [kind()] * n
    if not (isinstance(values, list) and len(values) == n and all(type(x) is kind for x in values)):
        per = "source token" if name.startswith("source") else "token"
        raise ArgumentError(f"{source}: {name}: expected {n} {words}, one per {per}")
    return values


def _saved_names(data: dict[str, Any], num_layers: int, source: str) -> dict[str, dict[int, str]]:
    """The saved modules and kinds, {index: text}, each {} when absent (traces from before)."""
    named: dict[str, dict[int, str]] = {}
    for name in ("modules", "kinds"):
        values = data.get(name) or {}
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and k.isdigit() and int(k) < num_layers and isinstance(v, str) for k, v in values.items()
        ):
            raise ArgumentError(f"{source}: {name}: expected an object of texts under indices 0..{num_layers - 1}")
        named[name] = {int(k): v for k, v in sorted(values.items(), key=lambda item: int(item[0]))}
    return named


def _saved_source(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The saved source sequence: tokens (None: one sequence), ids, marks."""
    tokens = data.get("source_tokens")
    if tokens is None:
        return {}
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ArgumentError(f"{source}: source_tokens: expected a list of strings")
    n = len(tokens)
    return {
        "source_tokens": tokens,
        "source_ids": data.get("source_ids"),
        "source_special": _flags(data, "source_special", n, bool, "booleans", source),
        "source_parts": _flags(data, "source_parts", n, str, "strings", source),
    }


def _saved_image(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The saved image (base64 of its uint8 bytes, with its shape) and patch grid."""
    image, grid = data.get("image"), data.get("patch_grid")
    out: dict[str, Any] = {}
    if grid is not None:
        if not (isinstance(grid, list) and len(grid) == 2 and all(type(n) is int and n > 0 for n in grid)):
            raise ArgumentError(f"{source}: patch_grid: expected null or [rows, cols], two whole numbers > 0")
        out["patch_grid"] = (grid[0], grid[1])
    if image is not None:
        shape = image.get("shape") if isinstance(image, dict) else None
        if not (isinstance(shape, list) and len(shape) == 3 and all(type(n) is int and n > 0 for n in shape)):
            raise ArgumentError(f"{source}: image: expected null or {{shape: [height, width, 3], base64: …}}")
        try:
            raw = base64.b64decode(image.get("base64", ""), validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise ArgumentError(f"{source}: image: base64: expected the pixels' bytes in base64") from None
        if len(raw) != shape[0] * shape[1] * shape[2]:
            raise ArgumentError(f"{source}: image: expected {shape[0] * shape[1] * shape[2]} bytes, got {len(raw)}")
        out["image"] = np.frombuffer(raw, dtype=np.uint8).reshape(shape).copy()  # (height, width, channels)
    return out
