"""Model.trace_generation: the decode steps' rows, recorded with the KV cache, against
transformers' eager attention over the whole generated sequence (the oracle), and its
tokens against transformers' own greedy generate."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnlab import models  # noqa: E402
from checkpoints import tiny_model  # noqa: E402

PROMPT = np.array([5, 17, 33, 2])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    paths = {}
    for kind in ("gpt2", "llama", "mistral"):
        paths[kind] = tmp_path_factory.mktemp(f"gen-{kind}")
        tiny_model(kind).save_pretrained(paths[kind])
    return paths


def eager(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").eval()


@pytest.mark.parametrize("kind", ["gpt2", "llama", "mistral"])
def test_each_new_tokens_row_is_the_full_forwards_row_and_the_tokens_are_transformers(saved, kind):
    steps = 6
    record = models.load(saved[kind]).trace_generation(PROMPT, steps)
    reference = eager(saved[kind])
    with torch.no_grad():
        expected_ids = reference.generate(
            torch.tensor(PROMPT[None]), max_new_tokens=steps, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0].numpy()
        full = reference(torch.tensor(expected_ids[None, :-1]), output_attentions=True).attentions
    np.testing.assert_array_equal(record.ids, expected_ids)
    assert record.prompt_length == 4 and record.generated == steps and sorted(record.weights) == [0, 1]
    P = len(PROMPT)
    for layer, rows in record.weights.items():
        assert rows.shape == (4, steps, P + steps - 1)
        # the row that chose token P + n is the full forward's query at position P + n - 1, over every key
        expected = full[layer][0].numpy()[:, P - 1 : P + steps - 1, :]  # (H, N, P + N - 1)
        np.testing.assert_allclose(rows, expected, atol=1e-5, rtol=0)


def test_chosen_layers_and_bad_arguments(saved):
    model = models.load(saved["gpt2"])
    assert sorted(model.trace_generation(PROMPT, 2, layers=-1).weights) == [1]
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_new_tokens: expected at least one token"):
            model.trace_generation(PROMPT, bad)
    with pytest.raises(ValueError, match="layers"):
        model.trace_generation(PROMPT, 2, layers=5)


class _StopError(Exception):
    pass


def _counted(monkeypatch, owner: type) -> list[int]:
    """The calls of ``owner.forward`` from now on, each appended to the list returned."""
    calls, forward = [], owner.forward
    monkeypatch.setattr(owner, "forward", lambda *args, **kwargs: calls.append(0) or forward(*args, **kwargs))
    return calls


def _stop_at(calls: list[int], count: int):
    """A check that raises _StopError once ``calls`` holds ``count`` calls."""

    def check() -> None:
        if len(calls) == count:
            raise _StopError

    return check


def test_check_is_called_before_each_new_token_and_stops_the_generation_where_it_raises(saved, monkeypatch):
    from attnlab.models._network import Network

    model, calls = models.load(saved["gpt2"]), []
    record = model.trace_generation(PROMPT, 5, check=lambda: calls.append(len(calls)))
    assert record.generated == 5 and calls == [0, 1, 2, 3, 4]
    forwards = _counted(monkeypatch, Network)
    with pytest.raises(_StopError):
        model.trace_generation(PROMPT, 5, check=_stop_at(forwards, 2))
    assert len(forwards) == 2  # the prompt's and the first decode step: the third token never computed
    with pytest.raises(TypeError, match=r"^check: expected a function or None, got int$"):
        model.trace_generation(PROMPT, 2, check=1)


def test_a_traces_check_is_called_before_each_layer_and_stops_the_forward_where_it_raises(saved, monkeypatch):
    from attnlab.models._network import Block

    model, calls = models.load(saved["llama"]), []
    model.trace(PROMPT, check=lambda: calls.append(len(calls)))
    assert calls == list(range(model.config.num_hidden_layers))
    blocks = _counted(monkeypatch, Block)
    with pytest.raises(_StopError):
        model.trace(PROMPT, check=_stop_at(blocks, 1))
    assert len(blocks) == 1  # the first layer ran, the second never began
    with pytest.raises(TypeError, match=r"^check: expected a function or None, got int$"):
        model.trace(PROMPT, check=1)
