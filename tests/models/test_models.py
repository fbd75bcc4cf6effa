"""attnlab.models against transformers (eager attention), the oracle, on tiny random
checkpoints that transformers builds and saves here: no download."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from attnlab import models  # noqa: E402
from checkpoints import SENTENCE, VOCAB, tiny_checkpoint_with_tokenizer, tiny_model, train_tokenizers  # noqa: E402

KINDS = ("gpt2", "bert", "llama", "qwen2", "mistral")  # the tiny Mistral has a window of 4 keys


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(kind, format) -> a saved checkpoint: float32 in one file; bfloat16 in shards;
    float16 for GPT-2."""
    saved = {}
    for kind in KINDS:
        model = tiny_model(kind)
        for form, dtype, shard in (("float32", torch.float32, None), ("bfloat16", torch.bfloat16, "40KB")):
            path = tmp_path_factory.mktemp(f"{kind}-{form}")
            model.to(dtype).save_pretrained(path, **({"max_shard_size": shard} if shard else {}))
            saved[kind, form] = path
    path = tmp_path_factory.mktemp("gpt2-float16")
    tiny_model("gpt2").half().save_pretrained(path)
    saved["gpt2", "float16"] = path
    return saved


def reference(path: Path, dtype: Any = None) -> Any:
    """transformers' model of a checkpoint, eager attention, weights widened to float32."""
    auto = transformers.AutoModelForMaskedLM if "bert" in json.loads((path / "config.json").read_text())[
        "model_type"] else transformers.AutoModelForCausalLM  # fmt: skip
    return auto.from_pretrained(path, dtype=dtype or torch.float32, attn_implementation="eager").eval()


IDS = np.array([[5, 17, 33, 2, 99, 120, 7, 250, 64], [8, 9, 10, 11, 12, 0, 0, 0, 0]])
PADDING = np.array([[1] * 9, [1] * 5 + [0] * 4])


