"""The reports' words come from their own numbers: ties at the shown precision are named as
ties, and "lowest at every step" is said only of a curve that is."""

from __future__ import annotations

import pytest

from attnlab import ArgumentError
from attnlab.experiments import _common, _rnn, _scaling, _value


def percent(value: float) -> str:
    return f"{value:.1%}"


def scaling_with(accuracy: dict[str, float], curves: dict[str, list[float]]) -> _scaling.Scaling:
    variance = [[d, 1.0, 1.0] for d in (4, 16)]
    sharpness = [[d, 0.5, 1.0, 0.3, 0.4, 1.2, 0.2] for d in (4, 16)]
    return _scaling.Scaling(1000, len(next(iter(curves.values()))), variance, sharpness, curves, accuracy)


def test_ranking_names_ties_at_the_shown_precision():
    # 0.9961 and 0.99585 both print as 99.6%: a tie, whichever is larger in the fourth digit
    tied = {"1/√d_k": 0.9961, "1": 0.402, "1/d_k": 0.99585}
    assert _common.ranking(tied, percent) == "1/√d_k and 1/d_k tie best (99.6%) and 1 ends worst (40.2%)"
    assert _common.ranking({"a": 0.5, "b": 0.7, "c": 0.6}, percent) == "b ends best (70.0%) and a ends worst (50.0%)"
    assert _common.ranking({"a": 0.5, "b": 0.5}, percent) == "all 2 end at 50.0%"
    assert _common.ranking({"a": 1.0, "b": 2.0}, str, higher=False) == "a ends best (1.0) and b ends worst (2.0)"
    with pytest.raises(ArgumentError, match="values"):
        _common.ranking({}, percent)


def test_lowest_throughout_only_for_a_curve_below_the_others_at_every_step():
    below = {"a": [1.0] * 30, "b": [2.0] * 30}
    assert _common.lowest_throughout(below) == "a"
    crossing = {"a": [1.0] * 15 + [3.0] * 15, "b": [2.0] * 30}  # a starts lower, ends higher
    assert _common.lowest_throughout(crossing) is None
    touching = {"a": [1.0] * 30, "b": [1.0] * 30}
    assert _common.lowest_throughout(touching) is None


def test_the_scaling_report_says_tie_and_throughout_only_when_true():
    crossing = {"1/√d_k": [1.0] * 15 + [3.0] * 15, "1": [5.0] * 30, "1/d_k": [2.0] * 30}  # not monotone
    report = _scaling.report(scaling_with({"1/√d_k": 0.9961, "1": 0.402, "1/d_k": 0.99585}, crossing))
    assert "1/√d_k and 1/d_k tie best (99.6%)" in report and "ends best" not in report.split("worst")[0]
    assert "(mean of 10 steps) is the lowest" not in report and "the curves cross or touch" in report
    below = {"1/√d_k": [2.0] * 30, "1": [5.0] * 30, "1/d_k": [1.0] * 30}
    report = _scaling.report(scaling_with({"1/√d_k": 0.90, "1": 0.40, "1/d_k": 0.95}, below))
    assert "1/d_k ends best (95.0%) and 1 ends worst (40.0%)" in report
    assert "the loss of 1/d_k (mean of 10 steps) is the lowest at every step" in report
    assert "within its sampling error" in report  # Var(q·k)/d_k = 1 exactly here


def test_the_value_report_names_a_tie():
    accuracy = {"learned W_v": 0.5004, "V = X": 0.4996, "V = K": 0.2}
    measured = _value.Value(10, {k: [1.0] for k in accuracy}, accuracy, {k: 1.0 for k in accuracy})
    assert "learned W_v and V = X tie best (50.0%) and V = K ends worst (20.0%)" in _value.report(measured)


def test_the_rnn_report_words_the_attention_spread_and_the_gradient_from_the_numbers():
    def measured(attention: list[float], gradient: list[float]) -> _rnn.Recurrence:
        results = {"attention": {"accuracy": dict(zip((4, 8), attention, strict=True)), "gradient_norm": [1.0, 1.0],
                                 "seconds_per_batch": 0.01, "sequential_steps": 1},
                   "tanh RNN": {"accuracy": {4: 0.9, 8: 0.3}, "gradient_norm": gradient, "seconds_per_batch": 0.01,
                                "sequential_steps": 9}}  # fmt: skip
        return _rnn.Recurrence(8, 10, [4, 8], {"attention": 1, "tanh RNN": 1}, results)

    report = _rnn.report(measured([1.0, 0.99], [0.001, 1.0]))
    assert "stays within 1.0% (99.0%–100.0%)" in report and "1,000 times smaller at the first item" in report
    assert "loses the long ones" in report
    assert "准确率在各个距离上相差不到 1.0%" in report and "小 1,000 倍" in report  # the Chinese from the same numbers
    report = _rnn.report(measured([1.0, 0.5], [1.0, 0.5]))
    assert "ranges 50.0%–100.0%" in report and "does not fall with the distance" in report
    assert "无关" not in report and "50.0%–100.0% 之间变化" in report and "没有随距离衰减" in report


@pytest.mark.slow
def test_the_quick_scaling_run_shows_what_its_report_says():
    measured = _scaling.measure(True, 0)  # the quick run's settings
    report = _scaling.report(measured)
    assert "within its sampling error" in report  # every Var(q·k)/d_k within 3 standard errors of 1
    unscaled, scaled = [row[1] for row in measured.sharpness], [row[4] for row in measured.sharpness]
    assert unscaled == sorted(unscaled) and max(scaled) - min(scaled) < 0.05  # saturates unscaled only
    assert measured.accuracy["1"] < min(measured.accuracy["1/√d_k"], measured.accuracy["1/d_k"])  # 1 ends worst
    assert "1 ends worst" in report


@pytest.mark.slow
def test_the_quick_rnn_run_shows_what_its_report_says():
    measured = _rnn.measure(True, 0)  # the quick run's settings
    attention, rnn = measured.results["attention"], measured.results["tanh RNN"]
    assert min(attention["accuracy"].values()) > 0.95  # attention: about the same at every distance
    assert rnn["gradient_norm"][0] < 1e-3 * rnn["gradient_norm"][-1]  # the RNN's gradient fades with distance
    report = _rnn.report(measured)
    assert "stays within" in report and "times smaller at the first item" in report


@pytest.mark.slow
def test_the_quick_value_and_normalization_runs_show_what_their_reports_say():
    from attnlab.experiments import _normalization

    value = _value.measure(True, 0)
    best = max(value.accuracy.values())
    assert value.accuracy["learned W_v"] == best and "learned W_v ends best" in _value.report(value)
    normalization = _normalization.measure(True, 0)
    spread = max(normalization.accuracy.values()) - min(normalization.accuracy.values())
    assert spread < 0.05 and f"within {spread:.1%} of each other" in _normalization.report(normalization)


def test_an_experiments_progress_bar_draws_nothing_where_stderr_is_not_a_terminal(capsys):
    """A site's build (stderr a pipe) gets no bar; the CLI in a terminal still does (tqdm's own)."""
    from attnlab.experiments._common import progress_bar

    show = progress_bar("coref", 3)
    for step in range(3):
        show(step, 0.5)
    assert capsys.readouterr().err == ""
