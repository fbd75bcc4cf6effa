"""The BLAS of the fused engine's products: Intel MKL's ``cblas_sgemm`` and
``cblas_dgemm`` when the ``mkl`` package is installed (``pip install 'attnlab[mkl]'``),
else numba's ``np.dot``, which calls SciPy's BLAS (OpenBLAS in SciPy's wheels).

Why: a block's products, (512 × 64)·(64 × 512) and (512 × 512)·(512 × 64), are most of
the forward's work, and on one core of an Intel Xeon with AVX-512 MKL runs them at 170–200
GFLOP/s where OpenBLAS's SkylakeX kernels run them at 150–170 (docs/benchmarks.md).

``ATTNLAB_BLAS`` chooses: ``auto`` (the default: MKL where it loads), ``mkl`` (MKL or an
error naming the extra) or ``scipy``. The choice is made once per process, when the fused
engine first builds its compiled tasks (the decode path's GEMVs are always SciPy's:
``_decode_kernels``). MKL is loaded through its single dynamic library, ``libmkl_rt``, on
its sequential threading layer (the engine's own threads share the work, as they do with
SciPy's BLAS); where another library of the process loaded it first (a NumPy built on
MKL), ``auto`` falls back to SciPy's BLAS rather than change that library's layer.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.metadata
import os
import re
from dataclasses import dataclass
from typing import Any

from ..._validation import fail

__all__ = ["BLAS_ENV", "Blas", "products"]

BLAS_ENV = "ATTNLAB_BLAS"
_CHOICES = ("auto", "mkl", "scipy")
_SEQUENTIAL = 1  # MKL_THREADING_SEQUENTIAL
_LP64 = 0  # MKL_INTERFACE_LP64: 32-bit integers, as cblas_?gemm's int arguments below

_INT, _VOID_P = ctypes.c_int, ctypes.c_void_p


def _gemm_type(real: type[ctypes._SimpleCData[Any]]) -> Any:
    """cblas_?gemm(layout, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)."""
    return ctypes.CFUNCTYPE(None, *[_INT] * 6, real, _VOID_P, _INT, _VOID_P, _INT, real, _VOID_P, _INT)


@dataclass(frozen=True)
class Blas:
    """The products' BLAS: its name as ``attnlab bench`` reports it, and the kernels'
    argument: (cblas_sgemm, cblas_dgemm) as ctypes functions, or None for numba's np.dot."""

    name: str
    gemm: tuple[Any, Any] | None


def _mkl_library() -> str | None:
    """The path of the ``mkl`` distribution's libmkl_rt, or None where it is not installed."""
    try:
        files = importlib.metadata.files("mkl") or []
        dist = importlib.metadata.distribution("mkl")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith(("libmkl_rt.", "mkl_rt.")) and not file.name.endswith(".a"):
            path = str(dist.locate_file(file))
            if os.path.exists(path):
                return path
    return None


def _loaded_already(path: str) -> bool:
    """Whether the library at ``path`` is in this process already (dlopen's RTLD_NOLOAD;
    False where the platform has no such flag)."""
    if not hasattr(os, "RTLD_NOLOAD"):
        return False
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


_loaded_here: dict[str, ctypes.CDLL] = {}  # the libmkl_rt this module loaded, by path


def _load_mkl() -> tuple[Blas | None, str]:
    """(MKL's products, "") where it loads on its sequential layer with 32-bit integers,
    else (None, why not). A libmkl_rt that another library of the process loaded first is
    left alone: its threading layer is that library's to choose."""
    path = _mkl_library()
    if path is None:
        return None, "the mkl package is not installed: pip install 'attnlab[mkl]'"
    if path not in _loaded_here and _loaded_already(path):
        return None, f"{path} was loaded by another library of this process, whose threading layer attnlab leaves alone"
    try:
        if path not in _loaded_here:
            _loaded_here[path] = ctypes.CDLL(path)
        mkl = _loaded_here[path]
        layer = mkl.MKL_Set_Threading_Layer(_SEQUENTIAL)
        interface = mkl.MKL_Set_Interface_Layer(_LP64)
        gemm = (
            _gemm_type(ctypes.c_float)(("cblas_sgemm", mkl)),
            _gemm_type(ctypes.c_double)(("cblas_dgemm", mkl)),
        )
        version = ctypes.create_string_buffer(256)
        mkl.mkl_get_version_string(version, len(version))
    except (OSError, AttributeError) as error:  # a broken install: no library, or a symbol missing
        return None, f"MKL did not load from {path}: {error}"
    if layer != _SEQUENTIAL or interface != _LP64:
        return None, "MKL was already started in this process on another threading or interface layer"
    number = re.search(r"Version ([0-9.]+)", version.value.decode(errors="replace"))
    return Blas(f"Intel MKL {number.group(1) if number else ''}".strip() + " (sequential)", gemm), ""


@functools.cache
def products() -> Blas:
    """The products' BLAS for this process (see the module's docstring), chosen once.

    Raises ArgumentError: ``ATTNLAB_BLAS`` is none of auto, mkl, scipy, or is mkl and MKL
    does not load (the message says why)."""
    choice = os.environ.get(BLAS_ENV, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise fail(BLAS_ENV, "one of " + ", ".join(_CHOICES), repr(os.environ[BLAS_ENV]))
    scipy = Blas("SciPy's BLAS (numba's np.dot)", None)
    if choice == "scipy":
        return scipy
    mkl, why = _load_mkl()
    if mkl is not None:
        return mkl
    if choice == "mkl":
        raise fail(BLAS_ENV, "an MKL that loads (or auto, scipy)", f"mkl: {why}")
    return scipy
