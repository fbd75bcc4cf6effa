"""Each experiment's ``measure``, in-process on a small setting, shows what its report
claims, checked against hand-computed or independently computed expectations."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from attnlab.experiments import _coref, _coref_experiment, _normalization, _rnn, _scaling, _value


def max_softmax_weight(scores: np.ndarray) -> float:
    """The mean largest softmax weight over rows, computed here independently of the experiment."""
    shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return float((shifted.max(axis=-1) / shifted.sum(axis=-1)).mean())


# Each experiment measured once on a small setting (module scope): its claims are checked here, and
# its figures and report are drawn from it (test_each_experiments_figures_and_report_come_from_its_measure).
@pytest.fixture(scope="module")
def scaling():
    return _scaling.measure(True, 0, widths=(4, 64, 1024), samples=4000, queries=500, steps=0)


@pytest.fixture(scope="module")
def normalization():
    return _normalization.measure(True, 0, steps=5)


@pytest.fixture(scope="module")
def value():
    return _value.measure(True, 0)  # the quick run's size: 3 models of d = 16, 200 steps


@pytest.fixture(scope="module")
def rnn():
    return _rnn.measure(True, 0, items=8, steps=100)


@pytest.fixture(scope="module")
def coref():
    return _coref_experiment.measure(True, 0, steps=60, batch=8)


@pytest.mark.slow
def test_scaling_unscaled_softmax_saturates_as_d_k_grows_and_scaled_does_not(scaling):
    measured = scaling
    for d_k, ratio, scaled in measured.variance:
        # Var(q·k) = Σ E[q_i²]E[k_i²] = d_k; the estimate's standard error is √((2 + 6/d_k)/samples) < 0.03
        assert ratio == pytest.approx(1, abs=0.15) and scaled == pytest.approx(ratio), d_k
    unscaled, scaled = [row[1] for row in measured.sharpness], [row[4] for row in measured.sharpness]
    jacobian_unscaled = [row[3] for row in measured.sharpness]
    assert unscaled == sorted(unscaled) and unscaled[-1] > 0.9  # saturates with d_k
    assert jacobian_unscaled == sorted(jacobian_unscaled, reverse=True)  # the gradient through it vanishes
    # at d_k = 1024, |q|²/d_k ≈ 1, so the scores for one query are close to 16 independent N(0, d_k) draws
    # (unscaled) or N(0, 1) draws (scaled): the expected largest weight of those, by a separate sampling
    draws = np.random.default_rng(12345).standard_normal((100_000, 16))
    assert scaled[-1] == pytest.approx(max_softmax_weight(draws), abs=0.02)
    assert unscaled[-1] == pytest.approx(max_softmax_weight(draws * 32), abs=0.02)
    assert max(scaled) - min(scaled) < 0.05  # scaled: the same at every d_k
    # scores (0, 0): weights ½ each, entropy ln 2, Jacobian [[¼, −¼], [−¼, ¼]] of norm ½
    assert _scaling.softmax_sharpness(np.zeros((1, 2))) == pytest.approx([0.5, math.log(2), 0.5], abs=1e-12)
    assert set(measured.metrics()) == {"var_ratio", "scaled_variance", "max_weight_unscaled", "max_weight_scaled",
                                       "accuracy"}  # fmt: skip


def test_normalization_reproduces_the_articles_tables_and_bases_are_temperatures(normalization):
    measured = normalization
    e = math.e
    by_hand = [1 / (1 + e + e * e), e / (1 + e + e * e), e * e / (1 + e + e * e)]  # softmax(1, 2, 3)
    np.testing.assert_allclose(measured.softmax[0], by_hand, rtol=1e-14)
    np.testing.assert_allclose(measured.softmax[0], [0.0900, 0.2447, 0.6652], atol=5e-5)  # the article's table
    np.testing.assert_array_equal(measured.linear[1], [-2.0, 4.0, -1.0])  # (−1, 2, −0.5) / 0.5: beyond [0, 1]
    assert all(gap <= 1e-12 for gap in measured.base_gap.values())  # b^x = e^(x·ln b)
    z = np.random.default_rng(1).standard_normal((3, 5))
    np.testing.assert_allclose(
        _normalization.softmax_base(z, 10.0, 2.0), _normalization.softmax_base(z, e, 2.0 / math.log(10))
    )
    assert set(measured.accuracy) == {"softmax", "linear", "relu", "sigmoid"} and len(measured.curves["relu"]) == 5


def test_value_a_learned_v_carries_more_than_v_equals_x_or_k(value):
    measured = value
    accuracy = measured.accuracy
    assert accuracy["learned W_v"] > max(accuracy["V = X"], accuracy["V = K"])
    assert accuracy["learned W_v"] > 3 / 16  # well above chance (1 in 16 values)
    assert measured.metrics() == {"accuracy": accuracy, "loss": measured.loss}


@pytest.mark.slow
def test_rnn_attention_reaches_far_items_the_rnn_does_not(rnn):
    measured = rnn
    attention, rnn = measured.results["attention"], measured.results["tanh RNN"]
    assert measured.distances == [4, 8]
    assert attention["accuracy"][8] > rnn["accuracy"][8] + 0.5
    assert (attention["sequential_steps"], rnn["sequential_steps"]) == (1, 9)  # 8 items and the query, in order
    gradients = rnn["gradient_norm"]
    assert gradients[-1] > 10 * gradients[0]  # ∂loss/∂x_t fades with the distance from the end
    # the weights, counted by hand: embeddings of 16 keys and 16 values, then q, k, v (64²+64 each) and a
    # readout (64·16+16); or the RNN's input (64·84+84) and recurrent (84²) weights and a readout (84·16+16)
    embeddings = 2 * 16 * 64
    assert measured.weights == {"attention": embeddings + 3 * (64 * 64 + 64) + 64 * 16 + 16,
                                "tanh RNN": embeddings + 64 * 84 + 84 + 84 * 84 + 84 * 16 + 16}  # fmt: skip


@pytest.mark.slow
def test_coref_training_turns_the_answering_head_to_the_referent(coref):
    untrained = _coref_experiment.measure(True, 0, steps=0, batch=8)
    trained = coref
    layer, head = _coref.HEAD
    # untrained, every head spreads the pronoun's weight about evenly: a 2-character name in a sentence
    # of about 30 tokens gets about 2/30
    assert np.all(np.abs(untrained.per_head - 2 / 30) < 0.04)
    others = np.delete(trained.per_head.ravel(), layer * trained.per_head.shape[1] + head)
    assert trained.per_head[layer, head] > 2 * others.max()  # only the head with the loss learned to point
    assert len(trained.losses) == 60 and trained.metrics()["steps"] == 60


def test_measuring_normalization_and_value_imports_no_matplotlib():
    code = """
