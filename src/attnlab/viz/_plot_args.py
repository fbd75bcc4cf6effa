"""What every picture of attnlab (a trace's heatmaps, rollout, a model's statistics) takes
alike: its file's path and the heads it draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._validation import fail, is_integer, output_path

__all__ = ["FORMATS", "check_path", "select_heads"]

FORMATS = (".png", ".svg", ".pdf")


def select_heads(spec: Any, num_heads: int) -> list[int]:
    """``"all"``, comma-separated indices such as ``"0,2,5"``, or a sequence of ints:
    distinct head indices in 0..num_heads − 1."""
    if isinstance(spec, str):
        if spec == "all":
            return list(range(num_heads))
        try:
            heads = [int(part) for part in spec.split(",")]
        except ValueError:
            raise fail("heads", "'all' or indices such as 0,2,5", repr(spec)) from None
    elif isinstance(spec, (list, tuple)) and all(is_integer(h) for h in spec):
        heads = [int(h) for h in spec]
    else:
        raise fail("heads", "'all', indices such as '0,2,5', or a list of ints", repr(spec), TypeError)
    if not heads or any(not 0 <= h < num_heads for h in heads):
        raise fail("heads", f"indices in 0..{num_heads - 1}", repr(spec))
    if len(set(heads)) != len(heads):
        raise fail("heads", "each head once", repr(spec))
    return heads


def check_path(path: str | Path) -> Path:
    """``path`` as a Path, once it names a .png, .svg or .pdf file in a folder that exists."""
    return output_path(path, FORMATS)
