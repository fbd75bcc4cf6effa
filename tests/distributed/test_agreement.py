"""The ring's agreement step, in one process: P ranks as threads, with a stand-in for the
two torch.distributed calls it makes (all_gather and the group's rank and size), so every
rank's error, the comparison of settings by value and the sequence guard are checked
directly and quickly. tests/distributed/test_distributed.py runs the same over gloo."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnlab as al  # noqa: E402
from attnlab import distributed  # noqa: E402
from attnlab.distributed import _agreement, _attention, _ring  # noqa: E402
from attnlab.engine.variants import Rules  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_call_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """No counts left by another test (a freed group's id may come back as a new one's)."""
    monkeypatch.setattr(_agreement, "_CALLS", {})


class Exchange:
    """What the threads share: one slot a rank, and a barrier that breaks (rather than
    hangs) when a rank never comes: the hang that the agreement must prevent."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.slots: list[Any] = [None] * size
        self.barrier = threading.Barrier(size, timeout=20)


class FakeDist:
    """torch.distributed as :func:`attnlab.distributed._agreement.agree` uses it, for one rank;
    ``collectives`` counts its all_gathers."""

    def __init__(self, exchange: Exchange, rank: int) -> None:
        self.exchange, self.rank, self.collectives = exchange, rank, 0
        self.group = types.SimpleNamespace(WORLD=object())  # this rank's default group: its own call count

    def get_world_size(self, group: Any = None) -> int:
        return self.exchange.size

    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def all_gather(self, outputs: list[Any], tensor: Any, group: Any = None) -> None:
        self.collectives += 1
        self.exchange.slots[self.rank] = tensor.clone()
        self.exchange.barrier.wait()
        for output, sent in zip(outputs, self.exchange.slots, strict=True):
            output.copy_(sent)
        self.exchange.barrier.wait()


def ranks(size: int) -> list[FakeDist]:
    exchange = Exchange(size)
    return [FakeDist(exchange, r) for r in range(size)]


