"""The fused engine's first call in a process of its own, for ``attnlab bench``:

    python -m attnlab.bench._first_call

prints, as JSON, the seconds of the first forward and backward in float32 and float64:
numba compiles the kernels then, or loads them from its cache on disk (next to the
package when it may write there, else NUMBA_CACHE_DIR or ~/.cache/numba).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import numpy as np

from .._timer import best_times
from ..engine._attention import attention
from ..engine.fused import _engine as _fused

__all__ = ["first_call_seconds", "main"]


def first_call_seconds() -> dict[str, dict[str, float]] | None:
    """The fused engine's first forward and backward in a fresh process, with an empty
    JIT cache and then with the cache that the first process left: {"empty cache": {dtype:
    seconds}, "cached": {…}}; None without the fused engine.

    Raises subprocess.CalledProcessError when a process fails."""
    if not _fused.available():
        return None
    with tempfile.TemporaryDirectory() as cache:
        command = [sys.executable, "-m", "attnlab.bench._first_call"]
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        runs = [subprocess.run(command, capture_output=True, text=True, check=True, env=env) for _ in range(2)]
    return {"empty cache": json.loads(runs[0].stdout), "cached": json.loads(runs[1].stdout)}


def _forward_and_backward(dtype: str) -> Callable[[], object]:
    q = np.ones((1, 4, 8), dtype)
    return lambda: attention(q, q, q, engine="fused").backward(q)


def main() -> dict[str, float]:
    """This process's first fused forward+backward in float32, then in float64, seconds."""
    return best_times({dtype: _forward_and_backward(dtype) for dtype in ("float32", "float64")}, settle=False)


if __name__ == "__main__":
    print(json.dumps(main()))
