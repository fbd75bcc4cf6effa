"""attnlab.analysis.ablate on attnlab's NumPy models and on transformers models through
attnlab's backend. Oracle: transformers with its sdpa attention (eager's softmax is float32
even in float64), the same head's slice of its out projection's input (c_proj, o_proj)
replaced by a forward pre-hook written here, in float64; and the NumPy model of the same
checkpoint against the transformers one."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.checkpoints import tiny_model, train_tokenizers

from attnlab import ArgumentError, ArgumentTypeError, models
from attnlab.analysis import Ablation, ablate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
hf = pytest.importorskip("attnlab.hf")

TEXT, PATCH = "The cat sat on the", "The cat sat in the"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Path]:
    """A tiny GPT-2 (float64, weights large enough for heads to matter) with a byte-level
    BPE tokenizer, saved so that attnlab's NumPy model reads the same checkpoint."""
    directory = tmp_path_factory.mktemp("ablate")
    layouts = train_tokenizers(directory / "tokenizer")
    model = tiny_model("gpt2", initializer_range=0.3).double()
    checkpoint = directory / "gpt2"
    model.save_pretrained(checkpoint)
    for name in ("vocab.json", "merges.txt"):
        (checkpoint / name).write_bytes((layouts["vocab+merges"] / name).read_bytes())
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    assert len(tokenizer(TEXT)["input_ids"]) == len(tokenizer(PATCH)["input_ids"])
    return model, tokenizer, checkpoint


def _out_projection(model: Any, layer: int) -> Any:
    if hasattr(model, "transformer"):
        return model.transformer.h[layer].attn.c_proj  # GPT-2
    return model.model.layers[layer].self_attn.o_proj  # Llama


def _inputs_of_out_projection(model: Any, ids: list[int], layer: int) -> Any:
    """The out projection's input (1, L, H·Ev) in an sdpa run on ``ids``."""
    model.set_attn_implementation("sdpa")
    seen = []
    handle = _out_projection(model, layer).register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]))
    finally:
        handle.remove()
    return seen[0]


def _oracle_logprobs(model: Any, ids: list[int], layer: int | None, head: int, replace: Callable[..., Any]) -> Any:
    """log softmax of the last position's logits in sdpa attention (float64 throughout), with head ``head``'s
    slice of layer ``layer``'s out-projection input replaced by ``replace(slice)``."""
    model.set_attn_implementation("sdpa")
    width = model.config.hidden_size // model.config.num_attention_heads

    def pre_hook(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0].clone()
        part = x[..., head * width : (head + 1) * width]
        x[..., head * width : (head + 1) * width] = replace(part)
        return (x, *args[1:])

    handle = None if layer is None else _out_projection(model, layer).register_forward_pre_hook(pre_hook)
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    finally:
        if handle is not None:
            handle.remove()
    return torch.log_softmax(logits, -1).numpy()


def _oracle(model: Any, ids: list[int], target: int | None, mode: str, patch_ids: list[int] | None = None) -> Any:
    """The (layers, heads) effect as the sdpa oracle gives it."""
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    width = model.config.hidden_size // heads
    base = _oracle_logprobs(model, ids, None, 0, lambda x: x)
    effect = np.zeros((layers, heads))
    for layer in range(layers):
        patched = None if patch_ids is None else _inputs_of_out_projection(model, patch_ids, layer)
        for head in range(heads):
            replace = {
                "zero": lambda x: torch.zeros_like(x),
                "mean": lambda x: x.mean(dim=-2, keepdim=True).expand_as(x),
                "patch": lambda x, p=patched, h=head: p[..., h * width : (h + 1) * width],
            }[mode]
            ablated = _oracle_logprobs(model, ids, layer, head, replace)
            if target is None:
                effect[layer, head] = np.sum(np.exp(base) * (base - ablated))
            else:
                effect[layer, head] = ablated[target] - base[target]
    return effect


@pytest.mark.parametrize("mode", ["zero", "mean", "patch"])
def test_transformers_on_attnlab_matches_sdpa_with_the_head_replaced_by_a_hook(gpt2: Any, mode: str) -> None:
    model, tokenizer, _ = gpt2
    ids, patch_ids = tokenizer(TEXT)["input_ids"], tokenizer(PATCH)["input_ids"]
    target = tokenizer(" the", add_special_tokens=False)["input_ids"]
    assert len(target) == 1
    patch = PATCH if mode == "patch" else None
    result = ablate(model, TEXT, heads="all", mode="zero" if mode == "patch" else mode, target=" the",
                    patch_text=patch, tokenizer=tokenizer)  # fmt: skip
    expected = _oracle(model, ids, target[0], mode, patch_ids if patch else None)
    assert result.effect.shape == (2, 4) and result.mode == mode and result.metric == "logprob"
    assert np.abs(expected).max() > 1e-3  # the heads matter: the comparison means something
    np.testing.assert_allclose(result.effect, expected, atol=1e-10)
    assert result.base_logprob == pytest.approx(
        _oracle_logprobs(model, ids, None, 0, lambda x: x)[target[0]], abs=1e-12
    )
    assert result.layer_labels == ["transformer.h.0.attn", "transformer.h.1.attn"]
    assert model.config._attn_implementation == "sdpa"  # the model's implementation is restored
    # the registered function is never swapped: the hook is this thread's only
    assert transformers.AttentionInterface._global_mapping[hf.NAME] is hf._register.attnlab_attention


