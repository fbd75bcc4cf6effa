"""The shape classes' rows: their work (flops, or the bytes a decode reads) and the limit
timed in the same rounds (tiny shapes: the figures themselves are in docs/benchmarks.md,
never asserted)."""

from __future__ import annotations

import pytest

from attnlab.bench import _classes
from attnlab.bench._shapes import Shape


def test_a_forward_row_counts_its_products_and_a_decode_row_its_cache():
    forward = Shape((1, 2), 8, 8, 4)
    assert forward.flops == 4 * 2 * 8 * 8 * 4 and not forward.decoding
    causal = Shape((1, 2), 8, 8, 4, causal=True, backward=True)
    assert causal.flops == 3.5 * 4 * 2 * (64 - 28) * 4  # the 36 scores on and below the diagonal
    decode = Shape((3, 4), 1, 40, 8, kv_heads=2, key_lengths=(10, 20, 40))
    assert decode.decoding and decode.cache_bytes == 2 * (10 + 20 + 40) * 2 * 8 * 4


@pytest.mark.slow
def test_each_row_gives_its_rate_against_the_limit_of_its_rounds(monkeypatch):
    monkeypatch.setattr(
        _classes,
        "CASES",
        (
            Shape((1, 2), 16, 16, 4, name="tiny"),
            Shape((2, 2), 1, 40, 8, key_lengths=(17, 40), name="tiny decode"),
            Shape((1, 2), 16, 16, 4, dtype="float64", name="tiny float64"),
        ),
    )
    gemms: list[str] = []  # the dtypes whose GEMM was asked for: a float64 row's limit is a DGEMM
    monkeypatch.setattr(_classes, "gemm_run", lambda dtype: (gemms.append(dtype), (lambda: None, 1e6))[1])
    monkeypatch.setattr(_classes, "read_run", lambda megabytes: (lambda: None, megabytes * 2**20))
    rows = _classes.shape_classes(repeat=1, every_engine=False)
    assert [r["case"] for r in rows] == ["tiny", "tiny decode", "tiny float64"]
    assert sorted(gemms) == ["float32", "float64"]
    assert "flops" in rows[0] and "bytes" in rows[1] and all(r["limit_rate"] > 0 for r in rows)
    assert "limit" not in rows[0]["ms"]
    table = _classes.format_classes(rows)
    assert "GFLOP/s" in table.splitlines()[2] and "GB/s" in table.splitlines()[3]
    assert table.splitlines()[0].endswith("| attnlab rate | limit (run's best) | share of the limit |")


def test_a_rows_share_is_of_the_fastest_limit_of_its_kind_in_the_run_never_a_slow_spells():
    """A limit timed during a neighbour's spell (100 GFLOP/s where the run saw 300) would put attnlab at
    120 %: the share is of the run's fastest GEMM of the row's dtype (GEMV for decode rows)."""
    row = {"chosen": "fused", "ms": {"attnlab": 1.0}}
    rows = [
        {**row, "case": "a", "flops": 120e6, "limit_rate": 100.0, "dtype": "float32"},
        {**row, "case": "b", "flops": 150e6, "limit_rate": 300.0, "dtype": "float32"},
        {**row, "case": "c", "flops": 80e6, "limit_rate": 160.0, "dtype": "float64"},
        {**row, "case": "d", "bytes": 20e6, "limit_rate": 16.0},
        {**row, "case": "e", "bytes": 20e6, "limit_rate": 25.0, "ms": {"attnlab": 2.0}},
    ]
    cells = [line.split(" | ")[-2:] for line in _classes.format_classes(rows).splitlines()[2:]]
    assert cells == [
        ["300.0 GFLOP/s", "40% |"],  # 120 / 300, not 120 / 100
        ["300.0 GFLOP/s", "50% |"],
        ["160.0 GFLOP/s", "50% |"],  # a float64 row against the DGEMM only
        ["25.0 GB/s", "80% |"],  # 20 GB/s against the run's best GEMV read, 25
        ["25.0 GB/s", "40% |"],
    ]


def test_the_reference_against_the_seed_says_slower_below_1():
    from attnlab.bench._report import _faster

    assert (_faster(1.3), _faster(1 / 1.1), _faster(1.0)) == ("1.3× faster", "1.1× slower", "1.0× faster")
