"""engine=None against the table `attnlab bench --engine-table` measured
(docs/engine-choice.json): the engine chosen is never clearly slower than the fastest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from attnlab import _fused
from attnlab._attention import choose_engine
from attnlab._problem import make_problem

TABLE = json.loads((Path(__file__).parent.parent / "docs" / "engine-choice.json").read_text())["rows"]
CLEARLY = 1.25  # one engine at least this many times faster; closer than that is a tie
SLACK_MS = 1.0  # and a wrong choice that costs under a millisecond does not matter


def chosen(slices: int, length: int, width: int) -> str:
    x = np.broadcast_to(np.float32(0), (slices, length, width))  # a view: nothing is allocated
    return choose_engine(None, make_problem(x, x, x, None, 0.0, False, None, False, None), False)


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r['slices']}x{r['length']}x{r['width']}")
def test_engine_none_is_never_clearly_slower_than_the_fastest(row):
    ms = {engine: time for engine, time in row["ms"].items() if engine != "fused" or _fused.available()}
    engine = chosen(row["slices"], row["length"], row["width"])
    fastest = min(ms.values())
    assert ms[engine] <= max(CLEARLY * fastest, fastest + SLACK_MS), f"{engine} chosen; measured {ms}"


def test_many_tiny_heads_and_one_long_head():
    assert chosen(70_000, 8, 8) == "naive"  # the review's case: tiled took 9.5 s, naive 0.09 s
    blocked = "fused" if _fused.available() else "tiled"
    assert chosen(1, 8192, 64) == blocked
    assert chosen(1, 65_536, 64) == blocked  # the naive engine's scores would need 16 GiB
