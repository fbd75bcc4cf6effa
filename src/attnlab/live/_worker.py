"""One model, one request at a time: the live page's requests run in the order they came,
on one worker thread. A request its page has replaced by a newer one, or whose page has
gone (the connection closed), is dropped before it runs, and stops at its next stage
while it runs: its work calls the ``check`` it is given between stages."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError  # what a job's check raises: its page replaced it or left
from dataclasses import dataclass, field
from functools import partial
from typing import Any

__all__ = ["DROPPED", "Job", "Worker"]

DROPPED = object()  # a job's result when it was replaced or cancelled before it ended


@dataclass
class Job:
    """One request of one page (``client``), numbered ``number`` by that page: its
    ``work``, given a check to call between stages; its ``result`` (the work's value, the
    exception it raised, or DROPPED) once ``done``."""

    client: str
    number: int
    work: Callable[[Callable[[], None]], Any]
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)
    result: Any = None

    def cancel(self) -> None:
        """Drop it: before it runs, or at its next check while it runs."""
        self.cancelled.set()


class Worker:
    """A daemon thread that runs jobs one at a time, first come first served, and drops a
    job when its page has sent a newer one or cancelled it. A daemon, so that stopping the
    server (Ctrl-C) never waits for a forward half done."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._newest: dict[str, int] = {}  # each page's newest request number
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="attnlab-serve-worker", daemon=True)
        self._thread.start()

    def submit(self, client: str, number: int, work: Callable[[Callable[[], None]], Any]) -> Job:
        """Queue ``work`` for page ``client``'s request ``number``: it is called with a
        check that raises :class:`CancelledError` once the job is replaced or cancelled. Wait on
        the job's ``done``."""
        job = Job(client, number, work)
        with self._lock:
            self._newest[client] = max(number, self._newest.get(client, number))
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """Run nothing more (a job running now ends on its own)."""
        self._jobs.put(None)

    def _check(self, job: Job) -> None:
        """Raise :class:`CancelledError` when ``job`` is cancelled or its page sent a newer request."""
        with self._lock:
            replaced = self._newest[job.client] > job.number
        if replaced or job.cancelled.is_set():
            raise CancelledError

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._check(job)
                job.result = job.work(partial(self._check, job))
            except CancelledError:
                job.result = DROPPED
            except Exception as error:  # the server turns it into a message; the worker keeps serving
                job.result = error
            job.done.set()
