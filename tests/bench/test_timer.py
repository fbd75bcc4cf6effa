"""The one timer of ``attnlab bench``: turns, the settling run, the garbage collector, the
best of the timed runs (fake workloads: nothing here is a benchmark)."""

from __future__ import annotations

import gc
import math

import pytest

from attnlab import ArgumentError, ArgumentTypeError
from attnlab._timer import best_times, time_once


def recorder(calls: list[tuple[str, bool]], name: str):
    return lambda: calls.append((name, gc.isenabled()))


def test_settled_runs_take_turns_each_after_an_untimed_run_with_the_collector_off():
    calls: list[tuple[str, bool]] = []
    best = best_times({"a": recorder(calls, "a"), "b": recorder(calls, "b")}, 2, settle=True)
    assert [name for name, _ in calls] == ["a", "a", "b", "b"] * 2
    assert [enabled for _, enabled in calls] == [True, False] * 4  # untimed, then timed as timeit times
    assert list(best) == ["a", "b"] and all(0 <= s < math.inf for s in best.values())


def test_unsettled_runs_are_timed_as_they_come_once_a_round():
    calls: list[tuple[str, bool]] = []
    best_times({"a": recorder(calls, "a"), "b": recorder(calls, "b")}, 3, settle=False)
    assert calls == [("a", True), ("b", True)] * 3


def test_milliseconds_and_one_call_with_its_result():
    best = best_times({"sleep": lambda: sum(range(10_000))}, settle=False, milliseconds=True)
    assert best["sleep"] > 0
    result, seconds = time_once(lambda: 42)
    assert result == 42 and seconds >= 0


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"repeat": 0}, ArgumentError, "repeat: expected an integer >= 1, got 0"),
        ({"repeat": 1.5}, ArgumentTypeError, "repeat: expected an integer >= 1, got 1.5"),
        ({"pause": -1}, ArgumentError, "pause: expected a number >= 0.0, got -1"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        best_times({"a": lambda: None}, settle=True, **kwargs)
