"""The one runner: a refusal is the same error whichever backend or analysis meets it."""

from __future__ import annotations

import pytest

from attnlab import analysis
from attnlab.hf import UnsupportedModelError


def _bart(vocab_size: int = 64) -> object:
    T = pytest.importorskip("transformers")
    config = T.BartConfig(
        vocab_size=vocab_size, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
    )  # fmt: skip
    return T.BartForConditionalGeneration(config).eval()


def test_an_encoder_decoder_is_refused_alike_by_ablate_head_types() -> None:
    model = _bart()
    message = r"^model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder$"
    with pytest.raises(UnsupportedModelError, match=message):
        analysis.ablate(model, [1, 2, 3], heads="all")
    with pytest.raises(UnsupportedModelError, match=message):
        analysis.head_types(model, [1, 2, 3])


def test_the_opened_model_and_a_text_go_where_a_trace_goes() -> None:
    import numpy as np

    import attnlab
    from attnlab import ArgumentError

    model = attnlab.load_model("builtin:coref")
    text = "小明是个运动达人，他平时很爱打篮球"
    trace = model.trace(text)
    np.testing.assert_array_equal(analysis.rollout(model, text=text), analysis.rollout(trace))
    np.testing.assert_array_equal(analysis.residual_attention(model, text=text), analysis.residual_attention(trace))
    assert attnlab.view(model, text=text) == attnlab.view(trace)
    with pytest.raises(ArgumentError, match=r"^text: expected the text to run the model on, got None$"):
        attnlab.view(model)
    with pytest.raises(ArgumentError, match=r"^text: expected None for a trace"):
        analysis.rollout(trace, text=text)


def test_a_checkpoint_is_refused_on_a_backend_that_cannot_run_it_naming_backend(tmp_path) -> None:
    import json

    from attnlab import ArgumentError
    from attnlab.runner import open_checkpoint

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(
        ArgumentError, match=r"^backend: expected 'transformers' for .*, a 't5' model \(attnlab runs .*\), got 'numpy'$"
    ) as caught:
        open_checkpoint(tmp_path, backend="numpy")
    assert caught.value.argument == "backend"
    checkpoint = open_checkpoint(tmp_path)
    assert (checkpoint.backend, checkpoint.description, checkpoint.config) == (
        "transformers",
        "t5",
        {"model_type": "t5"},
    )


def test_a_pair_of_texts_is_an_encoder_decoders_input_and_ids_are_refused_on_one(tmp_path) -> None:
    import numpy as np

    from attnlab.runner._transformers import TransformersRunner
    from checkpoints import train_tokenizers

    T = pytest.importorskip("transformers")
    tokenizer = T.AutoTokenizer.from_pretrained(train_tokenizers(tmp_path)["vocab.txt-tokenizer.json"])
    runner = TransformersRunner(_bart(vocab_size=len(tokenizer)), tokenizer)
    pair = runner.trace(("the cat sat", "the dog"))
    assert pair.layers and all(np.isfinite(entry.weights).all() for entry in pair.layers.values())
    message = r"^model: attnlab runs decoder-only and encoder-only models here; bart is an encoder-decoder$"
    for ids in ([1, 2, 3], (1, 2, 3), np.array([1, 2, 3])):
        with pytest.raises(UnsupportedModelError, match=message):
            runner.trace(ids)
    with pytest.raises(UnsupportedModelError, match=message):
        analysis.rollout(runner, text=[1, 2, 3])


def test_a_transformers_model_given_to_a_page_or_rollout_is_told_to_open_it_first() -> None:
    import attnlab

    message = r"^trace: expected .* a model from attnlab\.load_model \(a transformers model: attnlab\.load_model\("
    for draw in (attnlab.view, analysis.rollout, analysis.flow):
        with pytest.raises(attnlab.ArgumentTypeError, match=message + r".*\), got BartForConditionalGeneration$"):
            draw(_bart(), text="the cat")


