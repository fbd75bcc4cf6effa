"""``attnlab bench``: the engines against torch and the seed, side by side in one run, with
the machine's limits beside them; a long sequence's memory, the first call's compile time,
a model against transformers, the ring, and the attention statistics against the forward.
Each measurement that needs a fresh process has a module of its own run with ``python -m``;
every time goes through one timer (``attnlab._timer.best_times``).

The command line's entry points: :func:`main` (``attnlab bench``), :func:`engine_report`
(``--engine-table``), :func:`statistics_rows` and :func:`format_statistics`
(``--statistics``), :func:`run_models` and :func:`format_models` (``--models``, with
:func:`run_real_model` and :func:`format_real_model`: SmolLM2's rows),
:func:`launch_ring` and :func:`format_ring` (``attnlab ring``), :func:`variant_rows` and
:func:`format_variants` (``--variants``), :func:`hf_rows` and :func:`format_hf` (``--hf``)."""

from ._engines import engine_report
from ._hf import format_hf, hf_rows
from ._machine import gemm_gflops, machine
from ._models import format_models, run_models
from ._real_model import format_real_model, run_real_model, smollm2_path
from ._report import main
from ._ring_launch import format_ring, launch_ring
from ._statistics import STATISTICS_CASES, format_statistics, statistics_rows
from ._variants import format_variants, variant_rows

__all__ = [
    "STATISTICS_CASES",
    "engine_report",
    "format_hf",
    "format_models",
    "format_real_model",
    "format_ring",
    "format_statistics",
    "format_variants",
    "gemm_gflops",
    "hf_rows",
    "launch_ring",
    "machine",
    "main",
    "run_models",
    "run_real_model",
    "smollm2_path",
    "statistics_rows",
    "variant_rows",
]
