"""``attnlab bench --hf`` runs end to end at a tiny size and prints its tables (the figures
themselves are in docs/benchmarks.md, never asserted)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import attnlab.bench as bench
from attnlab.bench import _hf
from attnlab.cli._main import main

TINY = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}


def test_bench_hf_runs_at_a_tiny_size_and_prints_its_tables(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(_hf, "LLAMA", TINY)
    monkeypatch.setattr(_hf, "TOKENS", 24)
    monkeypatch.setattr(bench, "gemm_gflops", lambda: 1.0)  # the 2048² ceiling takes seconds; not what is tested
    path = tmp_path / "hf.json"
    assert main(["bench", "--hf", "--repeat", "1", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine: ") and "float32 GEMM ceiling" in out
    assert "2 layers, hidden 32, 2 heads, 24 tokens" in out and "best of 1" in out
    assert "| pass | attnlab ms | sdpa ms | eager ms | attnlab ÷ sdpa | attnlab ÷ eager | target |" in out
    assert "| forward |" in out and "| forward+backward |" in out and "≤ 1.15×" in out and "≤ 1.30×" in out
    assert "forward, q k v 1×2×24×16, causal" in out
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["tokens"] == 24 and saved["config"] == TINY
    assert set(saved["ms"]) == {
        "forward attnlab", "forward sdpa", "forward eager", "forward+backward attnlab", "forward+backward sdpa",
        "attention forward attnlab", "attention forward sdpa",
        "attention forward+backward attnlab", "attention forward+backward sdpa",
    }  # fmt: skip
    assert all(ms > 0 for ms in saved["ms"].values())
    # attnlab's model computed what sdpa's did (a float32 sanity check, not the backend's tests)
    assert saved["differences"]["hidden"] < 1e-4


def test_bench_hf_restores_the_thread_settings(monkeypatch):
    import os

    import torch

    monkeypatch.setenv("ATTNLAB_NUM_THREADS", "3")
    before = torch.get_num_threads()
    rows = _hf.hf_rows(repeat=1, config=TINY, tokens=8, threads=1)
    assert rows["threads"] == 1 and torch.get_num_threads() == before and os.environ["ATTNLAB_NUM_THREADS"] == "3"
