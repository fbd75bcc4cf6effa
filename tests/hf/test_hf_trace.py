"""attnlab.hf.trace: one forward of a transformers model, every attention module recorded.
Oracles: transformers' own eager attention (output_attentions, logits) and the module's
own projections with transformers' RoPE, computed in the test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tests.checkpoints import SENTENCE, tiny_model, train_tokenizers

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("attnlab.hf")


@pytest.fixture(autouse=True)
def _no_grad() -> object:
    with torch.no_grad():  # the eager oracles' tensors, read as NumPy
        yield


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> object:
    layouts = train_tokenizers(tmp_path_factory.mktemp("tokenizers"))
    return transformers.AutoTokenizer.from_pretrained(layouts["vocab+merges-tokenizer.json"])


def _bart() -> object:
    torch.manual_seed(11)
    config = transformers.BartConfig(
        vocab_size=300, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=64,
    )  # fmt: skip
    return transformers.BartModel(config).eval()


def test_a_llama_trace_has_every_layer_with_the_weights_of_eager_attention(bpe: object) -> None:
    model = tiny_model("llama")
    ids = torch.tensor([bpe(SENTENCE)["input_ids"]])
    model.set_attn_implementation("eager")
    eager = model(ids, output_attentions=True)
    trace = hf.trace(model, SENTENCE, tokenizer=bpe)
    assert sorted(trace.layers) == [0, 1] and trace.num_layers == 2
    assert trace.modules == {0: "model.layers.0.self_attn", 1: "model.layers.1.self_attn"}
    assert set(trace.kinds.values()) == {"self"}
    for i in (0, 1):
        np.testing.assert_allclose(trace[i].weights, eager.attentions[i][0].numpy(), atol=1e-6)
    assert model.config._attn_implementation == "eager"  # restored after the trace
    assert trace.ids == ids[0].tolist()
    assert "".join(trace.tokens) == SENTENCE  # byte-level pieces read as the characters they complete


def test_q_and_k_are_the_modules_projections_after_rope_and_v_its_value_projection(bpe: object) -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = tiny_model("llama")
    attention = model.model.layers[1].self_attn
    seen: dict[str, object] = {}
    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(attention, name).register_forward_hook(lambda _m, _i, out, name=name: seen.__setitem__(name, out))
    trace = hf.trace(model, SENTENCE, tokenizer=bpe, layers=1)
    L, H, Hk, E = len(trace.tokens), 4, 2, 8
    q = seen["q_proj"].view(1, L, H, E).transpose(1, 2)  # (1, L, H·E) -> (1, H, L, E)
    k = seen["k_proj"].view(1, L, Hk, E).transpose(1, 2)  # (1, L, Hk·E) -> (1, Hk, L, E)
    v = seen["v_proj"].view(1, L, Hk, E).transpose(1, 2)
    cos, sin = model.model.rotary_emb(q, torch.arange(L)[None])
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    np.testing.assert_allclose(trace[1].Q, q[0].numpy(), atol=1e-6)
    np.testing.assert_allclose(trace[1].K, k[0].repeat_interleave(2, dim=0).numpy(), atol=1e-6)  # each kv head twice
    np.testing.assert_allclose(trace[1].V, v[0].repeat_interleave(2, dim=0).numpy(), atol=1e-6)
    assert list(trace.layers) == [1]


def test_the_recorded_forward_gives_the_models_own_logits(bpe: object) -> None:
    model = tiny_model("qwen2")
    ids = torch.tensor([bpe(SENTENCE)["input_ids"]])
    model.set_attn_implementation("eager")
    eager = model(ids).logits
    logits: list[object] = []
    model.register_forward_hook(lambda _m, _i, out: logits.append(out.logits))
    hf.trace(model, SENTENCE, tokenizer=bpe, layers=[0])
    np.testing.assert_allclose(logits[0].numpy(), eager.numpy(), atol=1e-5)


def test_an_encoder_decoder_trace_names_encoder_decoder_and_cross_attention(bpe: object) -> None:
    model = _bart()
    source, target = SENTENCE, "他很爱打篮球"
    trace = hf.trace(model, (source, target), tokenizer=bpe)
    kinds = list(trace.kinds.values())
    assert kinds == ["encoder", "encoder", "decoder", "cross", "decoder", "cross"]
    assert trace.modules[3] == "decoder.layers.0.encoder_attn"
    source_ids = bpe(source)["input_ids"]
    target_ids = [model.config.decoder_start_token_id, *bpe(target)["input_ids"]]
    assert trace.source_ids == source_ids and trace.ids == target_ids
    cross = trace[3]
    assert cross.weights.shape == (4, len(target_ids), len(source_ids))
    assert cross.key_tokens == trace.source_tokens and cross.tokens == trace.tokens
    model.set_attn_implementation("eager")
    eager = model(torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]), output_attentions=True)
    np.testing.assert_allclose(cross.weights, eager.cross_attentions[0][0].numpy(), atol=1e-6)
    np.testing.assert_allclose(trace[2].weights, eager.decoder_attentions[0][0].numpy(), atol=1e-6)
    np.testing.assert_allclose(trace[0].weights, eager.encoder_attentions[0][0].numpy(), atol=1e-6)


def test_negative_layers_count_from_the_last_entry_and_bad_ones_are_refused(bpe: object) -> None:
    model = tiny_model("llama")
    assert list(hf.trace(model, SENTENCE, tokenizer=bpe, layers=-1).layers) == [1]
    with pytest.raises(ValueError, match=r"layers: expected attention entries in 0\.\.1"):
        hf.trace(model, SENTENCE, tokenizer=bpe, layers=5)
    with pytest.raises(TypeError, match="layers: expected an index"):
        hf.trace(model, SENTENCE, tokenizer=bpe, layers="0")


def test_a_text_without_a_tokenizer_and_a_batch_of_two_are_refused(bpe: object) -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="tokenizer: expected the model's tokenizer"):
        hf.trace(model, SENTENCE)
    with pytest.raises(ValueError, match="one sequence"):
        hf.trace(model, {"input_ids": torch.zeros(2, 3, dtype=torch.long)})
    with pytest.raises(TypeError, match="text_or_inputs: expected a text"):
        hf.trace(model, 42, tokenizer=bpe)


def test_inputs_the_model_cannot_take_are_refused_before_its_forward(bpe: object) -> None:
    """What the round-4 review found raised raw by torch or the tokenizers library: a lone
    surrogate, more tokens than the model's 40 positions, an id past its vocabulary."""
    from attnlab import ArgumentError, analysis

    model = tiny_model("llama")
    with pytest.raises(ArgumentError, match="text_or_inputs: expected a text of Unicode characters, got a lone"):
        hf.trace(model, "ab\udcffcd", tokenizer=bpe)
    with pytest.raises(ArgumentError, match="text_or_inputs: expected at most 40 tokens, the model's positions"):
        hf.trace(model, " ".join(["cat"] * 100), tokenizer=bpe)
    with pytest.raises(ArgumentError, match=r"text_or_inputs: expected ids in 0\.\.299, got 1\.\.1000000"):
        hf.trace(model, {"input_ids": torch.tensor([[1, 10**6]])})
    with pytest.raises(ArgumentError, match="text_or_inputs: expected a text of Unicode characters"):
        hf.trace_generation(model, "ab\udcff", 2, tokenizer=bpe)
    with pytest.raises(ArgumentError, match="target: expected a text of Unicode characters"):
        analysis.ablate(model, "the cat", heads=[(0, 0)], tokenizer=bpe, target="\ud800")


def test_a_model_whose_attention_bypasses_the_interface_is_refused_naming_it(tmp_path: Path) -> None:
    config = transformers.FalconConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    model = transformers.FalconForCausalLM(config)
    with pytest.raises(hf.UnsupportedModelError, match="falcon: FalconAttention computes attention in its own code"):
        hf.trace(model, {"input_ids": torch.zeros(1, 3, dtype=torch.long)})