def test_without_a_target_it_is_the_kl_divergence_of_the_next_token_distribution(gpt2: Any) -> None:
    model, tokenizer, _ = gpt2
    result = ablate(model, TEXT, heads=[(1, 2), (0, 3)], tokenizer=tokenizer)
    expected = _oracle(model, tokenizer(TEXT)["input_ids"], None, "zero")
    assert result.metric == "kl" and result.target is None
    np.testing.assert_allclose(result.effect[[1, 0], [2, 3]], expected[[1, 0], [2, 3]], atol=1e-10)
    assert np.isnan(result.effect[0, 0]) and np.all(result.effect[[1, 0], [2, 3]] > 0)
    base = _oracle_logprobs(model, tokenizer(TEXT)["input_ids"], None, 0, lambda x: x)
    assert result.base_logprob == pytest.approx(base.max(), abs=1e-12)
    assert result.predicted == tokenizer.decode([int(base.argmax())])


@pytest.mark.parametrize("mode", ["zero", "mean", "patch"])
def test_the_numpy_model_agrees_with_transformers(gpt2: Any, mode: str) -> None:
    model, tokenizer, checkpoint = gpt2
    numpy_model = models.load(checkpoint, dtype=np.float64)
    options: dict[str, Any] = {"mode": mode} if mode != "patch" else {"patch_text": PATCH}
    ours = ablate(numpy_model, TEXT, heads="all", target=" the", **options)
    theirs = ablate(model, TEXT, heads="all", target=" the", tokenizer=tokenizer, **options)
    np.testing.assert_allclose(ours.effect, theirs.effect, atol=1e-10)
    assert ours.base_logprob == pytest.approx(theirs.base_logprob, abs=1e-10)
    assert ours.tokens == theirs.tokens and ours.layer_labels == ["layer 0", "layer 1"]


def test_a_gqa_llama_by_ids_matches_sdpa_and_the_numpy_model(tmp_path: Path) -> None:
    model = tiny_model("llama", initializer_range=0.3).double()
    ids = [5, 17, 42, 8, 99, 3, 250]
    result = ablate(model, ids, heads="all", target=7)
    np.testing.assert_allclose(result.effect, _oracle(model, ids, 7, "zero"), atol=1e-10)
    model.save_pretrained(tmp_path)
    numpy_model = models.load(tmp_path, dtype=np.float64)
    ours = ablate(numpy_model, np.array(ids), heads="all", target=7, mode="mean")
    # transformers' Llama computes RMSNorm and RoPE in float32 even in float64 (docs/design.md): float32's tolerance
    np.testing.assert_allclose(ours.effect, _oracle(model, ids, 7, "mean"), atol=1e-5)


def test_the_result_is_json_for_a_page_and_a_table(gpt2: Any) -> None:
    _, _, checkpoint = gpt2
    result = ablate(models.load(checkpoint, dtype=np.float64), TEXT, heads=[(0, 1)], target=" the")
    data = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert data["effect"][0][0] is None and isinstance(data["effect"][0][1], float)
    assert data["head_labels"] == ["head 0", "head 1", "head 2", "head 3"] and data["target"] == " the"
    lines = result.render(precision=3).splitlines()
    assert lines[0].startswith("change in log p(' the') at the last position (base ")
    assert lines[1].split() == ["head", "0", "head", "1", "head", "2", "head", "3"]
    assert lines[2].split()[:3] == ["layer", "0", "-"] and lines[3].split()[2:] == ["-"] * 4
    assert isinstance(result, Ablation) and "2 layers × 4 heads" in repr(result)


def test_bad_input_gets_one_line_errors(gpt2: Any) -> None:
    model, tokenizer, checkpoint = gpt2
    numpy_model = models.load(checkpoint, dtype=np.float64)
    for subject, extra in ((numpy_model, {}), (model, {"tokenizer": tokenizer})):
        cases: list[tuple[dict[str, Any], str]] = [
            (
                {"heads": [(2, 0)]},
                r"heads: expected distinct \(layer, head\) pairs, layer in 0\.\.1 and head in 0\.\.3",
            ),
            ({"heads": [(0, 4)]}, r"heads: .* got \(0, 4\)"),
            ({"target": "cat sat"}, r"target: expected one token of the model's vocabulary, got 'cat sat', \d tokens"),
            ({"text": TEXT * 20}, r"text: expected at most 40 tokens, the model's positions, got \d+"),
            ({"patch_text": "The"}, r"patch_text: expected \d+ tokens, as many as text"),
            ({"mode": "max"}, r"mode: expected 'zero' or 'mean', got 'max'"),
            ({"mode": "mean", "patch_text": PATCH}, r"mode: expected 'zero' \(the default\) with patch_text"),
        ]
        for options, message in cases:
            arguments = {"text": TEXT, "heads": "all", **extra, **options}
            with pytest.raises(ArgumentError, match=message) as caught:
                ablate(subject, arguments.pop("text"), **arguments)
            assert "\n" not in str(caught.value)
    with pytest.raises(ArgumentTypeError, match=r"heads: expected 'all' or a list of \(layer, head\) pairs"):
        ablate(numpy_model, TEXT, heads=[0, 1])
    with pytest.raises(ArgumentTypeError, match=r"model: expected an attnlab\.models\.Model or a transformers model"):
        ablate("gpt2", TEXT, heads="all")
    with pytest.raises(
        ArgumentError, match=r"^text: expected token ids: the model has no tokenizer to read a text, got a text$"
    ):
        ablate(model, TEXT, heads="all")


