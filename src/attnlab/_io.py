"""Bounded reading: every file attnlab reads whole (a checkpoint's config.json and
tokenizer, a chat template, the CLI's input files) is read here, under a limit.

A file is checked before it is opened: it must be (or link to) a regular file of at most
``limit`` bytes, because a FIFO would block the open and /dev/zero never ends. What comes
past the limit (a file that grew meanwhile) is refused too, so no more than ``limit + 1``
bytes are ever held.

A refusal is one line, "PATH: expected …, got …", a
:class:`~attnlab._exceptions.CheckpointError` unless the caller gives ``refuse``: the
function that turns the reason ("expected a regular file, got a FIFO") into its own error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from ._exceptions import CheckpointError

__all__ = ["Refuse", "check_file", "exists", "file_kind", "read_bounded"]

Refuse = Callable[[str], Exception]  # a refusal's reason -> the error the caller raises


def exists(path: Path) -> bool:
    """Whether anything is at ``path``: a file, a FIFO, a device, a link (even a broken
    one). What is there is then read only through :func:`read_bounded`."""
    return os.path.lexists(path)


def file_kind(mode: int) -> str:
    """What an ``os.stat`` mode is, in words: "a directory", "a FIFO", "a character device"…"""
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device")]
    kinds += [(stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def check_file(path: Path, limit: int, refuse: Refuse | None = None) -> None:
    """Refuse ``path`` unless it is (or links to) a regular file of at most ``limit``
    bytes, before it is opened: a FIFO would block the open, /dev/zero never ends.

    Raises:
        CheckpointError: "PATH: expected …, got …" naming what the file is or its size and
            the limit (or what ``refuse`` makes of the reason).
    """
    reason = _unreadable(path, limit)
    if reason is not None:
        raise _refusal(path, reason, refuse) from None


def read_bounded(path: Path, limit: int, refuse: Refuse | None = None) -> bytes:
    """The bytes of ``path``, once :func:`check_file` allows it (and no more than ``limit``
    of them, should the file grow meanwhile); opened without blocking and checked again by
    its descriptor, so a FIFO or a device swapped in after the check is refused, not read.

    Raises:
        CheckpointError: not a regular file, larger than ``limit``, or unreadable (or what
            ``refuse`` makes of the reason).
    """
    check_file(path, limit, refuse)
    try:  # opened without blocking and checked again by its descriptor: a FIFO swapped in meanwhile is refused
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _refusal(path, f"expected a readable file, got {error.strerror or error}", refuse) from None
    with os.fdopen(descriptor, "rb") as file:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise _refusal(path, f"expected a regular file, got {file_kind(mode)}", refuse)
        try:
            data = file.read(limit + 1)
        except OSError as error:
            raise _refusal(path, f"expected a readable file, got {error.strerror or error}", refuse) from None
    if len(data) > limit:
        raise _refusal(path, f"expected a file of at most {limit:,} bytes, got more", refuse)
    return data


def _unreadable(path: Path, limit: int) -> str | None:
    """Why ``path`` may not be read under ``limit`` ("expected a regular file, got a FIFO"),
    or None when it may."""
    try:
        status = path.resolve().stat()
    except (OSError, RuntimeError) as error:  # a broken link, a loop of links, no permission
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return f"expected a readable regular file, got {reason}"
    if not stat.S_ISREG(status.st_mode):
        return f"expected a regular file, got {file_kind(status.st_mode)}"
    if status.st_size > limit:
        return f"expected a file of at most {limit:,} bytes, got {status.st_size:,} bytes"
    return None


def _refusal(path: Path, reason: str, refuse: Refuse | None) -> Exception:
    return CheckpointError(f"{path}: {reason}") if refuse is None else refuse(reason)