def on_every_rank(monkeypatch: pytest.MonkeyPatch, fakes: list[FakeDist], call: Callable[[int], Any]) -> list[Any]:
    """``call(rank)`` on a thread per rank, each seeing its own FakeDist; what each returned
    or raised, in rank order."""
    local = threading.local()
    monkeypatch.setattr(_agreement, "_torch_distributed", lambda: local.dist)
    results: list[Any] = [None] * len(fakes)

    def run(rank: int) -> None:
        local.dist = fakes[rank]
        try:
            results[rank] = call(rank)
        except Exception as e:  # the test looks at it
            results[rank] = e

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(fakes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results


def shards(rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.random.default_rng(rank).standard_normal((1, 2, 3 + rank, 4))  # (B, H, n_r, E)
    return x, x, x


def agreed(rank: int, **settings: Any) -> _ring.Ring:
    """The Ring this rank's agreement gives, for the ring_attention call with ``settings``."""
    q, k, v = shards(rank)
    given = {"is_causal": True, "scale": None, "enable_gqa": False, "layout": "contiguous", **settings}
    attn_mask = given.pop("attn_mask", None)
    rules = Rules.of(**{name: given.pop(name) for name in list(given) if name not in ("scale", "enable_gqa", "layout")})
    return _attention._agree(
        "ring_attention", {"query": q, "key": k, "value": v}, rules, given["scale"], given["enable_gqa"],
        given["layout"], None, attn_mask=attn_mask,
    )  # fmt: skip


def same_error_everywhere(results: list[Any], kind: type[Exception], message: str) -> None:
    for rank, result in enumerate(results):
        assert type(result) is kind, (rank, result)
        assert str(result) == message, (rank, str(result))


class Exploding:
    """An array-like whose conversion fails with an error that is not attnlab's."""

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise RuntimeError("the conversion failed\n  on two lines")


@pytest.mark.parametrize(
    ("bad_query", "kind", "message"),
    [
        (lambda: torch.ones(1, 2, 4, 4, dtype=torch.float64, requires_grad=True), al.ArgumentTypeError,
         "ring_attention: rank 1 of 3: query: expected an array, or a tensor without requires_grad (pass "
         "tensor.detach(), as torch's Tensor.numpy() asks), got a Tensor with requires_grad=True"),
        (Exploding, distributed.RingError,
         "ring_attention: rank 1 of 3: RuntimeError: the conversion failed on two lines"),
        (lambda: [[1.0, 2.0], [3.0]], al.ArgumentTypeError, "ring_attention: rank 1 of 3: query: expected an array"),
    ],
    ids=["torch-requires-grad", "runtime-error", "ragged"],
)  # fmt: skip
def test_any_error_on_one_rank_is_the_same_one_line_error_on_every_rank(monkeypatch, bad_query, kind, message):
    """Rank 1 of 3 passes a query that fails its checks with an error of any type (torch's
    RuntimeError for requires_grad among them): every rank raises the same error, on one
    line, after the one agreement step; no rank is left at a barrier or goes on alone."""
    fakes = ranks(3)

    def call(rank: int) -> Any:
        q, k, v = shards(rank)
        return distributed.ring_attention(bad_query() if rank == 1 else q, k, v, is_causal=True)

    results = on_every_rank(monkeypatch, fakes, call)
    for rank, result in enumerate(results):
        assert isinstance(result, kind) and isinstance(result, al.AttnlabError), (rank, result)
        assert str(result).startswith(message) and "\n" not in str(result), (rank, str(result))
    assert len({str(r) for r in results}) == 1
    assert [f.collectives for f in fakes] == [2, 2, 2]  # the agreement's two all_gathers, then nothing


def test_settings_are_compared_by_value_not_by_repr(monkeypatch):
    """NumPy's bool and numbers, an int for a float and a list for a tuple are the same
    settings as Python's: the ranks agree, on the same band and scale."""
    numpy_settings = {"is_causal": np.True_, "scale": np.float64(0.25), "window": [np.int64(3), 0],
                      "softcap": np.float32(2.0)}  # fmt: skip
    python_settings = {"is_causal": True, "scale": 0.25, "window": (3, 0), "softcap": 2}
    results = on_every_rank(
        monkeypatch, ranks(3), lambda rank: agreed(rank, **(numpy_settings if rank == 1 else python_settings))
    )
    for result in results:
        assert isinstance(result, _ring.Ring), result
    assert len({(r.band, r.scale, r.is_causal, r.softcap, tuple(r.lengths)) for r in results}) == 1
    assert results[0].lengths == [3, 4, 5] and results[0].band == results[1].band


@pytest.mark.parametrize(
    ("setting", "mine", "theirs", "shown"),
    [
        ("scale", 0.25, np.float64(0.5), "scale=0.25, rank 1 scale=np.float64(0.5)"),
        ("is_causal", True, np.False_, "is_causal=True, rank 1 is_causal=np.False_"),
        ("window", (3, 0), (3, 1), "window=(3, 0), rank 1 window=(3, 1)"),
    ],
)
def test_settings_that_differ_in_value_are_refused_on_every_rank_naming_them(monkeypatch, setting, mine, theirs,
                                                                              shown):  # fmt: skip
    results = on_every_rank(
        monkeypatch, ranks(3), lambda rank: agreed(rank, **{setting: theirs if rank == 1 else mine})
    )
    same_error_everywhere(results, al.ArgumentError, f"ring_attention: the ranks disagree: rank 0 has {shown}")


def test_a_rank_one_call_ahead_pairs_with_no_other_ranks_call(monkeypatch):
    """The sequence guard: after one good call, rank 1 counts a call that the others never
    joined (a call it made alone, as a rank that failed before the agreement once did).
    Its next call meets their earlier one: every rank refuses that pairing, with the same
    error, instead of computing against another call; the counts then meet, and the next
    call pairs and agrees. A forward meeting a backward is refused the same way."""
    fakes = ranks(3)
    assert all(isinstance(r, _ring.Ring) for r in on_every_rank(monkeypatch, fakes, agreed))
    _agreement._CALLS[id(fakes[1].group.WORLD)] += 1  # rank 1's lone call
    same_error_everywhere(
        on_every_rank(monkeypatch, fakes, agreed), distributed.RingError,
        "ring_attention: the ranks are out of step: rank 0 is at its ring call 2 (ring_attention), rank 1 at its call "
        "3 (ring_attention); a rank that skipped or repeated a call would pair with another rank's next one (every "
        "rank refuses this call; the next pairs again)",
    )  # fmt: skip
    assert all(isinstance(r, _ring.Ring) for r in on_every_rank(monkeypatch, fakes, agreed))

    def forward_or_backward(rank: int) -> Any:
        q, k, v = shards(rank)
        if rank == 2:
            return distributed.ring_attention_backward(q, q, k, v, q, q[..., 0], is_causal=True)
        return agreed(rank)

    results = on_every_rank(monkeypatch, fakes, forward_or_backward)
    same_error_everywhere(
        results, distributed.RingError,
        "ring_attention: the ranks are out of step: rank 0 is at its ring call 5 (ring_attention), rank 2 at its call "
        "5 (ring_attention_backward); a rank that skipped or repeated a call would pair with another rank's next one "
        "(every rank refuses this call; the next pairs again)",
    )  # fmt: skip


def test_shard_and_unshard_refuse_an_axis_out_of_range_naming_it():
    """NumPy's rule, −ndim <= axis < ndim, as :func:`attnlab.softmax` states it; not NumPy's
    IndexError."""
    x = np.ones((2, 6, 3))
    with pytest.raises(al.ArgumentError, match=r"^axis: expected an integer in \[-3, 3\) \(an axis of the "
                       r"3-dimensional array\), got 5$"):  # fmt: skip
        distributed.shard(x, 2, 0, axis=5)
    with pytest.raises(al.ArgumentError, match=r"^axis: expected an integer in \[-3, 3\)"):
        distributed.shard(x, 2, 0, axis=-4)
    with pytest.raises(al.ArgumentTypeError, match=r"^axis: expected an integer, got 1\.0$"):
        distributed.shard(x, 2, 0, axis=1.0)
    with pytest.raises(al.ArgumentError, match=r"^axis: expected an integer in \[-3, 3\)"):
        distributed.unshard([x, x], axis=3)
    np.testing.assert_array_equal(distributed.shard(x, 2, 1, axis=-3), x[1:])  # a valid axis still cuts
    np.testing.assert_array_equal(distributed.unshard([x[:1], x[1:]], axis=0), x)
