"""Sliding-window attention in attnlab.models (Mistral, and Qwen2 with
``use_sliding_window``) against transformers (eager attention), the oracle, on tiny random
checkpoints built here: sequences longer than the window of 4 keys, so that it matters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnlab import models  # noqa: E402
from checkpoints import tiny_model  # noqa: E402

WINDOW = 4
FULL, SLIDING = "full_attention", "sliding_attention"
# the same weights (the seed is the kind's) with the window and without it
WITH_WINDOW = {
    "mistral": {"sliding_window": WINDOW},  # every layer
    "qwen2": {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},  # layers 1 and up
}
WITHOUT_WINDOW = {"mistral": {"sliding_window": None}, "qwen2": {"use_sliding_window": False}}
LAYER_TYPES = {"mistral": (SLIDING, SLIDING), "qwen2": (FULL, SLIDING)}
KINDS = tuple(WITH_WINDOW)

# 9 tokens: a whole row, a right-padded one and a left-padded one
IDS = np.array([[5, 17, 33, 2, 99, 120, 7, 250, 64], [8, 9, 10, 11, 12, 0, 0, 0, 0], [0, 0, 0, 8, 9, 10, 11, 12, 13]])
PADDING = np.array([[1] * 9, [1] * 5 + [0] * 4, [0] * 3 + [1] * 6])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, bool], Path]:
    """(kind, windowed) -> a saved float32 checkpoint."""
    saved = {}
    for kind in KINDS:
        for windowed, settings in ((True, WITH_WINDOW[kind]), (False, WITHOUT_WINDOW[kind])):
            path = tmp_path_factory.mktemp(f"{kind}-{'window' if windowed else 'full'}")
            tiny_model(kind, **settings).save_pretrained(path)
            saved[kind, windowed] = path
    return saved


def reference(path: Path) -> Any:
    """transformers' model of a checkpoint, eager attention, in float32."""
    return transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()


def outside_window(length: int) -> np.ndarray:
    """(L, L): True where key j is before query i's window, j <= i − WINDOW."""
    return np.arange(length)[None, :] <= np.arange(length)[:, None] - WINDOW


@pytest.mark.parametrize("kind", KINDS)
def test_windowed_hidden_states_attentions_and_logits_equal_transformers_with_padding(checkpoints, kind):
    path = checkpoints[kind, True]
    model = models.load(path)
    assert (model.config.sliding_window, model.config.layer_types) == (WINDOW, LAYER_TYPES[kind])
    ours = model(IDS, PADDING, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        theirs = reference(path)(
            torch.tensor(IDS), attention_mask=torch.tensor(PADDING), output_hidden_states=True, output_attentions=True
        )
    real = PADDING.astype(bool)  # padded positions' outputs mean nothing, in either library
    for mine, expected in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        np.testing.assert_allclose(mine[real], expected.numpy()[real], rtol=1e-5, atol=1e-5)
    for layer, (mine, expected) in enumerate(zip(ours.attentions, theirs.attentions, strict=True)):
        for row in range(len(IDS)):  # each real query's weights over every key
            np.testing.assert_allclose(mine[row][:, real[row]], expected.numpy()[row][:, real[row]], atol=1e-6)
        sliding = LAYER_TYPES[kind][layer] == SLIDING
        assert bool(np.all(mine[0][:, outside_window(9)] == 0)) is sliding  # a full layer looks further back
    np.testing.assert_allclose(ours.logits[real], theirs.logits.numpy()[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_the_window_matters_and_without_it_both_libraries_agree_too(checkpoints, kind):
    windowed, full = models.load(checkpoints[kind, True]), models.load(checkpoints[kind, False])
    assert (full.config.sliding_window, full.config.layer_types) == (None, (FULL, FULL))
    mine = full(IDS[:1]).logits
    with torch.no_grad():
        expected = reference(checkpoints[kind, False])(torch.tensor(IDS[:1])).logits.numpy()
    np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5)
    difference = np.abs(windowed(IDS[:1]).logits - mine).max(axis=-1)[0]  # (L,)
    assert np.all(difference[:WINDOW] < 1e-5)  # the first queries' windows hold every key before them
    assert np.all(difference[WINDOW:] > 1e-3)  # later ones see fewer keys with the window


@pytest.mark.parametrize("kind", KINDS)
def test_windowed_generation_with_the_cache_equals_transformers_and_its_own_forward(checkpoints, kind):
    path = checkpoints[kind, True]
    model, full = models.load(path), models.load(checkpoints[kind, False])
    prompt = np.array([5, 17, 33, 2, 99, 120])  # longer than the window, and so is every step after it
    ids, logits = model.generate(prompt, 10, output_logits=True)
    for step, row in enumerate(logits):  # one query against the cache: the forward's last row
        so_far = ids[: len(prompt) + step]
        np.testing.assert_allclose(row, model(so_far).logits[-1], rtol=1e-5, atol=1e-5)
        assert np.abs(row - full(so_far).logits[-1]).max() > 1e-3  # the window, not the whole cache
    with torch.no_grad():
        expected = reference(path).generate(
            torch.tensor(prompt[None]), max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    np.testing.assert_array_equal(ids, expected.sequences.numpy()[0])
    np.testing.assert_allclose(logits, torch.cat(expected.logits).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_a_windowed_trace_masks_the_keys_before_the_window(checkpoints, kind):
    path = checkpoints[kind, True]
    trace = models.load(path).trace(IDS[0])
    with torch.no_grad():
        expected = reference(path)(torch.tensor(IDS[:1]), output_attentions=True).attentions
    for layer, layer_type in enumerate(LAYER_TYPES[kind]):
        scaled = trace[layer].scaled_scores  # (H, L, L)
        np.testing.assert_allclose(trace[layer].weights, expected[layer].numpy()[0], atol=1e-6)
        hidden = outside_window(9) if layer_type == SLIDING else np.zeros((9, 9), dtype=bool)
        future = np.triu(np.ones((9, 9), dtype=bool), 1)
        assert np.all(np.isneginf(scaled[:, hidden | future]))
        assert np.all(np.isfinite(scaled[:, ~(hidden | future)]))


@pytest.mark.parametrize("first_window_layer", [0, 1, 2, 28])
def test_qwen2_without_layer_types_windows_the_layers_from_max_window_layers_as_transformers(
    tmp_path, first_window_layer
):
    tiny_model("qwen2", num_hidden_layers=3).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_types"]  # as in the config.json of checkpoints saved before transformers 4.53
    config.update(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=first_window_layer)
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = transformers.AutoConfig.from_pretrained(tmp_path).layer_types
    assert list(models.load(tmp_path).config.layer_types) == expected
    assert expected == [FULL] * min(first_window_layer, 3) + [SLIDING] * max(3 - first_window_layer, 0)
