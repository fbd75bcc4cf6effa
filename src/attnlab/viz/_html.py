"""What every page of attnlab (the page of weights, the statistics page) does alike: its
file's path checked, and its JSON made safe inside a <script> block."""

from __future__ import annotations

from pathlib import Path

from .._json import json_text
from .._validation import output_path

__all__ = ["check_path", "escaped", "escaped_json"]


def check_path(path: str | Path) -> Path:
    """``path`` as a Path, once it names an .html file in a folder that exists."""
    return output_path(path, (".html", ".htm"))


def escaped(payload: str) -> str:
    """JSON that cannot close its <script> block: '<', '>' and '&' as their \\u escapes."""
    return payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def escaped_json(data: object) -> str:
    """``data`` as JSON that cannot close its <script> block."""
    return escaped(json_text(data))
