"""A saved model's trace read back (:meth:`~attnlab.trace.ModelTrace.from_dict`): each field
of its JSON checked as JSON (a list of strings, integers in range, an image's base64), each
entry read by :meth:`attnlab.Trace.from_dict`; :class:`~attnlab.trace.ModelTrace` then checks
that the fields fit together."""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from .._validation import ArgumentError
from ._trace import Trace

__all__ = ["saved_fields"]


def saved_fields(data: Any, source: str) -> dict[str, Any]:
    """Every field of :class:`~attnlab.trace.ModelTrace`, by name, from what its ``to_dict`` gave.

    Raises:
        ArgumentError: naming ``source`` and the first field that is missing or not of its kind.
    """
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
        "model": str(data.get("model")), "ids": ids, "tokens": tokens, "layers": dict(sorted(layers.items())),
        "num_layers": num_layers, "num_heads": num_heads, "special": special, "parts": parts, "opens": opens,
        "template": template, "notes": notes, "architecture": architecture, "num_key_value_heads": kv_heads,
    }  # fmt: skip
    fields.update(_saved_names(data, num_layers, source))
    fields.update(_saved_source(data, source))
    fields.update(_saved_image(data, source))
    return fields


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
