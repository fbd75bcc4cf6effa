"""One long tiled forward in a process of its own, for ``attnlab bench``:

    python -m attnlab.bench._long_sequence LENGTH

prints the seconds and the process's peak resident memory (MiB) as JSON; a fresh process,
so that the peak is this forward's alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from .._timer import time_once
from ..functional import scaled_dot_product_attention
from ._memory import peak_rss_mib

__all__ = ["LONG_LENGTH", "long_sequence", "main"]

LONG_LENGTH = 65_536


def long_sequence(length: int = LONG_LENGTH) -> dict[str, float]:
    """Tiled forward at L = S = ``length``, one head, E=64, in a fresh process: {length,
    seconds, peak_rss_mib, textbook_scores_mib}, against the textbook's score bytes.

    Raises subprocess.CalledProcessError when the process fails."""
    command = [sys.executable, "-m", "attnlab.bench._long_sequence", str(length)]
    measured = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    return {"length": length, **measured, "textbook_scores_mib": length**2 * 4 / 2**20}


def main(length: int) -> dict[str, float]:
    """Tiled forward at L = S = ``length``, one head, E = 64, timed once as it comes."""
    q, k, v = (np.random.default_rng(i).standard_normal((1, length, 64), dtype=np.float32) for i in range(3))
    _, seconds = time_once(lambda: scaled_dot_product_attention(q, k, v, engine="tiled"))
    return {"seconds": seconds, "peak_rss_mib": peak_rss_mib()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