def test_each_refusal_is_one_whichever_backend_meets_it(tmp_path) -> None:
    """Generation on a model that does not generate, an ablation without a language-modelling
    head, a text without a tokenizer, a text past the positions: the same argument and words
    from attnlab's model (builtin:coref, a BERT without its head) and from transformers'."""
    import attnlab
    from checkpoints import tiny_model

    T = pytest.importorskip("transformers")
    numpy_bert = attnlab.load_model("builtin:coref")
    model = tiny_model("bert")
    bare = T.BertModel(model.config).eval()
    runners = [numpy_bert, attnlab.load_model(bare)]
    for runner in runners:
        kind = runner.description
        with pytest.raises(attnlab.ArgumentError, match=rf"^model: expected a causal language model, which generates "
                           rf"text, got .*, a {kind} model$"):  # fmt: skip
            runner.generate("the cat", 2)
        with pytest.raises(attnlab.ArgumentError, match=r"^model: expected a model with a language-modelling head "
                           rf"\(logits over the vocabulary\), got .*, a {kind} model without one$"):  # fmt: skip
            runner.check_head()
    with pytest.raises(attnlab.ArgumentError, match=r"^text: expected token ids: the model has no tokenizer to read a "
                       r"text, got a text$"):  # fmt: skip
        runners[1].length("the cat")
    long = "the cat " * 400
    for runner in (numpy_bert, attnlab.load_model(model, tokenizer=_tokenizer(tmp_path))):
        with pytest.raises(attnlab.ArgumentError, match=rf"^text: expected at most {runner.positions} tokens, the "
                           r"model's positions, got \d+"):  # fmt: skip
            runner.length(long)


def _tokenizer(tmp_path) -> object:
    from checkpoints import train_tokenizers

    T = pytest.importorskip("transformers")
    return T.AutoTokenizer.from_pretrained(train_tokenizers(tmp_path)["vocab.txt-tokenizer.json"])


def test_a_text_past_the_positions_prints_nothing_before_its_refusal(tmp_path, capfd) -> None:
    import attnlab
    from checkpoints import tiny_model

    runner = attnlab.load_model(tiny_model("bert"), tokenizer=_tokenizer(tmp_path))
    capfd.readouterr()
    with pytest.raises(attnlab.ArgumentError, match=r"^text: expected at most 40 tokens"):
        runner.length("the cat " * 400)
    assert capfd.readouterr().err == ""  # no "Token indices sequence length is longer…" from transformers


def test_the_runner_is_abstract() -> None:
    from attnlab.runner import Runner

    with pytest.raises(TypeError, match="abstract"):
        Runner()  # type: ignore[abstract]


def test_truncation_and_chat_go_to_attnlabs_models_and_are_refused_on_transformers(tmp_path) -> None:
    import attnlab
    from checkpoints import tiny_model

    numpy_bert = attnlab.load_model("builtin:coref")
    long = "the cat " * 100
    assert len(numpy_bert.trace(long, truncation=True).tokens) == numpy_bert.positions
    with pytest.raises(attnlab.ArgumentError, match=r"^text_or_ids: expected at most 64 tokens"):
        numpy_bert.trace(long)
    runner = attnlab.load_model(tiny_model("gpt2"), tokenizer=_tokenizer(tmp_path))
    where = r"on attnlab's NumPy models \(GPT-2, BERT, Llama, Qwen2, Mistral, GGUF files\); .* runs in transformers$"
    with pytest.raises(attnlab.ArgumentError, match="^truncation: " + where) as caught:
        runner.trace("the cat", truncation=True)
    assert caught.value.argument == "truncation"
    with pytest.raises(attnlab.ArgumentError, match="^chat: " + where):
        runner.generate("the cat", 2, chat=True)
    full, generation = runner.generate("the cat", 2)
    assert len(full.tokens) == len(generation.ids)


def test_a_generation_in_the_chat_template_marks_its_prompts_template_tokens(tmp_path) -> None:
    import json

    import attnlab
    from checkpoints import CHAT_TEMPLATE, tiny_checkpoint_with_tokenizer

    folder = tiny_checkpoint_with_tokenizer(tmp_path)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    runner = attnlab.load_model(folder)
    prompt = runner.trace("hi there", chat=True)
    full, generation = runner.generate("hi there", 3, chat=True)
    assert full.template == prompt.template + [False] * generation.generated and any(prompt.template)
    assert full.notes == prompt.notes
