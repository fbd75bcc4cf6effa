"""attnlab experiment: a quick run writes report.md, results.json and its figures, and prints
its summary; a failed write names its file."""

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
def test_a_quick_run_writes_its_report_results_and_figures_and_prints_its_summary(tmp_path):
    """One experiment's whole run through the command line: value, the quickest. Every experiment's
    claims, figures and report are checked from its measure in test_measure.py (each quick run here
    would repeat them, at 4 to 77 s a run)."""
    accuracy = run("value", tmp_path)["accuracy"]
    assert accuracy["learned W_v"] > max(accuracy["V = X"], accuracy["V = K"])


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