import sys
from attnlab.experiments import _run, _normalization, _value
_normalization.measure(True, 0, steps=2)
_value.measure(True, 0, steps=2)
assert "matplotlib" not in sys.modules, "matplotlib imported"
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scaling", "normalization", "value", "rnn", "coref"])
def test_each_experiments_figures_and_report_come_from_its_measure(name, request, tmp_path):
    """What a run writes besides the numbers checked above (the run itself: test_experiments.py)."""
    pytest.importorskip("matplotlib")
    from attnlab.experiments._run import EXPERIMENTS

    experiment, measured = EXPERIMENTS[name], request.getfixturevalue(name)
    if experiment.save is not None:  # coref's: the trained model, a checkpoint attnlab loads
        from attnlab import models

        experiment.save(measured, tmp_path)
        assert models.load(tmp_path / "model").config.num_hidden_layers == 2
    figures = experiment.figures(measured, tmp_path)
    assert figures and all((tmp_path / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for figure in figures)
    report = experiment.report(measured)
    assert report.startswith(f"# {name}: ") and "**What it shows.**" in report and "**结论。**" in report
    assert all(f"]({figure})" in report for figure in figures)  # each figure in the report


@pytest.mark.slow
def test_training_shows_its_progress_to_the_end_in_a_terminal(capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # captured, as a terminal would show it
    _coref_experiment.measure(True, 0, steps=3, batch=8)
    err = capsys.readouterr().err
    assert "coref: 100%" in err and "3/3" in err  # the progress bar, to its end
