"""One model, one request at a time: the live page's requests run in the order they came,
on one worker thread, and a request its page has replaced by a newer one is dropped
before it runs."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DROPPED", "Job", "Worker"]

DROPPED = object()  # a job's result when a newer request of the same page replaced it before it ran


@dataclass
class Job:
    """One request of one page (``client``), numbered ``number`` by that page: its
    ``result`` (the work's value, the exception it raised, or DROPPED) once ``done``."""

    client: str
    number: int
    work: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None


class Worker:
    """A daemon thread that runs jobs one at a time, first come first served, and drops a
    job when its page has sent a newer one. A daemon, so that stopping the server (Ctrl-C)
    never waits for a forward half done."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._newest: dict[str, int] = {}  # each page's newest request number
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="attnlab-serve-worker", daemon=True)
        self._thread.start()

    def submit(self, client: str, number: int, work: Callable[[], Any]) -> Job:
        """Queue ``work`` for page ``client``'s request ``number``; wait on the job's ``done``."""
        job = Job(client, number, work)
        with self._lock:
            self._newest[client] = max(number, self._newest.get(client, number))
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """Run nothing more (a job running now ends on its own)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                replaced = self._newest[job.client] > job.number
            if replaced:
                job.result = DROPPED
            else:
                try:
                    job.result = job.work()
                except Exception as error:  # the server turns it into a message; the worker keeps serving
                    job.result = error
            job.done.set()
