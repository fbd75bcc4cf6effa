"""engine=None against the table `attnlab bench --engine-table` measured
(docs/engine-choice.json): the engine chosen is never clearly slower than the fastest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab.engine._attention import choose_engine
from attnlab.engine._problem import make_problem
from attnlab.engine.fused import _engine as _fused
from attnlab.engine.variants import Rules

TABLE = json.loads((Path(__file__).parents[2] / "docs" / "engine-choice.json").read_text())["rows"]
CLEARLY = 1.25  # one engine at least this many times faster; closer than that is a tie
SLACK_MS = 1.0  # and a wrong choice that costs under a millisecond does not matter


def chosen(slices: int, L: int, S: int, E: int, causal: bool = False, mask=None, dropout_p: float = 0.0) -> str:
    q = np.broadcast_to(np.float32(0), (slices, L, E))  # views: nothing is allocated
    kv = np.broadcast_to(np.float32(0), (slices, S, E))
    return choose_engine(
        None, make_problem(q, kv, kv, mask, dropout_p, None, False, None, Rules(is_causal=causal)), False
    )


def row_id(row: dict) -> str:
    return f"{row['slices']}x{row['L']}x{row['S']}x{row['E']}" + ("-causal" if row["causal"] else "")


@pytest.mark.parametrize("numba", [True, False], ids=["with numba", "without numba"])
@pytest.mark.parametrize("row", TABLE, ids=row_id)
def test_engine_none_is_never_clearly_slower_than_the_fastest(row, numba, monkeypatch):
    if numba and not _fused.available():
        pytest.skip("numba is not installed (attnlab[fast])")
    monkeypatch.setattr(_fused, "available", lambda: numba)
    ms = {engine: time for engine, time in row["ms"].items() if engine != "fused" or numba}
    engine = chosen(row["slices"], row["L"], row["S"], row["E"], row["causal"])
    fastest = min(ms.values())
    assert ms[engine] <= max(CLEARLY * fastest, fastest + SLACK_MS), f"{engine} chosen; measured {ms}"


def test_many_tiny_heads_and_one_long_head():
    blocked = "fused" if _fused.available() else "tiled"
    # the review's case: tiled took 9.8 s, naive 0.06 s, fused (tasks of many slices) 0.03 s
    assert chosen(70_000, 8, 8, 8) == ("fused" if blocked == "fused" else "naive")
    assert chosen(1, 8192, 8192, 64) == blocked
    assert chosen(1, 65_536, 65_536, 64) == blocked  # the naive engine's scores would need 16 GiB
    assert chosen(32, 1, 8192, 128) == ("fused" if blocked == "fused" else "naive")  # decoding: the decode path


def test_seventy_thousand_heads_of_a_few_tokens_choose_naive_below_64_scores_a_head():
    """Measured on 2 cores (issue 24), 70,000 heads: of 4 tokens (E = 4) naive 24 ms, fused
    46 ms; of 2 tokens (E = 8) naive 14 ms, fused 40 ms; of 16 tokens (E = 16) naive 218 ms,
    fused 132 ms. The fused engine's cost per head outweighs fewer than 64 scores a head."""
    blocked = "fused" if _fused.available() else "naive"  # the tiled engine's 40 µs a task: seconds
    assert chosen(70_000, 4, 4, 4) == "naive"
    assert chosen(70_000, 2, 2, 8) == "naive"
    assert chosen(70_000, 6, 6, 8) == "naive"
    assert chosen(70_000, 16, 16, 16) == blocked


def test_with_a_mask_or_dropout_the_fused_engine_counts_as_the_tiled_one():
    """Its tasks are then the tiled engine's Python loop (with compiled blocks): one task per
    head of 8 tokens would cost seconds, as the tiled engine's did."""
    padding = np.ones((8, 8), dtype=bool)
    assert chosen(70_000, 8, 8, 8, mask=padding) == "naive"
    assert chosen(70_000, 8, 8, 8, dropout_p=0.1) == "naive"
    blocked = "fused" if _fused.available() else "tiled"
    assert chosen(8, 2048, 2048, 64, mask=np.ones((2048, 2048), dtype=bool)) == blocked


def test_the_cost_model_counts_the_scores_a_window_leaves(monkeypatch):
    """Without numba, one slice of L = S = 1024 at E = 64 has 2²⁰ scores: below the tiled
    engine's 2²¹, so naive. A causal window of 128 keys leaves about 1024·128 of them, an
    eighth: the tiled engine skips the rest, so its work counts 8× and it is chosen."""
    monkeypatch.setattr(_fused, "available", lambda: False)
    q = np.zeros((1, 1024, 64), dtype=np.float32)
    plain = make_problem(q, q, q, None, 0.0, None, False, None)
    windowed = make_problem(q, q, q, None, 0.0, None, False, None, Rules(is_causal=True, window=(128, 0)))
    assert windowed.visible_scores() == sum(min(i, 128) + 1 for i in range(1024))  # keys i − 128 … i, by hand
    assert choose_engine(None, plain, False) == "naive"
    assert choose_engine(None, windowed, False) == "tiled"
