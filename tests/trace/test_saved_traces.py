"""Saved traces read back checked: NaN or null where no engine makes one, a model's layers
that disagree, and tokens as text fit for a terminal."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnlab as al
from attnlab.cli import main
from attnlab.trace import ModelTrace, Trace
from attnlab.trace._display import display_text


def saved(**changes: object) -> dict:
    """A 3-token trace as JSON, with ``changes`` written over it."""
    trace = al.SelfAttention(3, 2, seed=0).trace(np.eye(3), tokens=["a", "b", "c"])
    data = json.loads(trace.to_json())
    data.update(changes)
    return data


@pytest.mark.parametrize(("value", "shown"), [("NaN", "nan"), (None, "null (−∞)"), ("Infinity", "inf")])
def test_a_saved_trace_with_a_nan_or_null_score_is_refused(value, shown):
    data = saved()
    data["scores"][1][2] = value
    with pytest.raises(
        ValueError, match=rf"^t\.json: scores: expected q·k, .*got {re.escape(shown)} at row 1, column 2$"
    ):
        Trace.from_dict(data, "t.json")


def test_a_saved_trace_with_a_nan_weight_in_a_row_that_cannot_overflow_is_refused():
    data = saved()
    data["weights"][0][0] = "NaN"
    with pytest.raises(ValueError, match=r"^t\.json: weights: expected numbers .*got NaN at row 0, column 0$"):
        Trace.from_dict(data, "t.json")


def test_the_cli_views_a_tampered_trace_with_exit_status_2(tmp_path, capsys):
    data = saved()
    data["scores"][0][0] = "NaN"
    (tmp_path / "t.json").write_text(json.dumps(data), encoding="utf-8")
    for argv in (
        ["view", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.html")],
        ["trace", str(tmp_path / "t.json")],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "scores: expected q·k" in err
    assert not (tmp_path / "t.html").exists()


def test_a_saved_trace_whose_scores_overflowed_in_the_engine_still_reads_back():
    x = np.array([[1e200, 1e200], [1e200, -1e200]])  # finite input; q·k past float range
    trace = al.SelfAttention(2, 2, seed=0).trace(x)
    assert not np.isfinite(trace.scores).all() and np.isnan(trace.weights).any()  # the engine's own NaN
    again = Trace.from_dict(json.loads(trace.to_json()))
    np.testing.assert_array_equal(again.weights, trace.weights)
    masked = al.SelfAttention(3, 2, seed=0).trace(np.eye(3), is_causal=True)  # −∞ (null) in scaled_scores is a mask
    assert np.isneginf(Trace.from_dict(json.loads(masked.to_json())).scaled_scores).sum() == 3


def model_trace(layer_one: dict) -> dict:
    layer = saved()
    return {
        "model": "m", "ids": [0, 1, 2], "tokens": ["a", "b", "c"], "num_layers": 2, "num_heads": 1,
        "layers": {"0": layer, "1": layer_one},
    }  # fmt: skip


def test_a_tampered_model_trace_names_the_token_that_differs():
    assert ModelTrace.from_dict(model_trace(saved()), "m.json").num_layers == 2
    with pytest.raises(ValueError) as error:
        ModelTrace.from_dict(model_trace(saved(tokens=["a", "B", "c"])), "m.json")
    assert (
        str(error.value)
        == "m.json, layer 1: tokens: expected the trace's tokens, got token 1 'B' where the trace has 'b'"
    )
    with pytest.raises(ValueError) as error:
        ModelTrace.from_dict(model_trace(saved(tokens=None)), "m.json")
    assert str(error.value) == "m.json, layer 1: tokens: expected the trace's 3 tokens, got none"
    heads = al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(3, 4), tokens=["a", "b", "c"])
    with pytest.raises(ValueError) as error:
        ModelTrace.from_dict(model_trace(json.loads(heads.to_json())), "m.json")
    assert str(error.value) == "m.json, layer 1: expected the trace's 1 heads, got 2"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain 小明 👩\u200d💻", "plain 小明 👩\u200d💻"),  # printable, joiner kept
        ("a\x1b[31m", "a\\x1b[31m"),
        ("b\udcff", "b\\udcff"),
        ("tab\tnew\nline\r\x7f\x85\x00", "tab⇥new↵line␍\\x7f\\x85\\x00"),  # whitespace as signs; C0, DEL, C1
        ("e\u0301", "e\u0301"),  # a combining accent is text
    ],
)
def test_display_text_escapes_control_characters_and_lone_surrogates_only(text, shown):
    assert display_text(text) == shown
    assert display_text(shown) == shown  # an escape is printable: escaping twice changes nothing


def test_a_saved_trace_with_a_lone_surrogate_token_is_traced_viewed_and_plotted(tmp_path, capsys):
    """What `trace --text` saves from a Linux argument with an undecodable byte reads back:
    the token kept exactly, shown escaped (it used to be refused as "not valid Unicode")."""
    assert main(["trace", "--text", "a\udcff b", "--format", "json"]) == 0
    text = capsys.readouterr().out
    assert json.loads(text)["tokens"] == ["a\udcff", "b"]
    (tmp_path / "s.json").write_text(text, encoding="utf-8")  # stdout wrote the surrogate as a JSON escape
    saved_path = str(tmp_path / "s.json")
    assert Trace.from_dict(json.loads(text)).tokens == ["a\udcff", "b"]
    assert main(["trace", saved_path]) == 0 and "(a\\udcff)" in capsys.readouterr().out
    assert main(["view", saved_path, "-o", str(tmp_path / "s.html")]) == 0
    pytest.importorskip("matplotlib")
    assert main(["plot", saved_path, "-o", str(tmp_path / "s.png")]) == 0, capsys.readouterr().err


def test_a_trace_of_no_rows_is_refused_naming_x():
    """A trace shows rows: one of none could not be drawn, paged or read back."""
    import attnlab as al

    with pytest.raises(al.ArgumentError, match=r"^X: expected at least one row \(token\) to trace, got 0 rows"):
        al.SelfAttention(8, 4).trace(np.zeros((0, 8)))
    with pytest.raises(al.ArgumentError, match=r"^x: expected shape \(N, L, 8\).*got shape \(1, 0, 8\)"):
        al.MultiheadAttention(8, 2, batch_first=True).trace(np.zeros((1, 0, 8), dtype=np.float32))


def test_a_saved_trace_with_a_bool_scale_says_it_got_a_bool():
    data = al.SelfAttention(4, 4).trace(np.eye(3, 4)).to_dict()
    data["scale"] = True
    with pytest.raises(al.ArgumentError, match=r"scale: expected a finite number, got True$"):
        Trace.from_dict(data)


@pytest.mark.parametrize(
    ("field", "index", "value", "message"),
    [
        ("weights", (1, 1), None, r"weights: expected a softmax's weights .*got null at row 1, column 1"),
        ("weights", (1, 1), "Infinity", r"weights: expected a softmax's weights .*got \"Infinity\" at row 1, column 1"),
        ("weights", (1, 1), -0.5, r"weights: expected a softmax's weights .*got -0.5 at row 1, column 1"),
        ("weights", (2,), [0.9, 0.9, 0.9], r"weights: expected a softmax's weights .*got a sum of 2.7 in row 2"),
        ("output", (0, 0), "NaN", r"output: expected numbers, got NaN at \(0, 0\)"),
        ("Q", (0, 0), "NaN", r"Q: expected numbers, got NaN at \(0, 0\)"),
        ("tokens", (1,), None, r"tokens: expected labels \(strings\), got null"),
    ],
)
def test_a_hand_edited_trace_whose_numbers_no_engine_makes_is_refused(field, index, value, message):
    """A softmax never gives a weight outside [0, 1] or a row over 1; finite inputs give no NaN."""
    data = json.loads(json.dumps(al.SelfAttention(4, 4).trace(np.eye(3, 4), tokens=["a", "b", "c"]).to_dict()))
    target = data[field]
    for step in index[:-1]:
        target = target[step]
    target[index[-1]] = value
    with pytest.raises(al.ArgumentError, match=message):
        Trace.from_dict(data)
