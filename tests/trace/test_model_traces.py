"""Cross-attention traces (L queries over S keys) and the model traces of attnlab.hf:
module names, kinds, an encoder-decoder model's two sequences and a vision model's
image, built by hand (tests/traces.py), saved and read back, and refused when their
parts do not fit."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import attnlab as al
import traces
from attnlab.engine.variants import Rules
from attnlab.trace import KINDS, ModelTrace, Trace, build_trace


def cross(seed: int = 0, **changes) -> Trace:
    """3 queries over 5 keys of another sequence, 2 heads."""
    rng = np.random.default_rng(seed)
    Q, K, V = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 3))  # (H, L|S, ·)
    arguments = {"scale": None, "is_causal": False, "tokens": ["a", "b", "c"], "key_tokens": list("vwxyz")}
    return build_trace(rng.normal(size=(3, 6)), Q, K, V, **{**arguments, **changes})


def test_a_cross_attention_trace_is_l_by_s_and_its_weights_a_hand_softmax():
    trace = cross()
    assert trace.weights.shape == (2, 3, 5) and trace.num_keys == 5 and trace.key_labels == list("vwxyz")
    z = np.einsum("hie,hje->hij", trace.Q, trace.K) / math.sqrt(4)  # (H, L, S): scale·q·k, by hand
    expected = np.exp(z - z.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(trace.weights, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.output, expected @ trace.V, rtol=0, atol=1e-12)
    assert repr(trace) == "Trace(L=3, S=5, d_model=6, heads=2, scale=0.5)"
    assert trace.head(1).key_tokens == list("vwxyz")
    unlabelled = cross(key_tokens=None)
    assert unlabelled.key_tokens is None and unlabelled.key_labels == ["0", "1", "2", "3", "4"]


def test_a_cross_attention_trace_reads_back_with_its_key_tokens():
    trace = cross()
    again = Trace.from_dict(json.loads(trace.to_json()), "c.json")
    assert again.key_tokens == list("vwxyz") and again.tokens == ["a", "b", "c"]
    for name in ("Q", "K", "V", "scores", "scaled_scores", "weights", "output"):
        np.testing.assert_array_equal(getattr(again, name), getattr(trace, name))


def test_a_trace_saved_before_key_tokens_reads_back_unchanged():
    trace = al.SelfAttention(3, 2, seed=0).trace(np.eye(3), tokens=["a", "b", "c"])
    data = json.loads(trace.to_json())
    del data["key_tokens"]  # a file written before the field
    again = Trace.from_dict(data)
    assert again.key_tokens is None and again.key_labels == ["a", "b", "c"]
    np.testing.assert_array_equal(again.weights, trace.weights)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"key_tokens": ["v", "w"]}, r"^c\.json: key_tokens: expected 5 labels, one per key \(S = 5\), got 2 labels$"),
        ({"key_tokens": "vwxyz"}, r"^c\.json: key_tokens: expected 5 labels, one per key \(S = 5\), got str$"),
        ({"key_tokens": ["v", "w", "x", "y", 5]}, r"^c\.json: key_tokens: expected labels \(strings\), got 5$"),
        ({"tokens": ["a", "b"]}, r"^c\.json: tokens: expected 3 labels, one per input row, got 2$"),
    ],
)
def test_a_saved_cross_attention_trace_with_wrong_labels_is_refused(change, message):
    data = {**json.loads(cross().to_json()), **change}
    with pytest.raises(al.ArgumentError, match=message):
        Trace.from_dict(data, "c.json")


def test_a_saved_cross_attention_trace_whose_keys_and_values_differ_in_rows_is_refused():
    data = json.loads(cross().to_json())
    data["V"] = [head[:4] for head in data["V"]]  # 4 value rows beside 5 keys
    with pytest.raises(al.ArgumentError, match=r"^c\.json: V: expected shape \(2, 5, 'width'\), got \(2, 4, 3\)$"):
        Trace.from_dict(data, "c.json")


def test_build_trace_refuses_key_tokens_that_are_not_one_per_key():
    with pytest.raises(al.ArgumentError, match=r"key_tokens: expected 5 labels, one per row of K and V, got 4 labels"):
        cross(key_tokens=list("vwxy"))
    with pytest.raises(al.ArgumentTypeError, match=r"key_tokens: expected 5 labels, one per row of K, got a string"):
        cross(key_tokens="vwxyz")


def test_causal_cross_attention_is_the_engines_bottom_right_rule():
    trace = cross(
        rules=Rules(is_causal=True, causal_alignment="bottom_right")
    )  # query i sees keys j <= i + S − L = i + 2
    expected = np.arange(5)[None, :] > np.arange(3)[:, None] + 2  # (L, S)
    np.testing.assert_array_equal(trace.masked[0], expected)
    assert "i + S − L" in trace.variants.describe("en")


def test_the_text_of_cross_attention_heads_its_columns_with_the_key_tokens():
    text = cross().head(0).render(lang="en", precision=2)
    assert "Keys' length: 5" in text and "shape of K: 5 × 4" in text
    header = next(line for line in text.splitlines() if line.strip().startswith("keys"))
    assert header.split()[1:] == ["v,", "w,", "x,", "y,", "z"]
    assert "row 2 (c):" in text


def test_an_encoder_decoder_trace_reads_back_with_its_kinds_and_two_sequences():
    trace = traces.encoder_decoder()
    again = ModelTrace.from_dict(json.loads(trace.to_json()), "ed.json")
    assert again.kinds == trace.kinds and again.modules == trace.modules
    assert again.source_tokens == traces.SOURCE and again.source_ids == [21, 22, 23, 24, 2]
    assert again.source_special == [False] * 4 + [True] and again.special == trace.special
    for i in trace.layers:
        np.testing.assert_array_equal(again[i].weights, trace[i].weights)
    assert again["model.decoder.layers.0.encoder_attn"] is again[3]
    assert again[3].tokens == traces.TARGET and again[3].key_tokens == traces.SOURCE
    assert again[0].tokens == traces.SOURCE and again.kind(0) == "encoder" and again.name(5).endswith("encoder_attn")
    with pytest.raises(KeyError, match=r"model\.decoder\.layers\.9\.encoder_attn"):
        again["model.decoder.layers.9.encoder_attn"]
    assert set(again.kinds.values()) <= set(KINDS)


def test_a_trace_from_before_the_fields_reads_back_as_one_sequence_of_layers():
    trace = traces.encoder_decoder()
    one = {0: traces.entry(np.random.default_rng(1), traces.TARGET, None)}
    data = ModelTrace("m", [0, 1, 2, 3], traces.TARGET, one, 1, 2).to_dict()
    for name in ("modules", "kinds", "source_ids", "source_tokens", "source_special", "source_parts", "image"):
        del data[name]
    del data["patch_grid"]
    again = ModelTrace.from_dict(data)
    assert again.kinds == {} and again.kind(0) == "self" and again.name(0) == "layer 0"
    assert again.source_tokens is None and again.image is None and again.patch_grid is None
    assert trace.name(0) == "model.encoder.layers.0.self_attn"


def test_an_encoder_decoder_text_names_each_module_and_labels_its_two_axes():
    text = traces.encoder_decoder().render(lang="en", precision=2)
    assert "tiny-bart, model.encoder.layers.0.self_attn (encoder)" in text
    assert "tiny-bart, model.decoder.layers.0.encoder_attn (cross-attention)" in text
    cross_part = text.split("model.decoder.layers.0.encoder_attn")[1]
    header = next(line for line in cross_part.splitlines() if line.strip().startswith("keys"))
    assert header.split()[1:] == ["le,", "chat,", "dort,", ".,", "</s>"] and "row 3 (sleeps)" in cross_part


def saved_encoder_decoder(**changes) -> dict:
    data = json.loads(traces.encoder_decoder().to_json())
    data.update(changes)
    return data


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kinds": {"0": "encoder", "1": "encoder", "2": "decoder", "3": "crossed", "4": "decoder", "5": "cross"}},
         r"^ed\.json: kinds: expected each one of self, encoder, decoder, cross, got 'crossed'$"),
        ({"kinds": {"0": "self", "1": "encoder", "2": "decoder", "3": "cross", "4": "decoder", "5": "cross"}},
         r"^ed\.json: kinds: expected either self .* or encoder, decoder and cross \(two\), got both$"),
        ({"kinds": {"0": "encoder", "1": "encoder"}},
         r"^ed\.json: kinds: expected one for every traced entry, none for entry 2$"),
        ({"kinds": {"9": "encoder"}}, r"^ed\.json: kinds: expected an object of texts under indices 0\.\.5$"),
        ({"modules": {str(i): "model.same" for i in range(6)}},
         r"^ed\.json: modules: expected distinct module paths"),
        ({"source_tokens": None},
         r"^ed\.json: source_tokens: expected the encoder's tokens beside encoder or cross entries$"),
        ({"source_ids": [21, 22]},
         r"^ed\.json: source_ids: expected null, \[\] or 5 integers, one per source token$"),
        ({"source_tokens": ["le", "chat", "dort", "."]},
         r"^ed\.json: source_special: expected 4 booleans, one per source token$"),
        ({"source_special": [False]},
         r"^ed\.json: source_special: expected 5 booleans, one per source token$"),
        ({"source_tokens": ["le", "chien", "dort", ".", "</s>"]},
         r"^ed\.json, layer 0 \(model\.encoder\.layers\.0\.self_attn\): tokens: expected the trace's source tokens, "
         r"got token 1 'chat' where the trace has 'chien'$"),
    ],
)  # fmt: skip
def test_a_saved_encoder_decoder_trace_whose_parts_do_not_fit_is_refused(changes, message):
    with pytest.raises(al.ArgumentError, match=message):
        ModelTrace.from_dict(saved_encoder_decoder(**changes), "ed.json")


def test_a_cross_entry_must_have_the_source_tokens_on_its_keys():
    data = saved_encoder_decoder()
    data["layers"]["3"]["key_tokens"] = ["le", "chat", "dort", ".", "<pad>"]
    with pytest.raises(
        al.ArgumentError, match=r"layer 3 .*key_tokens: expected the trace's source tokens, got token 4"
    ):
        ModelTrace.from_dict(data, "ed.json")
    data["layers"]["3"]["key_tokens"] = None  # 5 keys, unlabelled
    with pytest.raises(al.ArgumentError, match=r"layer 3 .*key_tokens: expected the trace's 5 source tokens, got none"):
        ModelTrace.from_dict(data, "ed.json")
    built = traces.encoder_decoder()
    with pytest.raises(al.ArgumentError, match=r"^trace, layer 2 \(model\.decoder\.layers\.0\.self_attn\): expected "):
        ModelTrace(
            "m", built.ids, built.tokens, {2: built[3]}, 6, 2, kinds={2: "decoder"}, modules={2: built.name(2)},
            source_tokens=traces.SOURCE,
        )  # fmt: skip


def test_a_vision_trace_reads_back_with_its_image_and_patch_grid():
    trace = traces.vit()
    again = ModelTrace.from_dict(json.loads(trace.to_json()), "vit.json")
    assert again.patch_grid == (7, 7) and again.image_sequence == "tokens" and again.ids == []
    assert again.image is not None and again.image.dtype == np.uint8
    np.testing.assert_array_equal(again.image, traces.picture())
    assert "patch_grid=(7, 7)" in repr(again)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"patch_grid": [7, 6]}, r"expected rows and cols that cut the 112×112 image into equal patches, got 7×6"),
        ({"patch_grid": [8, 8]}, r"patch_grid: expected 49 patches, one per token not marked special .*got 8×8 = 64"),
        ({"patch_grid": [7, 0]}, r"patch_grid: expected null or \[rows, cols\], two whole numbers > 0"),
        ({"patch_grid": None}, r"image and patch_grid: expected both \(a vision model's trace\) or neither"),
        ({"special": [True] + [False] * 50}, r"patch_grid: expected 50 patches, one per token not marked special"),
    ],
)
def test_a_saved_vision_trace_whose_grid_does_not_fit_is_refused(changes, message):
    data = {**json.loads(traces.vit().to_json()), **changes}
    with pytest.raises(al.ArgumentError, match=message):
        ModelTrace.from_dict(data, "vit.json")


def test_an_image_that_is_not_uint8_pixels_is_refused():
    trace = traces.vit()
    with pytest.raises(al.ArgumentError, match=r"image: expected uint8 pixels \(height, width, 3\), got float64"):
        ModelTrace(
            "m", [], trace.tokens, trace.layers, 2, 2, special=trace.special, image=traces.picture() / 255.0,
            patch_grid=(7, 7),
        )  # fmt: skip
    data = json.loads(trace.to_json())
    data["image"]["base64"] = data["image"]["base64"][:-8]
    with pytest.raises(al.ArgumentError, match=r"vit\.json: image: expected 37632 bytes, got 37626"):
        ModelTrace.from_dict(data, "vit.json")