@pytest.mark.parametrize(
    ("kind", "form"), [(k, f) for k in KINDS for f in ("float32", "bfloat16")] + [("gpt2", "float16")]
)
def test_every_hidden_state_attention_and_logit_equals_transformers(checkpoints, kind, form):
    path = checkpoints[kind, form]
    if form == "bfloat16":
        assert (path / "model.safetensors.index.json").is_file()  # the sharded layout
    ours = models.load(path).forward(IDS, PADDING, output_hidden_states=True, output_attentions=True)
    with torch.no_grad():
        theirs = reference(path)(
            torch.tensor(IDS), attention_mask=torch.tensor(PADDING), output_hidden_states=True, output_attentions=True
        )
    real = PADDING.astype(bool)  # padded positions' outputs mean nothing, in either library
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 3
    for mine, expected in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        np.testing.assert_allclose(mine[real], expected.numpy()[real], rtol=1e-5, atol=1e-5)
    assert len(ours.attentions) == 2
    for mine, expected in zip(ours.attentions, theirs.attentions, strict=True):
        np.testing.assert_allclose(mine[0], expected.numpy()[0], atol=1e-6)
        np.testing.assert_allclose(mine[1, :, :5, :5], expected.numpy()[1, :, :5, :5], atol=1e-6)
        assert np.all(mine[1, :, :5, 5:] == 0)  # no real token looks at padding
    np.testing.assert_allclose(ours.logits[real], theirs.logits.numpy()[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_float64_agrees_with_transformers_in_float64(checkpoints, kind):
    path = checkpoints[kind, "float32"]
    mine = models.load(path, dtype=np.float64)(IDS[:1]).logits
    with torch.no_grad():
        expected = reference(path, torch.float64)(torch.tensor(IDS[:1])).logits.numpy()
    assert mine.dtype == np.float64
    # transformers' Llama and Qwen2 compute RMSNorm and the RoPE tables in float32 even in
    # a float64 model; attnlab keeps float64 throughout, so those two agree to float32 only
    tolerance = 1e-10 if kind in ("gpt2", "bert") else 1e-6
    np.testing.assert_allclose(mine, expected, rtol=tolerance, atol=tolerance / 10)


def test_a_single_sequence_has_no_batch_axis_and_the_weights_stay_memory_mapped(checkpoints):
    model = models.load(checkpoints["gpt2", "float32"])
    assert model(IDS[0]).logits.shape == (9, VOCAB)
    np.testing.assert_allclose(model(IDS[0]).logits, model(IDS).logits[0], atol=1e-6)
    embed = model.network.embed.weight.value
    assert model.network.head is not None and model.network.head.weight.value is embed  # the tied head: one array
    assert not embed.flags.writeable and not embed.flags.owndata  # a read-only view of the mapped file


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_calling_a_model_is_calling_its_forward(checkpoints, kind):
    model = models.load(checkpoints[kind, "float32"])
    options = {"output_hidden_states": True, "output_attentions": True}
    called, forward = model(IDS, PADDING, **options), model.forward(IDS, PADDING, **options)
    assert type(called) is models.ModelOutput
    for name in ("last_hidden_state", "logits", "hidden_states", "attentions"):
        np.testing.assert_array_equal(getattr(called, name), getattr(forward, name))
    plain = model(IDS[0])
    assert plain.hidden_states is None and plain.attentions is None
    np.testing.assert_array_equal(plain.logits, model.forward(IDS[0]).logits)


def test_the_config_has_transformers_names_and_the_old_ones_warn_for_one_release(checkpoints):
    config = models.load(checkpoints["llama", "float32"]).config
    raw = config.raw
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (
        raw["num_hidden_layers"], raw["num_attention_heads"], raw["num_key_value_heads"],
    )  # fmt: skip
    assert (config.max_position_embeddings, config.hidden_size) == (raw["max_position_embeddings"], raw["hidden_size"])
    renamed = {
        "num_layers": "num_hidden_layers",
        "num_heads": "num_attention_heads",
        "num_kv_heads": "num_key_value_heads",
        "max_positions": "max_position_embeddings",
    }
    for old, new in renamed.items():
        with pytest.warns(DeprecationWarning, match=f"ModelConfig.{old} is deprecated .* use {new}"):
            assert getattr(config, old) == getattr(config, new)
        with pytest.raises(AttributeError):
            setattr(config, old, 1)  # read-only, as the fields are


def test_generate_refuses_an_unknown_keyword(checkpoints):
    with pytest.raises(TypeError, match="temprature"):
        models.load(checkpoints["gpt2", "float32"]).generate([1, 2], 3, temprature=1.0)


def test_bert_without_its_head_returns_hidden_states_and_token_types_count(tmp_path):
    torch.manual_seed(5)
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=40)  # fmt: skip
    transformers.BertModel(config, add_pooling_layer=False).eval().save_pretrained(tmp_path)
    types = np.array([[0] * 5 + [1] * 4])
    mine = models.load(tmp_path)(IDS[:1], token_type_ids=types).last_hidden_state
    with torch.no_grad():
        expected = (
            transformers.BertModel.from_pretrained(tmp_path, attn_implementation="eager")
            .eval()(torch.tensor(IDS[:1]), token_type_ids=torch.tensor(types))
            .last_hidden_state.numpy()
        )
    assert mine.shape == (1, 9, 32)
    np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2", "mistral"])
def test_generation_with_the_cache_gives_full_forward_logits_and_transformers_tokens(checkpoints, kind):
    path = checkpoints[kind, "float32"]
    model = models.load(path)
    prompt = np.array([5, 17, 33, 2])
    ids, logits = model.generate(prompt, 12, output_logits=True)
    for step, row in enumerate(logits):  # the cache's logits: those of a forward over every token so far
        np.testing.assert_allclose(row, model(ids[: len(prompt) + step]).logits[-1], rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        expected = reference(path).generate(
            torch.tensor(prompt[None]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    # transformers stops at its config's end token, as attnlab does; the tiny models have none in range
    np.testing.assert_array_equal(ids, expected.sequences.numpy()[0])
    np.testing.assert_allclose(logits, torch.cat(expected.logits).numpy(), rtol=1e-5, atol=1e-5)


def test_sampling_is_replayed_by_its_seed_and_generation_stops_at_the_end_token(checkpoints, tmp_path):
    path = checkpoints["qwen2", "float32"]
    model = models.load(path)
    prompt = np.array([5, 17, 33])
    first = model.generate(prompt, 8, temperature=1.0, rng=7)
    np.testing.assert_array_equal(first, model.generate(prompt, 8, temperature=1.0, rng=7))
    assert len(first) == 11
    greedy = model.generate(prompt, 8)
    stop = 1 + list(greedy[3:]).index(greedy[5])  # new tokens up to the first end token
    for name in ("config.json", "generation_config.json"):  # the second wins, as in transformers
        directory = copy_checkpoint(path, tmp_path / name)
        settings = json.loads((directory / name).read_text()) if (directory / name).is_file() else {}
        (directory / name).write_text(json.dumps({**settings, "eos_token_id": [int(greedy[5])]}))
        np.testing.assert_array_equal(models.load(directory).generate(prompt, 8), greedy[: 3 + stop])


# --- the trace --------------------------------------------------------------------------


def test_a_llama_trace_holds_the_rotated_q_and_k_and_each_step(checkpoints):
    path = checkpoints["llama", "float32"]
    model = models.load(path)
    ids = IDS[0]
    trace = model.trace(ids, layers=-1)
    assert sorted(trace.layers) == [1] and trace.num_heads == 4 and trace.num_layers == 2
    layer = trace[1]
    # the oracle: transformers' own modules on its own hidden state entering layer 1
    ref = reference(path)
    captured = {}
    attention = ref.model.layers[1].self_attn
    attention.register_forward_hook(lambda module, args, kwargs, out: captured.update(out=out[0]), with_kwargs=True)
    with torch.no_grad():
        out = ref(torch.tensor(ids[None]), output_hidden_states=True, output_attentions=True)
        h = ref.model.layers[1].input_layernorm(out.hidden_states[1])
        q = attention.q_proj(h).view(1, 9, 4, 8).transpose(1, 2)
        k = attention.k_proj(h).view(1, 9, 2, 8).transpose(1, 2)
        cos, sin = ref.model.rotary_emb(h, torch.arange(9)[None])
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    np.testing.assert_allclose(layer.inputs, h.numpy()[0], atol=1e-5)
    np.testing.assert_allclose(layer.Q, q.numpy()[0], atol=1e-5)
    np.testing.assert_allclose(layer.K, np.repeat(k.numpy()[0], 2, axis=0), atol=1e-5)  # kv head 0 serves heads 0, 1
    np.testing.assert_allclose(layer.scores[3, 6, 2], float(q[0, 3, 6] @ k[0, 1, 2]), rtol=1e-5)
    np.testing.assert_allclose(layer.weights, out.attentions[1].numpy()[0], atol=1e-6)
    assert np.isneginf(layer.scaled_scores[0, 2, 3]) and np.isfinite(layer.scaled_scores[0, 3, 2])  # causal
    np.testing.assert_allclose(layer.layer_output, captured["out"].numpy()[0], atol=1e-5)
    assert layer.scale == pytest.approx(8**-0.5)


def test_trace_takes_a_text_and_shows_its_tokens_readably(tmp_path):
    directory = tiny_checkpoint_with_tokenizer(tmp_path)
    model = models.load(directory)
    trace = model.trace(SENTENCE)
    assert "".join(trace.tokens) == SENTENCE
    assert all("Ã" not in t and "\ufffd" not in t for t in trace.tokens)  # no mojibake
    assert sorted(trace.layers) == [0, 1]
    assert trace[0].weights.shape == (4, len(trace.ids), len(trace.ids))
    with pytest.raises(KeyError, match="layer"):
        model.trace(SENTENCE, layers=1)[0]


# --- tokenizers ----------------------------------------------------------------------------

STRINGS = [
    SENTENCE,
    "他平时很爱打篮球",
    "小明",
    "The cat sat on the mat.",
    "hello world",
    "  leading and trailing spaces  ",
    "Tabs\tand\nnewlines",
    "emoji 🙂🚀 and 👨‍👩‍👧",
    "mixed 中文 and English 混合",
    "数字 12345 和 3.14159",
    "Ünïcödé àccents",
    "naïve café",
    "UPPER lower MiXeD",
    "punctuation!?,.;:'\"()[]{}",
    "注意力机制",
    "a",
    "",
    "unseen words: xylophone quixotic",
    "Ελληνικά και русский",
    "日本語のテキストも",
    "https://example.com/path?x=1&y=2",
    "<|endoftext|> is special",
]


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return train_tokenizers(tmp_path_factory.mktemp("tokenizers"))


@pytest.mark.parametrize(
    "layout", ["vocab.txt", "vocab+merges", "vocab.txt-tokenizer.json", "vocab+merges-tokenizer.json"]
)
def test_token_ids_equal_transformers_autotokenizer(tokenizer_dirs, layout):
    from attnlab.models._tokenizer import read_tokenizer

    ours = read_tokenizer(tokenizer_dirs[layout])
    theirs = transformers.AutoTokenizer.from_pretrained(tokenizer_dirs[layout])
    assert ours is not None and len(STRINGS) >= 20
    for text in STRINGS:
        assert ours.encode(text).tolist() == theirs(text)["input_ids"], text


def test_byte_level_pieces_of_chinese_are_shown_as_characters(tokenizer_dirs):
    from attnlab.models._tokenizer import read_tokenizer

    tokenizer = read_tokenizer(tokenizer_dirs["vocab+merges"])
    ids = tokenizer.encode("他 likes 篮球 🙂")
    pieces = [tokenizer.backend.id_to_token(i) for i in ids]
    assert any(len(p) == 1 and ord(p) > 127 for p in pieces)  # byte pieces: mojibake as they are stored
    readable = tokenizer.readable(ids)
    assert "".join(readable) == "他 likes 篮球 🙂"
    assert [t for t in readable if t.strip()] == [t for t in readable if t.strip()]  # (kept for the order check)
    assert "篮" in "".join(readable) and not any("\ufffd" in t for t in readable)


def test_word_piece_tokens_read_without_markers_and_specials_keep_their_names(tokenizer_dirs):
    from attnlab.models._tokenizer import read_tokenizer

    tokenizer = read_tokenizer(tokenizer_dirs["vocab.txt"])
    ids = tokenizer.encode("小明 playing")
    readable = tokenizer.readable(ids)
    assert readable[0] == "[CLS]" and readable[-1] == "[SEP]"
    assert tokenizer.is_special(ids[0]) and not tokenizer.is_special(ids[1])
    assert "".join(readable[1:-1]).replace(" ", "") == "小明playing"
    assert not any("##" in t for t in readable)


# --- bad input ----------------------------------------------------------------------------


def copy_checkpoint(source: Path, target: Path) -> Path:
    target.mkdir()
    for file in source.iterdir():
        (target / file.name).write_bytes(file.read_bytes())
    return target


def test_a_directory_without_config_json(tmp_path):
    with pytest.raises(models.CheckpointError, match=r"has no config\.json"):
        models.load(tmp_path)


def test_an_unsupported_model_type_names_the_supported_ones(checkpoints, tmp_path):
    directory = copy_checkpoint(checkpoints["gpt2", "float32"], tmp_path / "t5")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "t5"}))
    with pytest.raises(
        models.CheckpointError, match="model_type: expected one of gpt2, bert, llama, qwen2, mistral, got 't5'"
    ):
        models.load(directory)


def test_only_pickle_weights_are_refused_with_how_to_convert(checkpoints, tmp_path):
    directory = copy_checkpoint(checkpoints["gpt2", "float32"], tmp_path / "pickle")
    (directory / "model.safetensors").rename(directory / "pytorch_model.bin")
    with pytest.raises(models.CheckpointError, match=r"pytorch_model\.bin.*never loads.*save_pretrained"):
        models.load(directory)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda data: data[: len(data) // 2], "truncated"),
        (lambda data: data[:5], "truncated"),
        (lambda data: struct.pack("<Q", 2**40) + data[8:], "corrupted"),
        (lambda data: data[:8] + b"{not json" + data[17:], "not JSON"),
    ],
    ids=["half", "five-bytes", "header-length", "header-text"],
)
def test_a_truncated_or_corrupted_safetensors_file(checkpoints, tmp_path, damage, message):
    directory = copy_checkpoint(checkpoints["gpt2", "float32"], tmp_path / "bad")
    weights = directory / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    with pytest.raises(models.CheckpointError, match=message):
        models.load(directory)


