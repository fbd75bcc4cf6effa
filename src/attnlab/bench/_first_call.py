"""The fused engine's first call in a process of its own, for ``attnlab bench``:

    python -m attnlab.bench._first_call

prints, as JSON, the seconds of the first forward and backward in float32 and float64:
numba compiles the kernels then, or loads them from its cache on disk (next to the
package when it may write there, else NUMBA_CACHE_DIR or ~/.cache/numba).
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..engine._attention import attention

__all__ = ["main"]


def main() -> dict[str, float]:
    seconds = {}
    for dtype in ("float32", "float64"):
        q = np.ones((1, 4, 8), dtype)
        start = time.perf_counter()
        attention(q, q, q, engine="fused").backward(q)
        seconds[dtype] = time.perf_counter() - start
    return seconds


if __name__ == "__main__":
    print(json.dumps(main()))
