"""A model's statistics (ModelStatistics): layers stacked, JSON read back bit for bit, a
malformed file refused naming its field."""

from __future__ import annotations

import json
from base64 import b64encode

import numpy as np
import pytest

from attnlab.engine import AttentionStatistics, attention_statistics
from attnlab.trace import ModelStatistics

L, HEADS, LAYERS, E = 5, 2, 3, 4


def layer_statistics(seed: int) -> AttentionStatistics:
    """One causal layer's statistics over random Q, K (heads, L, E): a row with the sink, one with −∞."""
    rng = np.random.default_rng(seed)
    q, k = (rng.standard_normal((HEADS, L, E)).astype(np.float32) for _ in range(2))
    return attention_statistics(q, k, is_causal=True, top_k=3, sink_keys=2, local_keys=2)


def b64(raw: bytes) -> str:
    return b64encode(raw).decode()


def made(**changes: object) -> ModelStatistics:
    fields = {"model": "/home/someone/models/tiny-llama", "ids": [1, 2, 3, 4, 5], "tokens": list("abcde")}
    return ModelStatistics.from_layers([layer_statistics(i) for i in range(LAYERS)], **{**fields, **changes})


def test_from_layers_stacks_each_layers_statistics_on_a_new_first_axis():
    layers = [layer_statistics(i) for i in range(LAYERS)]
    stats = ModelStatistics.from_layers(layers, model="m", ids=[], tokens=list("abcde"))
    assert (stats.num_layers, stats.num_heads, stats.top_k) == (LAYERS, HEADS, 3)
    for i, layer in enumerate(layers):
        np.testing.assert_array_equal(stats.statistics.lse[i], layer.lse)
        np.testing.assert_array_equal(stats.statistics.top_keys[i], layer.top_keys)
        np.testing.assert_array_equal(stats.statistics.received[i], layer.received)
        np.testing.assert_array_equal(stats.statistics.distance[i], layer.distance)
    assert stats.statistics.received.shape == (LAYERS, HEADS, L)
    assert stats.statistics.top_weights.shape == (LAYERS, HEADS, L, 3)


def test_the_model_is_kept_by_its_name_never_its_path():
    assert made().model == "tiny-llama"
    assert "/home/someone" not in made().to_json()


def test_json_reads_back_bit_for_bit_with_every_field():
    stats = made(
        special=[True, False, False, False, False], template=[False, True, True, False, False],
        notes=["cut to 5 tokens"], architecture="llama", num_key_value_heads=1, parts=["", "", "篮", "", ""],
    )  # fmt: skip
    stats.statistics.lse[0, 0, 1] = -np.inf  # a row with no key
    stats.statistics.entropy[1, 1, 2] = np.nan  # a row with a NaN score
    back = ModelStatistics.from_json(stats.to_json())
    for name in (
        "model",
        "ids",
        "tokens",
        "special",
        "template",
        "notes",
        "architecture",
        "num_key_value_heads",
        "parts",
    ):
        assert getattr(back, name) == getattr(stats, name), name
    for name in ("lse", "entropy", "max_weight", "top_keys", "top_weights", "sink_share", "local_share",
                 "sinks_weight", "received", "distance", "distance_bins"):  # fmt: skip
        a, b = getattr(stats.statistics, name), getattr(back.statistics, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert a.tobytes() == b.tobytes(), name  # every bit, NaN and −∞ included
    assert (back.statistics.sink_keys, back.statistics.local_keys) == (2, 2)


def test_its_json_is_json_with_arrays_as_little_endian_bytes():
    data = json.loads(made().to_json())
    lse = data["statistics"]["lse"]
    assert lse["dtype"] == "<f4" and lse["shape"] == [LAYERS, HEADS, L]
    assert data["statistics"]["top_keys"]["dtype"] == "<i4"  # key indices as int32 in the file, int64 back


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("statistics"), "expected a model's statistics"),
        (lambda d: d["statistics"].pop("lse"), "lse: expected {dtype"),
        (lambda d: d["statistics"]["received"].update(dtype="<i2"), "received: expected {dtype"),
        (lambda d: d["statistics"]["entropy"].update(shape=[3, 2]), "entropy: shape: expected 3 whole numbers"),
        (lambda d: d["statistics"]["entropy"].update(shape=[3, 2, 4]), "entropy: expected 96 bytes"),
        (lambda d: d["statistics"]["top_keys"].update(base64="***"), "top_keys: base64: expected"),
        (lambda d: d["statistics"].update(sink_keys=0), "sink_keys: expected a whole number ≥ 1, got 0"),
        (
            lambda d: d.update(tokens=list("abcd"), ids=[], special=[], template=[], parts=[]),
            "statistics: expected lse of shape \\(layers, heads, 4\\)",
        ),
        (lambda d: d.update(ids=[1, 2]), "ids: expected 5 integers"),
        (lambda d: d.update(special=[True]), "special: expected 5 booleans"),
        (lambda d: d.update(num_key_value_heads=3), "num_key_value_heads: expected 0 \\(unknown\\) or a divisor"),
        (lambda d: d.update(notes="x"), "notes: expected a list of texts"),
    ],
)
def test_a_malformed_file_is_refused_naming_its_field(change, field):
    data = json.loads(made().to_json())
    change(data)
    with pytest.raises(ValueError, match=rf"^s\.json: .*{field}"):
        ModelStatistics.from_json(json.dumps(data), "s.json")


def test_a_received_of_another_length_than_the_tokens_is_refused():
    data = json.loads(made().to_json())
    longer = np.zeros((LAYERS, HEADS, L + 1), "<f4")  # one key more than the tokens
    data["statistics"]["received"] = {"dtype": "<f4", "shape": list(longer.shape), "base64": b64(longer.tobytes())}
    with pytest.raises(ValueError, match=r"^s\.json: statistics\.received: expected shape"):
        ModelStatistics.from_json(json.dumps(data), "s.json")


def test_text_that_is_not_json_is_refused():
    with pytest.raises(ValueError, match=r"^s\.json: expected JSON"):
        ModelStatistics.from_json("{", "s.json")


def test_layers_of_different_settings_are_refused():
    other = attention_statistics(np.ones((HEADS, L, E), np.float32), np.ones((HEADS, L, E), np.float32), top_k=3)
    with pytest.raises(ValueError, match=r"^layers: expected the same sink_keys, local_keys and bins .* layer 1$"):
        ModelStatistics.from_layers([layer_statistics(0), other], model="m", ids=[], tokens=list("abcde"))
    with pytest.raises(ValueError, match=r"^layers: expected at least one"):
        ModelStatistics.from_layers([], model="m", ids=[], tokens=list("abcde"))