def test_a_weight_of_the_wrong_shape_is_named(checkpoints, tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = copy_checkpoint(checkpoints["gpt2", "float32"], tmp_path / "shape")
    tensors = load_file(directory / "model.safetensors")
    name = next(n for n in tensors if n.endswith("h.1.mlp.c_fc.weight"))
    tensors[name] = tensors[name][:, :-1].copy()
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(models.CheckpointError, match=rf"{name}.*expected shape \(32, 128\), got \(32, 127\)"):
        models.load(directory)


def edit_json(path: Path, **changes: Any) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def damaged_header(directory: Path, change: Any) -> None:
    """Rewrite model.safetensors with its JSON header passed through ``change``."""
    weights = directory / "model.safetensors"
    data = weights.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = change(json.loads(data[8 : 8 + size]))
    text = json.dumps(header).encode()
    weights.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size :])


def first_two(header: dict[str, Any]) -> list[str]:
    return sorted((n for n in header if n != "__metadata__"), key=lambda n: header[n]["data_offsets"])[:2]


def bad_tokenizer_config(directory: Path) -> None:
    (directory / "vocab.json").write_text('{"a": 0}')
    (directory / "merges.txt").write_text("")
    (directory / "tokenizer_config.json").write_text('{"added_tokens_decoder": ["x"]}')


