"""Progress of long work: tqdm's bar, with its count, rate and estimate, on stderr."""

from __future__ import annotations

from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: int, description: str, unit: str, *, enabled: bool) -> Any:
    """A ``tqdm`` bar of ``total`` ``unit``s on stderr, updated by ``bar.update(n)`` and
    closed by ``bar.close()`` or a ``with`` block; when not ``enabled``, one that draws
    nothing. It redraws at most ten times a second, so the work it counts is not slowed."""
    from tqdm import tqdm

    return tqdm(total=total, desc=description, unit=unit, disable=not enabled, mininterval=0.1, dynamic_ncols=True)
