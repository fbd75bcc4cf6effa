"""attnlab.hf.trace_generation: model.generate's own calls recorded with the KV cache,
against transformers' eager attention over the generated sequence (the oracle) and the
tokens of its plain generate (no recording)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
hf = pytest.importorskip("attnlab.hf")

from checkpoints import tiny_model  # noqa: E402

PROMPT = torch.tensor([[5, 17, 33, 2, 9]])


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_recorded_decode_rows_are_the_eager_full_forwards_and_the_ids_generates(kind: str) -> None:
    model, steps = tiny_model(kind), 5
    with torch.no_grad():
        expected_ids = model.generate(PROMPT, max_new_tokens=steps, do_sample=False, pad_token_id=0)[0]
    record = hf.trace_generation(model, {"input_ids": PROMPT}, steps)
    np.testing.assert_array_equal(record.ids, expected_ids.numpy())
    model.set_attn_implementation("eager")
    with torch.no_grad():
        full = model(expected_ids[None, :-1], output_attentions=True).attentions
    P = PROMPT.shape[1]
    assert record.prompt_length == P and sorted(record.weights) == [0, 1]
    assert all(name.endswith("attn") or name.endswith("self_attn") for name in record.names.values())
    for layer, rows in record.weights.items():
        expected = full[layer][0].numpy()[:, P - 1 : P + steps - 1, :]  # (H, N, P + N - 1): the choosing rows
        np.testing.assert_allclose(rows, expected, atol=1e-5, rtol=0)


def test_bad_arguments_are_refused() -> None:
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match="max_new_tokens: expected at least one token"):
        hf.trace_generation(model, {"input_ids": PROMPT}, 0)
    with pytest.raises(ValueError, match=r"max_new_tokens: expected at most 35 \(the model's 40 positions\), got 36"):
        hf.trace_generation(model, {"input_ids": PROMPT}, 36)
    with pytest.raises(ValueError, match=r"layers: expected attention modules in 0\.\.1"):
        hf.trace_generation(model, {"input_ids": PROMPT}, 2, layers=7)
    with pytest.raises(ValueError, match="model: expected a causal language model"):
        hf.trace_generation(tiny_model("bert").bert, {"input_ids": PROMPT}, 2)


class _StopError(Exception):
    pass


def test_check_is_called_before_each_new_token_and_stops_the_generation_where_it_raises() -> None:
    model, calls = tiny_model("gpt2"), []
    record = hf.trace_generation(model, {"input_ids": PROMPT}, 5, check=lambda: calls.append(len(calls)))
    assert record.generated == 5 and calls == [0, 1, 2, 3, 4]  # before the prefill, then after each token but the last
    forwards = []
    handle = model.register_forward_pre_hook(lambda module, args: forwards.append(0))

    def stop_before_the_third() -> None:
        if len(forwards) == 2:
            raise _StopError

    try:
        with pytest.raises(_StopError):
            hf.trace_generation(model, {"input_ids": PROMPT}, 5, check=stop_before_the_third)
    finally:
        handle.remove()
    assert len(forwards) == 2  # the prompt's and the first decode step: the third token never computed
    with pytest.raises(TypeError, match=r"^check: expected a function or None, got int$"):
        hf.trace_generation(model, {"input_ids": PROMPT}, 2, check=1)


def test_an_end_token_ends_the_checks_with_the_generation() -> None:
    model, calls = tiny_model("gpt2"), []
    first = int(hf.trace_generation(model, {"input_ids": PROMPT}, 1).ids[-1])
    model.generation_config.eos_token_id = first  # the first new token ends the generation
    record = hf.trace_generation(model, {"input_ids": PROMPT}, 5, check=lambda: calls.append(0))
    assert record.generated == 1 and calls == [0]  # before the prefill only: no forward follows an end token


def test_a_traces_check_is_called_before_each_attention_call_and_stops_the_forward_where_it_raises() -> None:
    model, calls = tiny_model("llama", num_hidden_layers=3), []
    hf.trace(model, {"input_ids": PROMPT}, check=lambda: calls.append(len(calls)))
    assert calls == list(range(model.config.num_hidden_layers))
    started = []
    handles = [layer.register_forward_pre_hook(lambda module, args: started.append(0)) for layer in model.model.layers]

    def stop_in_the_second_layer() -> None:
        if len(started) == 2:
            raise _StopError

    try:
        with pytest.raises(_StopError):
            hf.trace(model, {"input_ids": PROMPT}, check=stop_in_the_second_layer)
    finally:
        for handle in handles:
            handle.remove()
    assert len(started) == 2  # stopped at the second layer's attention: no third layer began
    with pytest.raises(TypeError, match=r"^check: expected a function or None, got int$"):
        hf.trace(model, {"input_ids": PROMPT}, check=1)