@pytest.mark.parametrize(
    "kind, damage, message",
    [
        ("gpt2", lambda d: damaged_header(d, lambda h: {**h, first_two(h)[0]: {**h[first_two(h)[0]], "shape": [True]}}),
         "expected a dtype among"),
        ("gpt2", lambda d: damaged_header(d, lambda h: {**h, "transformer.h.0.ln_1.bias": {
         **h["transformer.h.0.ln_1.bias"], "data_offsets": h["transformer.h.0.ln_1.weight"]["data_offsets"]}}),
         "share bytes"),
        ("gpt2", lambda d: (d / "config.json").write_text("[" * 100_000), "unreadable JSON"),
        ("gpt2", lambda d: edit_json(d / "config.json", model_type=["gpt2"]), "model_type: expected one of"),
        ("gpt2", lambda d: edit_json(d / "config.json", activation_function=["gelu"]), "activation_function: expected"),
        ("gpt2", lambda d: edit_json(d / "config.json", tie_word_embeddings="false"), "expected true or false"),
        ("llama", lambda d: edit_json(d / "config.json", rope_parameters={"rope_type": "llama3", "rope_theta": 1e4}),
         "rope_parameters: expected"),
        ("llama", lambda d: edit_json(d / "config.json", rope_parameters={"rope_type": "yarn", "rope_theta": 1e4}),
         "rope type 'yarn' is not supported"),
        ("llama", lambda d: edit_json(d / "config.json", rope_parameters="default"), "rope_parameters: expected"),
        ("qwen2", lambda d: edit_json(d / "config.json", rope_parameters={"rope_type": "default", "rope_theta": 1e400}),
         "not a finite positive number: inf"),
        ("gpt2", lambda d: bad_tokenizer_config(d), "added_tokens_decoder: expected"),
        ("mistral", lambda d: edit_json(d / "config.json", sliding_window=0),
         "sliding_window: expected a positive integer, got 0"),
        ("mistral", lambda d: edit_json(d / "config.json", sliding_window="4"),
         "sliding_window: expected a positive integer, got '4'"),
        ("qwen2", lambda d: edit_json(d / "config.json", use_sliding_window="yes"),
         "use_sliding_window: expected true or false"),
        ("qwen2", lambda d: edit_json(d / "config.json", use_sliding_window=True, sliding_window=4, layer_types=None,
         max_window_layers=-1), "max_window_layers: expected an integer >= 0, got -1"),
        ("qwen2", lambda d: edit_json(d / "config.json", layer_types=["full_attention"]),
         "layer_types: expected a list of 2 'full_attention' or 'sliding_attention', got"),
        ("qwen2", lambda d: edit_json(d / "config.json", layer_types=["full_attention", "chunked_attention"]),
         "layer_types: expected a list of 2"),
        ("qwen2", lambda d: edit_json(d / "config.json", layer_types=["full_attention", "sliding_attention"]),
         "'sliding_attention' layers need use_sliding_window true and a sliding_window"),
    ],
)  # fmt: skip
def test_malformed_checkpoints_are_errors_not_crashes(checkpoints, tmp_path, kind, damage, message):
    directory = copy_checkpoint(checkpoints[kind, "float32"], tmp_path / "bad")
    damage(directory)
    with pytest.raises(models.CheckpointError, match=message):
        models.load(directory)


