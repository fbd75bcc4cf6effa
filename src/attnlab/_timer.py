"""The one timer: every figure of time that ``attnlab bench`` prints, and the step time
an experiment reports, comes from :func:`best_times`."""

from __future__ import annotations

import math
import time
import timeit
from collections.abc import Callable, Mapping
from typing import TypeVar

from ._validation import positive_int, real_number

__all__ = ["PAUSE_SECONDS", "best_times", "time_once"]

T = TypeVar("T")

PAUSE_SECONDS = 0.05  # between implementations taking turns: torch's OpenMP threads stop spinning


def best_times(
    runs: Mapping[str, Callable[[], object]],
    repeat: int = 1,
    *,
    settle: bool,
    pause: float = 0.0,
    milliseconds: bool = False,
) -> dict[str, float]:
    """The fastest of ``repeat`` timed runs of each of ``runs``, seconds (ms with
    ``milliseconds``), taking turns: round r runs each in order, so that a slow spell of
    a shared machine falls on every one alike.

    Each timed run follows a ``pause`` (seconds, 0: none), in which the previous
    implementation's threads stop spinning (torch's OpenMP threads wait busily for a while
    after each call). With ``settle``, the steady state: an untimed run of the same
    callable comes first, which wakes its threads and warms its caches, and the timed run
    is timeit's (the garbage collector off). Without, the call as it comes: its first run,
    compilation and collector included, timed by ``time.perf_counter`` (with ``repeat=1``,
    one call each, in order).

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1, ``pause``
    not a real number >= 0.
    """
    repeat = positive_int("repeat", repeat)
    pause = real_number("pause", pause, minimum=0.0)
    best = dict.fromkeys(runs, math.inf)
    for _ in range(repeat):
        for name, run in runs.items():
            if pause:
                time.sleep(pause)
            if settle:
                run()
                seconds = timeit.timeit(run, number=1)
            else:
                start = time.perf_counter()
                run()
                seconds = time.perf_counter() - start
            best[name] = min(best[name], seconds)
    return {name: seconds * 1e3 for name, seconds in best.items()} if milliseconds else best


def time_once(run: Callable[[], T]) -> tuple[T, float]:
    """``run``'s result and the seconds of its one call as it comes: :func:`best_times`
    without ``settle``, for a call that cannot be repeated or whose first call counts."""
    results: list[T] = []
    seconds = best_times({"once": lambda: results.append(run())}, settle=False)["once"]
    return results[0], seconds
