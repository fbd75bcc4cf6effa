"""``attnlab experiment``: the article's questions answered by experiments that anyone can
rerun. Each run writes report.md (what was measured, the table, the figures, what it shows,
in Chinese and English), PNG figures and results.json (experiment, seed, quick, metrics,
figures, seconds) to its output directory.

Experiments, one module each (its ``measure``, ``figures`` and ``report``): ``scaling`` (why
1/√d_k), ``normalization`` (why softmax, why e), ``value`` (why a separate V), ``rnn`` (why
attention beats an RNN), ``coref`` (他 → 小明, learned by a small model whose answer is one
attention head; its full run is the model shipped as builtin:coref) and ``length`` (does
attention dilute as the text grows, and what does ÷√d_k do about it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from threadpoolctl import threadpool_limits

from .._validation import fail
from . import _coref_experiment, _length, _normalization, _rnn, _scaling, _value
from ._common import Experiment

__all__ = ["EXPERIMENTS", "run"]

EXPERIMENTS: dict[str, Experiment[Any]] = {
    experiment.name: experiment
    for experiment in (
        _scaling.EXPERIMENT,
        _normalization.EXPERIMENT,
        _value.EXPERIMENT,
        _rnn.EXPERIMENT,
        _coref_experiment.EXPERIMENT,
        _length.EXPERIMENT,
    )
}


def run(name: str, *, quick: bool, seed: int, out: Path) -> dict[str, Any]:
    """Run experiment ``name`` into ``out`` (report.md, its figures, results.json); its
    results as written to results.json. Raises ArgumentError for an unknown name."""
    if name not in EXPERIMENTS:
        raise fail("name", f"one of {', '.join(EXPERIMENTS)}", repr(name))
    experiment = EXPERIMENTS[name]
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # BLAS at one thread: the experiments' products are small (models 64 wide), where BLAS's
    # threads cost more than they give and spin against any other program on the cores
    # (coref's training step beside a busy program: 1.33 s with two BLAS threads, 0.41 s with one)
    with threadpool_limits(limits=1, user_api="blas"):
        measured = experiment.measure(quick, seed)
    if experiment.save is not None:
        experiment.save(measured, out)
    figures = experiment.figures(measured, out)
    _write(out / "report.md", experiment.report(measured))
    results = {"experiment": name, "seed": seed, "quick": quick, "metrics": measured.metrics(),
               "figures": figures, "seconds": time.perf_counter() - start}  # fmt: skip
    _write(out / "results.json", json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    return results


def _write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8. An error that names no file (a full disk fails
    a write, not the open) is raised again naming ``path``, so that the message says where.

    Raises:
        OSError: the write failed; its ``filename`` is ``path``.
    """
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
