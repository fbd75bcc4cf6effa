"""attnlab experiment: each quick run writes report.md, results.json and its figures, and
its metrics show what the experiment exists to show (computed by the run, checked here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")


def run(name: str, out: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "attnlab", "experiment", "run", name, "--quick", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert (results["experiment"], results["seed"], results["quick"]) == (name, 0, True)
    assert set(results) >= {"experiment", "seed", "quick", "metrics", "figures"}
    for figure in results["figures"]:
        assert (out / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**What it shows.**" in report and "**结论。**" in report
    assert f"{name}:" in done.stdout and "| metric | value |" in done.stdout  # the summary table
    return results["metrics"]


@pytest.mark.slow
def test_scaling_shows_the_variance_and_the_saturation(tmp_path):
    metrics = run("scaling", tmp_path)
    for d_k, variance in metrics["scaled_variance"].items():
        assert abs(variance - 1) < 0.1, d_k  # the article's prediction, at every d_k
    assert metrics["max_weight_unscaled"]["1024"] > 0.9
    assert metrics["max_weight_scaled"]["1024"] < 0.6
    assert metrics["accuracy"]["1/√d_k"] > metrics["accuracy"]["1"]


@pytest.mark.slow
def test_normalization_shows_bases_are_temperatures(tmp_path):
    metrics = run("normalization", tmp_path)
    assert metrics["base_gap"]["2 vs e at T=1/ln 2"] <= 1e-12
    assert metrics["base_gap"]["10 vs e at T=1/ln 10"] <= 1e-12
    assert set(metrics["accuracy"]) == {"softmax", "linear", "relu", "sigmoid"}


@pytest.mark.slow
def test_value_shows_a_learned_v_carries_more(tmp_path):
    accuracy = run("value", tmp_path)["accuracy"]
    assert accuracy["learned W_v"] > max(accuracy["V = X"], accuracy["V = K"])


@pytest.mark.slow
def test_rnn_shows_attention_reaching_far(tmp_path):
    metrics = run("rnn", tmp_path)
    assert metrics["attention"]["accuracy"]["64"] > metrics["tanh RNN"]["accuracy"]["64"] + 0.5
    assert metrics["attention"]["sequential_steps"] == 1 and metrics["tanh RNN"]["sequential_steps"] == 65
    gradients = metrics["tanh RNN"]["gradient_norm"]
    assert gradients[-1] > gradients[0]  # the RNN's gradient reaches the last item, not the first
    assert abs(metrics["weights"]["attention"] / metrics["weights"]["tanh RNN"] - 1) < 0.1


def test_a_full_disk_while_writing_results_json_names_the_file(tmp_path, monkeypatch, capsys):
    """The write of results.json fails half way (ENOSPC names no file): the one-line error says which."""
    import errno
    from dataclasses import dataclass

    from attnlab.cli import main
    from attnlab.experiments import _run
    from attnlab.experiments._common import Experiment

    @dataclass
    class Nothing:
        def metrics(self) -> dict:
            return {"x": 1.0}

    tiny = Experiment("tiny", "nothing", lambda quick, seed: Nothing(), lambda measured, out: [], lambda m: "# tiny\n")
    monkeypatch.setitem(_run.EXPERIMENTS, "tiny", tiny)
    real_write = Path.write_text

    def full_disk(path: Path, text: str, *args: object, **kwargs: object) -> int:
        if path.name == "results.json":
            raise OSError(errno.ENOSPC, "No space left on device")  # as a failed write() raises it: no filename
        return real_write(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_disk)
    out = tmp_path / "runs"
    assert main(["experiment", "run", "tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"attnlab experiment: error: {out / 'results.json'}: No space left on device\n"
    assert (out / "report.md").read_text(encoding="utf-8") == "# tiny\n"  # written before the disk filled
