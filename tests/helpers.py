"""Helpers that several test modules share (the oracles are in oracles.py, the tiny
checkpoints in checkpoints.py, the browser fixture in conftest.py): the command line
run in-process, a page opened in the browser, the blocked engines' block sizes made small,
and random inputs and masks."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``attnlab *argv`` in this process: its exit status (argparse's own usage errors,
    raised as SystemExit, included), and what it printed on stdout and stderr."""
    from attnlab.cli import main

    try:
        code = main(list(argv))
    except SystemExit as usage:  # argparse's one-line usage error
        code = int(usage.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def open_page(
    browser: Any, path: Path, ready: str = "window.attnlabView && window.attnlabView.ready", timeout: float = 0
) -> None:
    """Open the page file ``path`` in ``browser`` (conftest.py's) and check that its
    script says it is ready: the JavaScript expression ``ready`` is true at once, or
    within ``timeout`` seconds where one is given."""
    browser.get(path.as_uri())
    if timeout:
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(browser, timeout).until(lambda b: b.execute_script(f"return !!({ready})"))
    else:
        assert browser.execute_script(f"return {ready}") is True


def use_small_blocks(monkeypatch: pytest.MonkeyPatch, block_q: int, causal_block_q: int, block_k: int) -> None:
    """The blocked engines' block sizes, for one test: queries, queries of a causal forward,
    keys; small, so that a small problem crosses many block edges."""
    from attnlab.engine import _tiled

    monkeypatch.setattr(_tiled, "BLOCK_Q", block_q)
    monkeypatch.setattr(_tiled, "CAUSAL_BLOCK_Q", causal_block_q)
    monkeypatch.setattr(_tiled, "BLOCK_K", block_k)


def make(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Standard normal numbers of ``shape`` in ``dtype``."""
    return rng.standard_normal(shape).astype(dtype)


def mask_for(
    kind: str, rng: np.random.Generator, L: int, S: int, dtype: Any, *, drop: float = 0.5, empty_row: int | None = None
) -> np.ndarray | None:
    """An attention mask of ``kind``: "none" (None); "fully-masked" (bool (L, S), every key
    of row L // 2 masked, the others all kept); "bool-2d", "bool-3d", "bool-4d" (each key
    kept where a uniform number exceeds ``drop``, and every key of row ``empty_row``, if
    given, masked); "float-2d", "float-3d", "float-4d" (standard normal in ``dtype``).
    The shapes: 2d (L, S), 3d (4, L, S), 4d (2, 1, L, S)."""
    if kind == "none":
        return None
    if kind == "fully-masked":
        mask = np.ones((L, S), dtype=bool)
        mask[L // 2] = False
        return mask
    shape = {"2d": (L, S), "4d": (2, 1, L, S), "3d": (4, L, S)}[kind.split("-")[1]]
    if kind.startswith("bool"):
        mask = rng.random(shape) > drop
        if empty_row is not None:
            mask[..., empty_row, :] = False  # a fully masked query row
        return mask
    return make(rng, shape, dtype)


def pairwise(dimensions: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """A pairwise cover of the dimensions' product (allpairspy's): every value of each dimension
    meets every value of each other in some case; far fewer cases than the product. The same
    cases on every run (the cover is built in order, with no randomness)."""
    from allpairspy import AllPairs

    indices = [list(range(len(values))) for values in dimensions]
    chosen = [tuple(case) for case in AllPairs(indices)] if len(dimensions) > 1 else [(i,) for i in indices[0]]
    return [tuple(values[i] for values, i in zip(dimensions, case, strict=True)) for case in chosen]


def covered_product(dimensions: Sequence[Sequence[Any]], ids: Sequence[Sequence[str]] | None = None) -> list[Any]:
    """Every case of the dimensions' product as a ``pytest.param``: the pairwise cover's
    (:func:`pairwise`) run in every run, the others marked ``exhaustive``, which only
    ``pytest -m exhaustive`` runs (tests/conftest.py). ``ids``: each dimension's values' names."""
    names = ids or [[str(value) for value in values] for values in dimensions]
    positions = [list(range(len(values))) for values in dimensions]
    cover = set(pairwise(positions))
    return [
        pytest.param(
            *(values[i] for values, i in zip(dimensions, case, strict=True)),
            id="/".join(n[i] for n, i in zip(names, case, strict=True)),
            marks=() if case in cover else pytest.mark.exhaustive,
        )
        for case in itertools.product(*positions)
    ]
