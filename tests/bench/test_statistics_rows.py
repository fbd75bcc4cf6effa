"""The statistics' benchmark rows run and report what they measured (tiny shapes: the
figures themselves are in docs/benchmarks.md, never asserted)."""

from __future__ import annotations

from attnlab.bench import _statistics
from attnlab.bench._shapes import Shape
from attnlab.engine.fused import _engine as fused

TINY = Shape((1, 2), 96, 96, 8, causal=True, name="tiny causal")


def test_the_rows_time_each_blocked_engines_forward_and_statistics_and_their_peaks():
    rows = _statistics.statistics_rows(repeat=1, cases=(TINY,))
    (row,) = rows["statistics"]
    assert row["engines"] == (["tiled", "fused"] if fused.available() else ["tiled"])
    names = {f"{engine} {what}" for engine in row["engines"] for what in ("forward", "statistics")}
    assert set(row["ms"]) == names and set(row["peak_mib"]) == names
    assert all(ms > 0 for ms in row["ms"].values()) and all(mib > 0 for mib in row["peak_mib"].values())
    assert row["sixteenth_mib"] == 96 * 96 / 16 * 4 / 2**20  # float32, one head
    table = _statistics.format_statistics(rows)
    assert table.count("| tiny causal |") == len(row["engines"]) and "statistics ÷ forward" in table


def test_the_cli_runs_the_statistics_alone(monkeypatch, capsys):
    import attnlab.bench as bench
    from attnlab.cli._main import main

    measured = {"statistics": [{"case": "a case", "engines": ["tiled"], "sixteenth_mib": 8.0,
                                "ms": {"tiled forward": 10.0, "tiled statistics": 15.0},
                                "peak_mib": {"tiled forward": 1.0, "tiled statistics": 2.0}}]}  # fmt: skip
    asked = []
    monkeypatch.setattr(bench, "statistics_rows", lambda repeat, cases: asked.append(cases) or measured)
    assert main(["bench", "--statistics", "--quick", "--repeat", "1"]) == 0
    assert asked == [bench.STATISTICS_CASES[:1]]
    out = capsys.readouterr().out
    assert "| a case | tiled | 10.0 | 15.0 | 1.50× | 2.0 | 1.0 | 8.0 | 0.25 |" in out
