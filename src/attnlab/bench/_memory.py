"""The two measures of memory of ``attnlab bench``: NumPy's peak during one call
(tracemalloc) and a process's peak resident memory."""

from __future__ import annotations

import re
import resource
import tracemalloc
from collections.abc import Callable

__all__ = ["peak_rss_mib", "traced_peak_mib"]


def traced_peak_mib(run: Callable[[], object]) -> float:
    """The peak of the Python allocations (NumPy's arrays among them, torch's not) during
    one call of ``run``, MiB."""
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def peak_rss_mib() -> float:
    """This process's peak resident memory, MiB. It comes from /proc's VmHWM: ru_maxrss
    (the fallback) would include the parent's peak, which a child inherits across fork and
    exec on Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            found = re.search(r"VmHWM:\s+(\d+) kB", status.read())
        if found:
            return int(found.group(1)) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