@pytest.mark.parametrize("target", [True, 3.0, b" the"])
def test_a_target_that_is_no_token_names_target_not_text(gpt2: Any, target: Any) -> None:
    model, tokenizer, checkpoint = gpt2
    for runner_model, options in ((models.load(checkpoint), {}), (model, {"tokenizer": tokenizer})):
        with pytest.raises(ArgumentTypeError, match=r"^target: expected a string that is one token, or a token id, "):
            ablate(runner_model, TEXT, heads=[(0, 0)], target=target, **options)


def test_ablate_in_one_thread_leaves_another_threads_forwards_untouched() -> None:
    """Thread A ablates a Llama again and again while thread B runs plain forwards of a
    GPT-2 on attnlab's backend: B's logits are exactly those it gets alone, A's effects
    exactly A's alone, and neither sees the other's calls."""
    llama = tiny_model("llama", initializer_range=0.3).double()
    gpt2 = tiny_model("gpt2", initializer_range=0.3).double()
    gpt2.set_attn_implementation(hf.NAME)
    ids, gpt2_ids = [5, 17, 42, 8, 99, 3, 250], torch.tensor([[7, 3, 11, 200, 9, 31]])

    def forward() -> Any:
        with torch.no_grad():
            return gpt2(input_ids=gpt2_ids).logits

    alone_a, alone_b = ablate(llama, ids, heads="all", target=7).effect, forward()
    errors: list[BaseException] = []
    a_results: list[Any] = []
    b_results: list[Any] = []
    done = threading.Event()

    def thread_a() -> None:
        try:
            for _ in range(6):
                a_results.append(ablate(llama, ids, heads="all", target=7).effect)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
        finally:
            done.set()

    def thread_b() -> None:
        try:
            while not done.is_set() or len(b_results) < 3:
                b_results.append(forward())
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            done.set()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert len(a_results) == 6 and len(b_results) >= 3
    for effect in a_results:
        np.testing.assert_array_equal(effect, alone_a)
    for logits in b_results:
        assert torch.equal(logits, alone_b)


def test_heads_outside_an_attnlab_model_are_refused_before_any_forward(
    gpt2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attnlab's model knows its layers and heads from its config: a head it lacks costs no forward."""
    from attnlab.runner import _numpy as _numpy_runner

    def no_forward(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a forward ran before the heads were checked")

    monkeypatch.setattr(_numpy_runner.NumpyRunner, "record", no_forward)
    model = models.load(gpt2[2])
    layers, heads = model.config.num_hidden_layers, model.config.num_attention_heads
    with pytest.raises(
        ArgumentError, match=rf"^heads: expected distinct \(layer, head\) pairs, layer in 0..{layers - 1} "
    ):
        ablate(model, TEXT, heads=[(layers, 0)])
    with pytest.raises(ArgumentError, match=rf"head in 0..{heads - 1}, got \(0, {heads}\)$"):
        ablate(model, TEXT, heads=[(0, heads)])


class _StopError(Exception):
    pass


@pytest.mark.parametrize("kind", ["numpy", "transformers"])
def test_check_is_called_before_each_forward_one_head_a_forward_and_stops_where_it_raises(gpt2: Any, kind: str) -> None:
    """The live page's check: before the unablated forward and before each head's, so that a
    request its page left stops within one forward of the text, not a batch of 64."""
    model, tokenizer, checkpoint = gpt2
    subject, extra = (
        (models.load(checkpoint, dtype=np.float64), {}) if kind == "numpy" else (model, {"tokenizer": tokenizer})
    )
    heads = [(1, 2), (0, 3), (0, 1)]
    calls: list[int] = []
    checked = ablate(subject, TEXT, heads=heads, check=lambda: calls.append(0), **extra)
    assert len(calls) == 1 + len(heads)
    np.testing.assert_allclose(checked.effect, ablate(subject, TEXT, heads=heads, **extra).effect, atol=1e-12)
    ran: list[int] = []

    def stop_at_the_second_head() -> None:
        ran.append(0)
        if len(ran) == 3:
            raise _StopError

    with pytest.raises(_StopError):
        ablate(subject, TEXT, heads=heads, check=stop_at_the_second_head, **extra)
    with pytest.raises(ArgumentTypeError, match=r"^check: expected a function or None, got int$"):
        ablate(subject, TEXT, heads=heads, check=1, **extra)
