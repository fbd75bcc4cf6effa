"""The fused engine's products: Intel MKL's cblas_?gemm where the mkl package is installed,
else numba's np.dot (SciPy's BLAS), chosen by ATTNLAB_BLAS; the oracle is torch."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.fused import _blas
from attnlab.engine.fused import _engine as _fused
from oracles import torch_sdpa_with_gradients

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
HAS_MKL = _blas._mkl_library() is not None


@pytest.fixture
def choose(monkeypatch):
    """Set ATTNLAB_BLAS (None: unset) and forget the process's choice; the test's end restores both."""

    def set_choice(value: str | None) -> _blas.Blas:
        if value is None:
            monkeypatch.delenv(_blas.BLAS_ENV, raising=False)
        else:
            monkeypatch.setenv(_blas.BLAS_ENV, value)
        _blas.products.cache_clear()
        return _blas.products()

    yield set_choice
    monkeypatch.undo()
    _blas.products.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("choice", ["scipy", pytest.param("mkl", marks=pytest.mark.skipif(not HAS_MKL, reason="mkl"))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_either_blas_gives_torchs_attention_and_gradients(choose, choice, dtype):
    blas = choose(choice)
    assert (blas.gemm is None) == (choice == "scipy")
    rng = np.random.default_rng(7)
    # 600 keys: two blocks of 512 and a cut one; GQA, causal: every product of both passes
    q = rng.standard_normal((2, 4, 600, 48)).astype(dtype)
    k, v = (rng.standard_normal((2, 2, 600, 48)).astype(dtype) for _ in range(2))
    grad = rng.standard_normal(q.shape).astype(dtype)
    result = al.attention(q, k, v, is_causal=True, enable_gqa=True, engine="fused")
    ours = [result.output, *result.backward(grad)]
    theirs = torch_sdpa_with_gradients(q, k, v, grad, is_causal=True, enable_gqa=True)
    tolerance = 2e-5 if dtype == np.float32 else 1e-12
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * np.abs(want).max())


@pytest.mark.skipif(not HAS_MKL, reason="the mkl package is not installed")
def test_mkl_is_the_default_where_it_is_installed_and_its_bits_never_depend_on_threads_or_alignment(choose):
    assert choose(None).name.startswith("Intel MKL ")
    assert choose("auto").gemm is not None
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal((1, 3, 700, 64), dtype=np.float32) for _ in range(3)]

    def moved(x: np.ndarray, elements: int) -> np.ndarray:
        """x copied to a buffer that starts ``elements`` floats past a 64-byte boundary."""
        buffer = np.empty(x.size + 32, np.float32)
        start = (-buffer.ctypes.data // 4) % 16 + elements
        y = buffer[start : start + x.size].reshape(x.shape)  # (1, 3, 700, 64)
        y[...] = x
        return y

    runs = []
    for elements, threads in [(0, 1), (0, 2), (5, 3), (11, 2)]:
        q, k, v = (moved(x, elements) for x in inputs)
        result = al.attention(q, k, v, engine="fused", num_threads=threads)
        runs.append([result.output, result.lse, *result.backward(np.ones_like(q))])
    for run in runs[1:]:
        for got, first in zip(run, runs[0], strict=True):
            assert np.array_equal(got, first)


def test_a_bad_choice_names_the_variable_and_the_choices(choose):
    with pytest.raises(al.ArgumentError, match=r"ATTNLAB_BLAS: expected one of auto, mkl, scipy, got 'openblas'"):
        choose("openblas")


def test_mkl_asked_for_but_not_installed_names_the_extra(choose, monkeypatch):
    monkeypatch.setattr(_blas, "_mkl_library", lambda: None)
    with pytest.raises(al.ArgumentError, match=r"ATTNLAB_BLAS: .*pip install 'attnlab\[mkl\]'"):
        choose("mkl")
    assert choose("auto").gemm is None  # auto falls back to SciPy's BLAS


@pytest.mark.skipif(platform.machine() != "x86_64" or sys.platform != "linux", reason="mkl's wheels: x86-64")
def test_the_test_extra_brings_mkl_so_that_its_path_is_tested():
    assert HAS_MKL, "pip install -e '.[test]' installs the mkl package on x86-64 Linux"


_STRIDED_PRODUCT = """
import numba, numpy as np
from attnlab.engine.fused import _blas, _kernels

@numba.njit
def product(blas, a, b, out):
    _kernels._product(blas, a, b, out)

rng = np.random.default_rng(0)
a = rng.standard_normal((2000, 1200)).astype(np.float32)[:, ::2]  # (2000, 600): no unit stride, so copied
b = rng.standard_normal((600, 300)).astype(np.float32)
want = a.astype(np.float64) @ b
for _ in range(2):
    out = np.empty((2000, 300), np.float32)
    product(_blas.products().gemm, a, b, out)
    print(float(np.abs(out - want).max() / np.abs(want).max()))
"""


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MKL, reason="the mkl package is not installed")
def test_an_operand_without_a_unit_stride_is_copied_and_kept_until_mkl_has_read_it():
    import os
    import subprocess

    # glibc fills freed memory with MALLOC_PERTURB_'s byte: a copy freed before MKL reads it gives garbage
    env = {**os.environ, "MALLOC_PERTURB_": "165", "ATTNLAB_BLAS": "mkl"}
    run = subprocess.run([sys.executable, "-c", _STRIDED_PRODUCT], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    errors = [float(line) for line in run.stdout.split()]
    assert len(errors) == 2 and max(errors) < 1e-5


_FOREIGN_MKL = """
import ctypes
from attnlab.engine.fused import _blas
other = ctypes.CDLL(_blas._mkl_library())  # another library of the process loads MKL first
before = other.MKL_Get_Max_Threads()  # the machine's cores, where the sequential layer would say 1
print(_blas.products().gemm is None, other.MKL_Get_Max_Threads() == before)
"""


@pytest.mark.skipif(not HAS_MKL or sys.platform != "linux", reason="the mkl package on Linux")
def test_an_mkl_another_library_loaded_first_is_left_alone():
    import subprocess

    run = subprocess.run([sys.executable, "-c", _FOREIGN_MKL], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "True"]  # auto falls back to SciPy's BLAS, the layer untouched