def test_a_shard_index_cannot_reach_outside_the_checkpoint(checkpoints, tmp_path):
    directory = copy_checkpoint(checkpoints["gpt2", "bfloat16"], tmp_path / "escape")
    edit_json(directory / "model.safetensors.index.json", weight_map={"wte.weight": "../../etc/passwd"})
    with pytest.raises(models.CheckpointError, match="expected shard files in"):
        models.load(directory)


def test_byte_fallback_pieces_read_as_their_characters_once(tmp_path):
    """A Llama-2-style tokenizer: SentencePiece pieces and <0xNN> byte tokens."""
    from attnlab.models._tokenizer import read_tokenizer

    vocab = {
        "<unk>": 0,
        "<s>": 1,
        "</s>": 2,
        **{f"<0x{b:02X}>": 3 + b for b in range(256)},
        "▁": 259,
        "▁a": 260,
        "a": 261,
    }
    transformers.LlamaTokenizer(vocab=vocab, merges=[("▁", "a")]).save_pretrained(tmp_path)
    tokenizer = read_tokenizer(tmp_path)
    for text in ("日本", "a 👨\u200d👩\u200d👧 a", "小明是个运动达人，他平时很爱打篮球"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert len(ids) > len(text)  # bytes, not characters
        assert "".join(tokenizer.readable(ids)).strip() == text, tokenizer.readable(ids)
    parts = tokenizer.parts(tokenizer.encode("日本", add_special_tokens=False))
    assert set(parts) <= {"", "日", "本"} and parts.count("日") == 3  # three bytes, three pieces


def test_a_text_longer_than_the_positions(checkpoints):
    model = models.load(checkpoints["bert", "float32"])
    with pytest.raises(ValueError, match="input_ids: expected at most 40 tokens, the model's positions, got 41"):
        model(np.ones(41, dtype=int))
    with pytest.raises(ValueError, match="at most 40"):
        models.load(checkpoints["gpt2", "float32"]).generate(np.ones(30, dtype=int), 20)


@pytest.mark.parametrize(
    ("given", "error", "got"),
    [
        ([], ValueError, "text_or_ids: expected a text or at least one token id (L,), got an empty list"),
        (None, TypeError, "text_or_ids: expected a text (str) or integer token ids (L,), got None"),
        (b"hi", TypeError, "text_or_ids: expected a text (str) or integer token ids (L,), got bytes b'hi' (a text "
         "is a str: decode the bytes)"),
        ([1.5], TypeError, "text_or_ids: expected a text (str) or integer token ids (L,), got float64 values"),
        ({"a": 1}, TypeError, "text_or_ids: expected a text (str) or integer token ids (L,), got a dict"),
        ([0, 300], ValueError, "text_or_ids: expected ids in 0..299, got 0..300"),
    ],
)  # fmt: skip
def test_a_trace_of_no_ids_says_what_came_naming_text_or_ids(checkpoints, given, error, got):
    model = models.load(checkpoints["gpt2", "float32"])
    with pytest.raises(error) as caught:
        model.trace(given)
    assert str(caught.value) == got and caught.value.argument == "text_or_ids"
    with pytest.raises(
        ValueError, match=r"^input_ids: expected at least one token id, \(L,\) or \(B, L\), got an empty list$"
    ):
        model([])


def test_bad_ids_and_arguments(checkpoints):
    model = models.load(checkpoints["gpt2", "float32"])
    with pytest.raises(ValueError, match=r"input_ids: expected ids in 0\.\.299, got 0\.\.300"):
        model(np.array([0, 300]))
    with pytest.raises(TypeError, match="input_ids: expected integer token ids"):
        model(np.array([0.5]))
    with pytest.raises(ValueError, match=r"layers: expected layer indices in -2\.\.1"):
        model.trace([1, 2], layers=2)
    with pytest.raises(ValueError, match=r"dtype: expected numpy\.float32 or numpy\.float64"):
        models.load(checkpoints["gpt2", "float32"], dtype=np.float16)
    with pytest.raises(ValueError, match=r"attention_mask: expected the ids' shape \(2, 9\), got shape \(2, 3\)"):
        model(IDS, attention_mask=np.ones((2, 3)))
    with pytest.raises(
        ValueError, match=r"attention_mask: expected 1 \(a token\) and 0 \(padding\), got values \[0, 2\]"
    ):
        model(IDS[0], attention_mask=[2] + [0] * 8)
    with pytest.raises(ValueError, match="max_new_tokens: expected an integer >= 0, got -1"):
        model.generate([1, 2], -1)
    assert len(model.generate([1, 2], 0)) == 2
    with pytest.raises(ValueError, match=r"text_or_ids: expected one sequence"):
        model.trace(IDS)
    with pytest.raises(ValueError, match="text_or_ids: expected at most 40 tokens"):
        model.trace(np.ones(41, dtype=int))
    with pytest.raises(ValueError, match="generate: bert is not a causal model"):
        models.load(checkpoints["bert", "float32"]).generate([1, 2], 3)
    bert = models.load(checkpoints["bert", "float32"])
    with pytest.raises(ValueError, match=r"token_type_ids: expected ids in 0\.\.1, got 0\.\.5"):
        bert(IDS[0], token_type_ids=[0, 5] + [0] * 7)


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_id_with_no_cache_and_no_network_is_one_error_saying_what_works_offline(tmp_path, offline):
    environment = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1" if offline else "0"}
    code = "from attnlab import models; models.load('attnlab-test/no-such-model')"
    # the bound catches a hang (a download retried for ever); it is not what the test asserts
    run = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert "attnlab-test/no-such-model" in last and str(tmp_path / "hf") in last, last
    assert ("HF_HUB_OFFLINE is set" in last) is offline, last  # offline: the cache only, no download tried
    assert "builtin:coref loads" in last and "`hf download attnlab-test/no-such-model`" in last, last
    assert "huggingface-cli download attnlab-test/no-such-model" in last and "local directory" in last, last


# --- the command line ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_with_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("cli"))


def run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "attnlab", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_cli_trace_of_a_model_is_its_last_layer_or_all(checkpoint_with_tokenizer):
    directory = str(checkpoint_with_tokenizer)
    last = run_cli("trace", "--model", directory, "--text", SENTENCE, "--format", "json")
    assert last.returncode == 0, last.stderr
    data = json.loads(last.stdout)
    assert list(data["layers"]) == ["1"] and "".join(data["tokens"]) == SENTENCE
    expected = models.load(directory).trace(SENTENCE)
    np.testing.assert_allclose(data["layers"]["1"]["weights"], expected[1].weights, atol=1e-7)
    every = json.loads(run_cli("trace", "--model", directory, "--text", SENTENCE, "--layer", "all", "--format",
                               "json").stdout)  # fmt: skip
    assert list(every["layers"]) == ["0", "1"]
    both = json.loads(run_cli("trace", "--model", directory, "--text", SENTENCE, "--layer", "0,-1", "--format",
                              "json").stdout)  # fmt: skip
    assert sorted(both["layers"]) == ["0", "1"]  # a list, negative from the end
    np.testing.assert_allclose(both["layers"]["0"]["weights"], expected[0].weights, atol=1e-7)
    text = run_cli("trace", "--model", directory, "--text", "小明", "--lang", "en", "--layer", "0")
    assert text.returncode == 0 and "layer 0 of 2" in text.stdout and "-- head 3 --" in text.stdout


@pytest.mark.slow
def test_cli_plot_of_layer_all_writes_a_png(checkpoint_with_tokenizer, tmp_path):
    picture = tmp_path / "grid.png"
    run = run_cli("plot", "--model", str(checkpoint_with_tokenizer), "--text", SENTENCE, "--layer", "all",
                  "-o", str(picture))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--model", "/no/such/dir", "--text", "a"],
            r"--model: expected a checkpoint folder, a \.gguf file, builtin:NAME or a hub id",
        ),
        (["--model", "{tmp}", "--text", "a"], r"has no config\.json"),
        (["--model", "{ckpt}", "--text", "a", "--causal"], "--causal: --model"),
        (["--model", "{ckpt}", "--text", "a", "--layer", "5"], r"--layer: expected layer indices in -2\.\.1"),
        (["--model", "{ckpt}", "--text", SENTENCE * 2], "--text: expected at most 40 tokens"),
        (["--text", "a b", "--layer", "1"], "--layer: expected --model"),
        (
            ["--model", "{ckpt}", "--text", "a", "--layer", "x"],
            r"expected a layer index, a list of them \(0,5,-1\) or 'all'",
        ),
        (["--model", "{ckpt}", "--text", "a", "--layer", "0,x"], "expected a layer index, a list of them"),
        (
            ["--model", "{t5}", "--text", "a", "--backend", "numpy"],
            "--backend: expected 'transformers' for .*, a 't5' model \\(attnlab runs .*\\), got 'numpy'",
        ),
        (["--model", "{pickled}", "--text", "a"], r"only pytorch_model\.bin \(pickle\)"),
        (["--model", "attnlab-test/no-such-model", "--text", "a"], "attnlab-test/no-such-model"),
    ],
)
def test_cli_model_errors_are_one_line(checkpoint_with_tokenizer, tmp_path, argv, message):
    import re

    t5 = copy_checkpoint(checkpoint_with_tokenizer, tmp_path / "t5")
    (t5 / "config.json").write_text(json.dumps({**json.loads((t5 / "config.json").read_text()), "model_type": "t5"}))
    pickled = copy_checkpoint(checkpoint_with_tokenizer, tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    argv = [a.format(tmp=tmp_path, ckpt=checkpoint_with_tokenizer, t5=t5, pickled=pickled) for a in argv]
    run = run_cli("trace", *argv, env={"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 2 and run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert re.search(message, run.stderr), run.stderr


def test_the_models_benchmark_runs_both_libraries_on_the_same_model():
    from attnlab.bench._models import QWEN2_5_0_5B, format_models, run_models

    config = {**QWEN2_5_0_5B, "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 96,
              "num_attention_heads": 4, "vocab_size": 500}  # fmt: skip
    results = run_models(config, lengths=(8, 40), new_tokens=4, repeat=1)
    assert [row["tokens"] for row in results["forward"]] == [8, 40]
    assert all(row["max_abs_logit_difference"] < 1e-4 for row in results["forward"])  # the same computation
    assert results["generate"]["same_tokens"] is True
    assert results["memory"]["peak_bytes"] > results["weight_bytes"]  # a tiny model: the interpreter dominates
    report = format_models(results)
    assert "| 40 |" in report and "vs sdpa" in report and "× the float32 weight bytes" in report


@pytest.mark.slow
def test_a_saved_model_trace_reads_back_and_the_cli_takes_it(checkpoint_with_tokenizer, tmp_path):
    trace = models.load(checkpoint_with_tokenizer).trace(SENTENCE)
    again = models.ModelTrace.from_dict(json.loads(trace.to_json()), "saved")
    assert (again.model, again.ids, again.tokens) == (trace.model, trace.ids, trace.tokens)
    assert sorted(again.layers) == [0, 1] and (again.num_layers, again.num_heads) == (2, 4)
    for i in (0, 1):
        np.testing.assert_array_equal(again[i].weights, trace[i].weights)
        np.testing.assert_array_equal(again[i].scaled_scores, trace[i].scaled_scores)  # −inf survives JSON
    saved = tmp_path / "saved.json"
    saved.write_text(trace.to_json(), encoding="utf-8")
    one = run_cli("trace", str(saved), "--layer", "-1", "--format", "json")
    assert one.returncode == 0, one.stderr
    assert list(json.loads(one.stdout)["layers"]) == ["1"]
    listed = run_cli("trace", str(saved), "--layer", "1,0", "--format", "json")
    assert sorted(json.loads(listed.stdout)["layers"]) == ["0", "1"]
    assert run_cli("view", str(saved), "-o", str(tmp_path / "saved.html")).returncode == 0
    for argv, message in [
        (["--layer", "5"], "--layer: expected one of the saved layers [0, 1], got 5"),
        (["--tokens", "a b"], "--tokens: "),
        (["--causal"], "--causal: "),
    ]:
        run = run_cli("trace", str(saved), *argv)
        assert run.returncode == 2 and message in run.stderr, run.stderr
    broken = json.loads(trace.to_json())
    broken["layers"]["1"]["tokens"] = broken["layers"]["1"]["tokens"][:-1]
    with pytest.raises(ValueError, match="saved, layer 1: tokens: expected"):
        models.ModelTrace.from_dict(broken, "saved")


@pytest.mark.slow
def test_a_models_plot_is_a_layers_by_heads_grid_with_chinese_tokens(checkpoint_with_tokenizer, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")

    matplotlib.use("Agg")
    import attnlab as al

    trace = models.load(checkpoint_with_tokenizer).trace(SENTENCE)
    figure = al.plot(trace, tmp_path / "grid.png")
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]  # the colour bar has no title
    assert [ax.get_title() for ax in panels] == [
        f"attention weights · layer {layer} · head {head}" for layer in (0, 1) for head in range(4)
    ]
    labels = [t.get_text() for t in panels[0].get_yticklabels()]
    assert "篮" in labels and "".join(labels) == SENTENCE  # every token, Chinese, in order
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    families = panels[0].get_yticklabels()[2].get_fontfamily()  # Latin from DejaVu Sans, then a CJK font
    files = [font_manager.findfont(font_manager.FontProperties(family=f), fallback_to_default=False) for f in families]
    assert [bool(FT2Font(f).get_char_index(ord("篮"))) for f in files] == [False, True], families  # which draws 篮
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_cli_refuses_a_model_page_too_large_to_open_and_says_what_to_do(
    checkpoint_with_tokenizer, tmp_path, monkeypatch, capsys
):
    import attnlab.viz._page
    from attnlab.cli import main

    monkeypatch.setitem(attnlab.viz._page.PAGE_LIMITS, "page", 20_000)  # the tiny model's page as a big one's
    page = tmp_path / "big.html"
    assert main(["view", "--model", str(checkpoint_with_tokenizer), "--text", SENTENCE, "-o", str(page)]) == 2
    error = capsys.readouterr().err
    assert "MB (q, k and v at 10 bits, the least), at most 0.02 MB" in error, error
    assert "use --layer N or a list of layers (--layer 0,5,-1), or fewer tokens" in error, error
    assert len(error.strip().splitlines()) == 1 and not page.exists()
    assert (
        main(["view", "--model", str(checkpoint_with_tokenizer), "--text", "小明", "--layer", "0", "-o", str(page)])
        == 0
    )


@pytest.mark.parametrize("kind", ["qwen2", "mistral"])
def test_generation_on_the_decode_path_gives_transformers_tokens(checkpoints, kind, monkeypatch):
    """Every generated token's attention on the fused engine's decode path (its threshold
    lowered to 0 bytes): GQA, and Mistral's window, the same tokens and logits as transformers'."""
    from attnlab.engine import _attention
    from attnlab.engine.fused import _engine

    if not _engine.available():
        pytest.skip("numba is not installed (attnlab[fast])")
    from attnlab.engine.fused import _decode_kernels

    merged = []
    original = _decode_kernels.merge
    monkeypatch.setattr(_attention, "DECODE_FROM_BYTES", 0)
    monkeypatch.setattr(_decode_kernels, "merge", lambda *arguments: merged.append(1) or original(*arguments))
    path = checkpoints[kind, "float32"]
    model = models.load(path)
    prompt = np.array([5, 17, 33, 2])
    ids, logits = model.generate(prompt, 8, output_logits=True)
    assert len(merged) >= 7 * model.config.num_hidden_layers  # each new token's every layer
    with torch.no_grad():
        expected = reference(path).generate(
            torch.tensor(prompt[None]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0,
            output_logits=True, return_dict_in_generate=True,
        )  # fmt: skip
    np.testing.assert_array_equal(ids, expected.sequences.numpy()[0])
    np.testing.assert_allclose(logits, torch.cat(expected.logits).numpy(), rtol=1e-5, atol=1e-5)
