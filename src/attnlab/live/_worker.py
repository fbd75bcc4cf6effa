"""One model, one request at a time: the live page's requests run in the order they came,
on the one thread of a :class:`~concurrent.futures.ThreadPoolExecutor`. A request its page
has replaced by a newer one, or whose page has gone (the connection closed), is dropped
before it runs, and stops at its next stage while it runs: its work calls the ``check`` it
is given between stages, which raises :class:`~concurrent.futures.CancelledError`.

Stopping drops the jobs that wait (``shutdown(cancel_futures=True)``) and makes the running
one's next check raise: the executor's thread, which the interpreter joins at exit, ends
at the running job's next stage, so Ctrl-C waits for at most one stage (one layer of a
trace's forward, one generated token, one ablated head, one position's flow). ``attnlab serve`` waits for it
with :meth:`Worker.join`, where a second Ctrl-C exits at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = ["Job", "Worker"]


@dataclass
class Job:
    """One request of one page (``client``), numbered ``number`` by that page, and its
    ``future``: the work's value, or the exception it raised, :class:`CancelledError` when
    it was dropped (replaced, cancelled, or the worker stopped) before it ended."""

    client: str
    number: int
    future: Future[Any]
    cancelled: threading.Event  # set: its check raises

    def cancel(self) -> None:
        """Drop it: before it runs, or at its next check while it runs."""
        self.cancelled.set()
        self.future.cancel()  # a job still waiting never starts; a running one stops at its check


class Worker:
    """One executor thread that runs jobs one at a time, first come first served, and drops
    a job when its page has sent a newer one or cancelled it, or the worker stopped."""

    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="attnlab-serve-worker")
        self._newest: dict[str, int] = {}  # each page's newest request number
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._running = threading.Event()  # set while a job's work runs

    def submit(self, client: str, number: int, work: Callable[[Callable[[], None]], Any]) -> Job:
        """Queue ``work`` for page ``client``'s request ``number``: it is called with a
        check that raises :class:`CancelledError` once the job is replaced or cancelled or
        the worker stopped. Wait on the job's ``future``."""
        with self._lock:
            self._newest[client] = max(number, self._newest.get(client, number))
        cancelled = threading.Event()
        check = partial(self._check, client, number, cancelled)
        try:
            future = self._executor.submit(self._run, check, work)
        except RuntimeError:  # stopped: the executor takes nothing more
            future = Future()
            future.cancel()
        return Job(client, number, future, cancelled)

    @property
    def busy(self) -> bool:
        """Whether a job runs now."""
        return self._running.is_set()

    def stop(self) -> None:
        """Drop every job that waits and stop the running one at its next check; return at
        once (the interpreter's exit then waits for that check, not for the whole job)."""
        self._stopped.set()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def join(self) -> None:
        """Once stopped: wait for the running job's next check (its end)."""
        self._executor.shutdown(wait=True)

    def _check(self, client: str, number: int, cancelled: threading.Event) -> None:
        """Raise :class:`CancelledError` when page ``client``'s request ``number`` is
        ``cancelled``, the page sent a newer request, or the worker stopped."""
        with self._lock:
            replaced = self._newest[client] > number
        if replaced or cancelled.is_set() or self._stopped.is_set():
            raise CancelledError

    def _run(self, check: Callable[[], None], work: Callable[[Callable[[], None]], Any]) -> Any:
        """``work(check)``, once ``check`` lets it start (a job replaced while it waited is
        dropped here)."""
        self._running.set()
        try:
            check()
            return work(check)
        finally:
            self._running.clear()
