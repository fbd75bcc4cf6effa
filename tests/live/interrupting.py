"""Ctrl-C to a serving process, as a terminal sends it: shared by the tests of stopping."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator


@contextlib.contextmanager
def spawned(command: list[str]) -> Iterator[subprocess.Popen[str]]:
    """``command`` running with its output as unbuffered text and SIGINT's default action
    (a terminal's: CI may ignore SIGINT); killed when the block ends."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        yield process
    finally:
        process.kill()


def interrupted(process: subprocess.Popen[str]) -> float:
    """Send ``process`` SIGINT: the seconds until it exits (at most 60)."""
    sent = time.perf_counter()
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    return time.perf_counter() - sent
