"""The variants' benchmark rows run and report what they measured (tiny shapes: the
figures themselves are in docs/benchmarks.md, never asserted)."""

from __future__ import annotations

import pytest
from tests.oracles import requires

from attnlab.bench import _variants
from attnlab.bench._shapes import Shape
from attnlab.engine.fused import _engine as fused


@pytest.mark.slow
@requires("torch")
def test_the_variant_rows_time_every_implementation_and_say_how_flex_ran(monkeypatch):
    monkeypatch.setattr(_variants, "WINDOW_CASE", Shape((1, 2), 96, 96, 8, causal=True, name="tiny window"))
    monkeypatch.setattr(_variants, "WINDOW", (16, 0))
    monkeypatch.setattr(_variants, "CAP_CASE", Shape((1, 2), 64, 64, 8, name="tiny caps"))
    monkeypatch.setattr(_variants.shutil, "which", lambda name: None)  # eager flex_attention: no compile in a test
    rows = _variants.variant_rows(repeat=1)
    window = rows["window"]
    assert set(window["ms"]) >= {"window", "full causal", "torch SDPA, bool mask"}
    assert all(ms > 0 for ms in window["ms"].values())
    assert window["flex"].startswith(("eager", "not run ("))
    assert ("torch flex_attention" in window["ms"]) == window["flex"].startswith("eager")
    table = _variants.format_variants(rows)
    assert "tiny window" in table and "full causal ÷ window" in table and f"flex_attention: {window['flex']}" in table
    if fused.available():
        assert [r["case"] for r in rows["caps"]] == ["tiny caps", "fwd+bwd tiny caps"]
        assert "softcap ÷ plain" in table and "sinks ÷ plain" in table
    else:
        assert rows["caps"] is None


@pytest.mark.slow
def test_the_cli_runs_the_variants_alone(monkeypatch, capsys):
    import attnlab.bench as bench
    from attnlab.cli._main import main

    measured = {"window": {"case": "a case", "ms": {"window": 1.0, "full causal": 8.0}, "flex": "eager"}, "caps": None}
    monkeypatch.setattr(bench, "variant_rows", lambda repeat: measured)
    assert main(["bench", "--variants", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| a case | 1.0 | 8.0 | 8.00× |" in out and "flex_attention: eager" in out
