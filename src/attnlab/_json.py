"""The one JSON encoding of what attnlab writes for a program or a page to read (a trace,
a model trace, an ablation, head types, the page's data): UTF-8 text as it is, no NaN or
infinity (they are not JSON: a caller encodes them first, and one left over is a bug)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_text"]


def json_text(data: Any) -> str:
    """``data`` as JSON: non-ASCII characters as themselves (``ensure_ascii=False``), NaN
    and ±∞ refused with a ValueError (``allow_nan=False``), no indent (the C encoder, fast
    on large arrays' lists)."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False)
