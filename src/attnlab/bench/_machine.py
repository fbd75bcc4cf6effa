"""What ``attnlab bench`` ran on: the machine's description and its float32
matrix-multiply rate, the ceiling the engines' GFLOP/s are read against."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

import numpy as np

from .._timer import best_times
from ..engine._threads import default_threads
from ..engine.fused import _blas
from ..engine.fused import _engine as _fused

__all__ = ["blas_info", "gemm_gflops", "gemm_run", "machine", "read_bandwidth", "read_run"]

# what forces kernels (see docs/benchmarks.md), listed as the run saw it
FORCING_VARIABLES = (
    "ATTNLAB_BLAS",
    "NPY_DISABLE_CPU_FEATURES",
    "NUMBA_CPU_NAME",
    "NUMBA_CPU_FEATURES",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
)


def gemm_run(n: int = 2048, dtype: str = "float32") -> tuple[Callable[[], object], float]:
    """(an (n, n) @ (n, n) product of ``dtype`` on all cores: NumPy's SGEMM or DGEMM, its
    2·n³ floating-point operations)."""
    a = np.random.default_rng(0).standard_normal((n, n)).astype(dtype)
    return (lambda: a @ a), 2.0 * n**3


def read_run(megabytes: float = 512) -> tuple[Callable[[], object], float]:
    """(a float32 matrix of ``megabytes`` times a vector on all cores (BLAS's GEMV reads
    it once), the bytes it reads). Of a decode's own size, it reads from where the decode
    reads: this machine's L3 cache is 480 MiB, shared with its neighbours."""
    columns = 256
    rows = max(int(megabytes * 2**20) // (4 * columns), 1)
    matrix = np.random.default_rng(0).standard_normal((rows, columns), dtype=np.float32)
    vector = np.ones(columns, dtype=np.float32)
    return (lambda: matrix @ vector), float(matrix.nbytes)


def gemm_gflops(n: int = 2048, repeat: int = 5) -> float:
    """The machine's float32 matrix-multiply rate on all cores, GFLOP/s: 2·n³ over the
    best of ``repeat`` settled (n, n) @ (n, n) products.

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    run, flops = gemm_run(n)
    return flops / best_times({"gemm": run}, repeat, settle=True, milliseconds=True)["gemm"] / 1e6


def read_bandwidth(megabytes: int = 512, repeat: int = 5) -> float:
    """The machine's memory read rate on all cores, GB/s: :func:`read_run`'s GEMV, best of
    ``repeat`` settled runs: the ceiling of decoding, which reads its cache once.

    Raises ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1."""
    run, size = read_run(megabytes)
    return size / best_times({"gemv": run}, repeat, settle=True, milliseconds=True)["gemv"] / 1e6


def blas_info() -> str:
    """The BLAS libraries loaded (name, version, kernels) and OPENBLAS_CORETYPE."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover
        return "unknown"
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    override = f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE unset"
    names = ", ".join(f"{i['internal_api']} {i.get('version')} {i.get('architecture', '')}".strip() for i in blas)
    return f"{names} ({override})"


def machine() -> dict[str, Any]:
    """What the figures were measured on: CPU, cores, threads, BLAS, library versions and
    the variables that force kernels."""
    _fused.available()  # loads SciPy's BLAS, if the fused engine is there, so that it is listed too
    described: dict[str, Any] = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "threads": default_threads(),
        "blas": blas_info(),
        "numpy": np.__version__,
        "python": platform.python_version(),
    }
    try:
        import torch

        described["torch"] = f"{torch.__version__} ({torch.get_num_threads()} threads)"
    except ImportError:
        described["torch"] = "not installed (pip install 'attnlab[torch]')"
    if _fused.available():
        import numba

        described["numba"] = numba.__version__
        described["fused products"] = _blas.products().name
    described.update({name: os.environ[name] for name in FORCING_VARIABLES if name in os.environ})
    return described
