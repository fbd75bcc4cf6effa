"""The tiled engine's threads: one pool for the process, and BLAS held to one thread
while it works.

- One ``ThreadPoolExecutor``, made on first use and replaced when a call asks for a
  different number of threads. A forked child (multiprocessing, DataLoader workers)
  forgets the parent's pool, whose threads it does not have, and makes its own.
- BLAS is held to one thread from the moment the first concurrent call starts until
  the last one ends, so that our threads and BLAS's never oversubscribe the cores; the
  process's own setting is restored exactly afterwards, whatever order calls end in.
- The thread count is ``num_threads``, else the ``ATTNLAB_NUM_THREADS`` environment
  variable, else the cores this process may run on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController

from .._validation import fail

__all__ = ["THREADS_ENV", "blas_single_threaded", "default_threads", "rescan_blas", "run", "thread_count"]

THREADS_ENV = "ATTNLAB_NUM_THREADS"


def default_threads() -> int:
    """The ``ATTNLAB_NUM_THREADS`` environment variable, else the machine's cores."""
    value = os.environ.get(THREADS_ENV)
    if value is not None:
        if not (value.isascii() and value.isdigit()) or int(value) < 1:
            raise fail(THREADS_ENV, "an integer >= 1", repr(value))
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def thread_count(threads: int | None) -> int:
    """``threads``, or the default when None."""
    return default_threads() if threads is None else threads


class _State:
    """The process's pool and BLAS limit; made anew in a forked child."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None
        self.pool_threads = 0
        self.blas_users = 0  # calls now running with BLAS held to one thread
        self.blas_limit: Any = None  # threadpoolctl's limiter while blas_users > 0


_state = _State()


def _forget_after_fork() -> None:
    """In a forked child: the parent's pool has no threads here, and its lock may be held."""
    global _state
    _state = _State()


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_forget_after_fork)


@functools.cache
def _blas() -> ThreadpoolController:
    """threadpoolctl's view of the loaded BLAS libraries, inspected once (it scans them)
    until ``rescan_blas``."""
    return ThreadpoolController()


def rescan_blas() -> None:
    """Look for BLAS libraries again at the next call: one was loaded (SciPy's, which the
    fused engine's products use), and it too must be held to one thread."""
    _blas.cache_clear()


def _pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool, with exactly ``threads`` threads. A pool replaced here is
    dropped, not shut down: a call still holding it finishes on it, and its threads end
    when it is garbage-collected."""
    with _state.lock:
        if _state.pool is None or _state.pool_threads != threads:
            _state.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="attnlab")
            _state.pool_threads = threads
        return _state.pool


@contextlib.contextmanager
def blas_single_threaded() -> Iterator[None]:
    """BLAS at one thread while any call is inside; restored when the last one leaves (a
    call inside another costs a lock and a count)."""
    state = _state
    with state.lock:
        if state.blas_users == 0:
            state.blas_limit = _blas().limit(limits=1, user_api="blas")
        state.blas_users += 1
    try:
        yield
    finally:
        with state.lock:
            state.blas_users -= 1
            if state.blas_users == 0:
                state.blas_limit.restore_original_limits()
                state.blas_limit = None


def _call(task: Callable[[], None]) -> None:
    with np.errstate(all="ignore"):  # per thread: masked rows take exp(−inf) and log(0) on purpose
        task()


class _Shared:
    """The tasks of one call, taken one at a time by every thread that works on it
    (``next`` on a list's iterator is one step under the GIL); after ``stop`` none is given."""

    def __init__(self, tasks: Sequence[Callable[[], None]]) -> None:
        self._tasks = iter(tasks)
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True

    def drain(self) -> None:
        """Run the next task until none is left; on an error (or Ctrl-C), stop every thread's
        taking of tasks, and raise it."""
        try:
            while not self._stopped:
                task = next(self._tasks, None)
                if task is None:
                    return
                _call(task)
        except BaseException:
            self.stop()
            raise


def run(tasks: Sequence[Callable[[], None]], threads: int | None) -> None:
    """Run every task, in order of submission (give them largest first), on the calling
    thread and threads − 1 of the pool's. Which thread runs a task never changes its bits.
    A task's error (or Ctrl-C) stops the others from starting, and is raised once the
    tasks already running have ended (a second Ctrl-C while they end does not wait). A
    call from inside a task (a ``mask_mod`` that calls attention) runs its tasks itself
    where the pool's threads are busy.

    Each thread takes the next task from one shared iterator (``next`` on a list's iterator
    is one step under the GIL) until none is left: a future per thread, not per task, whose
    hand-offs cost the forward of B4 H16 L=S=512 E64 (64 tasks) 2.4 ms of 19 on two cores;
    and the caller works from the first task on, so that a pool thread slow to wake (a
    virtual machine's halted core) delays nothing but its own share."""
    threads = min(thread_count(threads), len(tasks))
    with blas_single_threaded():
        shared = _Shared(tasks)
        pool = _pool(threads - 1) if threads > 1 else None
        helpers = [pool.submit(shared.drain) for _ in range(threads - 1)] if pool is not None else []
        try:
            shared.drain()
        finally:
            # every task is taken, or an error stopped the taking: a helper that has not started is
            # not needed (a nested call's, or one queued behind another caller's, might never start),
            # and the ones at work are waited for
            shared.stop()
            wait([helper for helper in helpers if not helper.cancel()])
        for helper in helpers:  # the caller's error was raised above; else the first helper's
            if not helper.cancelled():
                helper.result()
