"""One long tiled forward in a process of its own, for ``attnlab bench``:

    python -m attnlab.bench._long_sequence LENGTH

prints the seconds and the process's peak resident memory (MiB) as JSON. The peak comes
from /proc's VmHWM: ru_maxrss would include the parent's peak, which a child inherits
across fork and exec on Linux.
"""

from __future__ import annotations

import json
import re
import resource
import sys
import time

import numpy as np

from ..functional import scaled_dot_product_attention

__all__ = ["main", "peak_mib"]


def peak_mib() -> float:
    """This process's peak resident memory, MiB."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = re.search(r"VmHWM:\s+(\d+) kB", status.read())
        if found:
            return int(found.group(1)) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(length: int) -> dict[str, float]:
    """Tiled forward at L = S = ``length``, one head, E = 64."""
    q, k, v = (np.random.default_rng(i).standard_normal((1, length, 64), dtype=np.float32) for i in range(3))
    start = time.perf_counter()
    scaled_dot_product_attention(q, k, v, engine="tiled")
    return {"seconds": time.perf_counter() - start, "peak_rss_mib": peak_mib()}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]))))
