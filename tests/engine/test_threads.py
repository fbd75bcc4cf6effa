"""The tiled engine's thread pool: forks, concurrent callers, BLAS left as found."""

from __future__ import annotations

import multiprocessing
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

import attnlab as al
from attnlab.engine import _threads
from attnlab.engine.fused import _engine as _fused


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def tiled(seed: int = 0, threads: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((4, 300, 16)) for _ in range(3))
    return al.attention(q, k, v, engine="tiled", num_threads=threads).output


def _child(queue) -> None:
    queue.put(float(tiled().sum()))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="fork is POSIX")
def test_a_forked_child_gets_a_pool_of_its_own():
    expected = float(tiled().sum())  # the parent's pool exists now
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(timeout=600)  # a hang's bound, generous for a busy machine
    assert child.exitcode == 0, "the forked child hung or failed"
    assert queue.get(timeout=600) == expected


def test_concurrent_callers_get_right_results_and_leave_blas_as_found():
    before = blas_threads()
    expected = {seed: tiled(seed) for seed in range(4)}
    results: dict[int, np.ndarray] = {}
    barrier = threading.Barrier(4)

    def call(seed: int) -> None:
        barrier.wait()
        for _ in range(3):
            results[seed] = tiled(seed, threads=1 + seed % 2)  # two thread counts: the pool is replaced

    callers = [threading.Thread(target=call, args=(seed,)) for seed in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    for seed, output in expected.items():  # to rounding: see docs/design.md, "Threads"
        np.testing.assert_allclose(results[seed], output, rtol=0, atol=1e-14)
    assert blas_threads() == before
    assert _threads._state.blas_users == 0


def test_one_pool_whatever_the_thread_counts():
    for threads in (2, 3, 2, 3):
        tiled(threads=threads)
    alive = [t for t in threading.enumerate() if t.name.startswith("attnlab")]
    assert len(alive) <= 3 + 2  # the current pool, and at most the last one still winding down


@pytest.mark.skipif(not _fused.available(), reason="numba is not installed (attnlab[fast])")
def test_the_fused_engine_holds_every_blas_to_one_thread_and_restores_it(monkeypatch):
    """Its compiled tasks call SciPy's BLAS (through numba's np.dot), NumPy's products call
    NumPy's: both are held to one thread inside the call, and both are as found after it."""
    from attnlab.engine.fused import _kernels as _fused_kernels
    from attnlab.engine.fused._blas import products

    products()  # MKL, where it is installed, loads at the first product: list it before the call too
    libraries = {info["filepath"] for info in threadpool_info() if info["user_api"] == "blas"}
    assert len(libraries) >= 2  # NumPy's OpenBLAS and SciPy's
    before = blas_threads()
    seen: list[list[int]] = []
    attend = _fused_kernels.attend

    def watched(*arguments):
        seen.append(blas_threads())
        attend(*arguments)

    monkeypatch.setattr(_fused_kernels, "attend", watched)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 300, 16)) for _ in range(3))
    al.attention(q, k, v, engine="fused", num_threads=2)
    assert seen and all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before


@pytest.mark.parametrize("engine", ["tiled", "fused"])
def test_the_dots_that_bound_the_inputs_run_with_blas_at_one_thread(monkeypatch, engine):
    """The BLAS dots that bound max |V| and max |dO| before the tasks (``_tiled._magnitude_bound``)
    run with BLAS at one thread, as the tasks do: OpenBLAS's threads, once woken, spin on
    the cores the tasks then need (they made the float64 forward of ``attnlab bench`` 40 %
    slower); and BLAS is as found after the call."""
    if engine == "fused":
        if not _fused.available():
            pytest.skip("numba is not installed (attnlab[fast])")
        from attnlab.engine.fused._blas import products

        products()  # MKL, where it is installed, loads at the first product: list it before the call too
    before = blas_threads()
    seen: list[list[int]] = []
    dot = np.dot

    def watched(*arguments, **keywords):  # type: ignore[no-untyped-def]
        seen.append(blas_threads())
        return dot(*arguments, **keywords)

    monkeypatch.setattr(np, "dot", watched)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 300, 16)) for _ in range(3))
    al.attention(q, k, v, engine=engine, num_threads=2).backward(np.ones((4, 300, 16)))
    assert len(seen) >= 3  # V in the forward, V and dO in the backward
    assert all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failing_task_stops_the_others_and_is_raised_once_none_runs(threads, error):
    import time

    started: list[int] = []
    ended: list[int] = []

    def task(i: int) -> None:
        started.append(i)
        if i == 2:
            raise error(f"task {i}")
        time.sleep(0.02)
        ended.append(i)

    tasks = [lambda i=i: task(i) for i in range(60)]
    with pytest.raises(error, match="task 2"):
        _threads.run(tasks, threads)
    assert sorted(ended) == sorted(i for i in started if i != 2)  # nothing still running
    assert len(started) < 30  # the others stopped taking tasks (60 × 20 ms on 2–3 threads: 0.4–0.6 s)
    ran: list[int] = []
    _threads.run([lambda i=i: ran.append(i) for i in range(8)], threads)  # the pool still works
    assert sorted(ran) == list(range(8))
    assert _threads._state.blas_users == 0


def _finishes(work, seconds: float = 120.0) -> bool:
    """Whether ``work()`` returns within ``seconds`` (in a daemon thread, so that a hang fails the test)."""
    done = threading.Event()

    def call() -> None:
        work()
        done.set()

    threading.Thread(target=call, daemon=True).start()
    return done.wait(timeout=seconds)


def test_a_call_does_not_wait_for_a_pool_thread_busy_elsewhere():
    release = threading.Event()
    blocker = _threads._pool(1).submit(release.wait)  # the one thread of the pool a two-thread call uses
    ran: list[int] = []
    try:
        assert _finishes(lambda: _threads.run([lambda i=i: ran.append(i) for i in range(6)], 2))
    finally:
        release.set()
        blocker.result()
    assert sorted(ran) == list(range(6))  # the caller ran them all itself


@pytest.mark.parametrize("threads", [2, 3])
def test_attention_inside_a_mask_function_with_the_same_threads_finishes(threads):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((4, 300, 16)) for _ in range(3))
    inner = al.attention(q, k, v, engine="naive").output

    def mask_mod(batch, head, q_idx, kv_idx):
        # a mask function that itself calls attnlab on the same pool, from inside one of its tasks
        np.testing.assert_allclose(al.attention(q, k, v, engine="tiled", num_threads=threads).output, inner)
        return q_idx >= kv_idx

    results = []
    options = dict(engine="tiled", num_threads=threads, mask_mod=mask_mod)
    assert _finishes(lambda: results.append(al.attention(q, k, v, **options)))
    expected = al.attention(q, k, v, engine="naive", is_causal=True).output
    np.testing.assert_allclose(results[0].output, expected, rtol=1e-12, atol=1e-12)
