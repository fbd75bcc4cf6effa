"""attnlab.nn refuses the settings torch refuses (issue 24, items 4 and 6): each case raises
attnlab's ArgumentError or ArgumentTypeError naming the argument, where torch raises too."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest

from attnlab import ArgumentError, ArgumentTypeError, nn

torch = pytest.importorskip("torch")


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


ADAMW_BAD = [
    ({"lr": -0.1}, "lr"),
    ({"lr": float("nan")}, "lr"),
    ({"betas": (1.0, 0.999)}, "betas[0]"),
    ({"betas": (0.9, 1.0)}, "betas[1]"),
    ({"betas": (-0.1, 0.999)}, "betas[0]"),
    ({"eps": -1.0}, "eps"),
    ({"weight_decay": -0.01}, "weight_decay"),
]


@pytest.mark.parametrize(("kwargs", "name"), ADAMW_BAD, ids=[f"{n}={v}" for (k, n) in ADAMW_BAD for v in k.values()])
def test_adamw_refuses_lr_betas_eps_and_decay_that_torch_refuses(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError):  # the oracle: torch refuses the same setting
        torch.optim.AdamW([torch.zeros(2, requires_grad=True)], **kwargs)
    parameter = nn.Linear(2, 2, rng=rng()).weight
    with pytest.raises(ArgumentError, match=r"^" + re.escape(name) + ": expected"):
        nn.AdamW([parameter], **kwargs)


@pytest.mark.parametrize("kwargs", [{"lr": "0.1"}, {"lr": True}, {"betas": (0.9,)}, {"betas": 0.9}, {"eps": 1j}])
def test_adamw_refuses_settings_of_the_wrong_type(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ArgumentTypeError, match=rf"^{next(iter(kwargs))}"):
        nn.AdamW([nn.Linear(2, 2, rng=rng()).weight], **kwargs)


def test_train_refuses_a_negative_scheduled_learning_rate() -> None:
    layer = nn.Linear(2, 1, rng=rng())
    x = np.ones((1, 2))

    def loss_fn(model: nn.Linear, batch: None) -> tuple[float, Any]:
        y, back = model(x)
        return float(y.sum()), lambda: back(np.ones_like(y))

    with pytest.raises(ArgumentError, match=r"^learning_rate\(step\): expected"):
        nn.train(layer, [None], nn.AdamW(layer.parameters()), 1, loss_fn, learning_rate=lambda step: -1.0)


@pytest.mark.parametrize("index", [-1, 5])
def test_embedding_refuses_index_minus_one_and_out_of_range(index: int) -> None:
    with pytest.raises(IndexError):  # the oracle: torch refuses both
        torch.nn.Embedding(5, 3)(torch.tensor([[index]]))
    embedding = nn.Embedding(5, 3, rng=rng())
    with pytest.raises(ArgumentError, match=r"^ids: expected ids in 0\.\.4, got"):
        embedding(np.array([[1, index]]))


def test_embedding_refuses_float_ids() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^ids: expected an array of integers"):
        nn.Embedding(5, 3, rng=rng())(np.array([[1.0]]))


def test_embedding_still_takes_every_row_and_adds_repeated_gradients() -> None:
    embedding = nn.Embedding(3, 2, rng=rng())
    y, back = embedding(np.array([[0, 2, 2]]))
    np.testing.assert_array_equal(y[0], embedding.weight.value[[0, 2, 2]])
    back(np.ones((1, 3, 2)))
    np.testing.assert_array_equal(embedding.weight.grad, [[1, 1], [0, 0], [2, 2]])  # by hand: row 2 used twice


@pytest.mark.parametrize("target", [3, -2])
def test_cross_entropy_refuses_an_out_of_range_target(target: int) -> None:
    with pytest.raises((IndexError, RuntimeError)):  # the oracle: torch refuses (ignore_index −1)
        torch.nn.functional.cross_entropy(torch.zeros(2, 3), torch.tensor([0, target]), ignore_index=-1)
    with pytest.raises(ArgumentError, match=r"^targets: expected ids in 0\.\.2, or −1"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0, target]))


def test_cross_entropy_refuses_float_targets_and_a_wrong_shape() -> None:
    with pytest.raises(ArgumentTypeError, match=r"^targets: expected an array of integers"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0.0, 1.0]))
    with pytest.raises(ArgumentError, match=r"^targets: expected shape \(2,\)"):
        nn.cross_entropy(np.zeros((2, 3)), np.array([0, 1, 2]))


def test_cross_entropy_still_skips_rows_marked_minus_one() -> None:
    loss, _ = nn.cross_entropy(np.array([[0.0, 0.0], [5.0, 0.0]]), np.array([0, -1]))
    assert loss == pytest.approx(np.log(2.0), abs=1e-15)  # by hand: only the first row, uniform over 2


def test_self_attention_with_zero_heads_is_refused_not_zero_division() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ArgumentError, match=r"^heads: expected an integer >= 1, got 0"):
            nn.SelfAttention(8, 0, rng=rng())


def test_rnn_with_zero_hidden_width_is_refused_not_zero_division() -> None:
    with pytest.raises(ArgumentError, match=r"^n_hidden: expected an integer >= 1, got 0"):
        nn.RNN(3, 0, rng=rng())
    with pytest.raises(ArgumentError, match=r"^n_in: expected an integer >= 1, got 0"):
        nn.RNN(0, 3, rng=rng())


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: nn.MultiheadSelfAttention(8, -2, rng=rng()), "heads"),
        (lambda: nn.TransformerBlock(8, -2, 4, rng=rng()), "heads"),
        (lambda: nn.MultiheadSelfAttention(0, 1, rng=rng()), "dim"),
        (lambda: nn.TransformerBlock(8, 2, 0, rng=rng()), "hidden"),
        (lambda: nn.Linear(0, 3, rng=rng()), "in_features"),
        (lambda: nn.Linear(3, 0, rng=rng()), "out_features"),
        (lambda: nn.Embedding(0, 3, rng=rng()), "n"),
        (lambda: nn.Embedding(3, 0, rng=rng()), "dim"),
        (lambda: nn.LayerNorm(0), "dim"),
    ],
    ids=["mhsa-heads-negative", "block-heads-negative", "mhsa-dim-zero", "block-hidden-zero", "linear-in-zero",
         "linear-out-zero", "embedding-rows-zero", "embedding-width-zero", "layernorm-width-zero"],
)  # fmt: skip
def test_negative_head_counts_and_zero_widths_are_refused(build: Any, name: str) -> None:
    with pytest.raises(ArgumentError, match=rf"^{name}: expected an integer >= 1"):
        build()


@pytest.mark.parametrize("width", [2.0, True, "4"])
def test_widths_that_are_not_integers_are_refused(width: Any) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^in_features: expected an integer >= 1"):
        nn.Linear(width, 3, rng=rng())


@pytest.mark.parametrize("dtype", [int, np.int32, bool, "float16"])
def test_linear_with_a_dtype_other_than_float32_or_float64_is_refused(dtype: Any) -> None:
    with pytest.raises(ArgumentTypeError, match=r"^dtype: expected float32 or float64"):
        nn.Linear(2, 3, rng=rng(), dtype=dtype)


def test_linear_in_float32_keeps_its_draws() -> None:
    layer = nn.Linear(2, 3, rng=rng(), dtype=np.float32)
    expected = (np.random.default_rng(0).standard_normal((2, 3)) * 0.02).astype(np.float32).T  # the same draw
    np.testing.assert_array_equal(layer.weight.value, expected)
    assert layer.weight.value.dtype == np.float32


@pytest.mark.parametrize(("kwargs", "error"), [({"eps": float("nan")}, ArgumentError), ({"eps": -1e-5}, ArgumentError),
                                               ({"eps": "1e-5"}, ArgumentTypeError)])  # fmt: skip
def test_layer_norm_refuses_a_nan_negative_or_text_eps(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error, match=r"^eps: expected"):
        nn.LayerNorm(4, **kwargs)


def test_linear_refuses_a_negative_std_and_a_rng_that_is_not_a_generator() -> None:
    with pytest.raises(ArgumentError, match=r"^std: expected"):
        nn.Linear(2, 2, rng=rng(), std=-1.0)
    with pytest.raises(ArgumentTypeError, match=r"^rng: expected a numpy.random.Generator"):
        nn.Linear(2, 2, rng=0)  # type: ignore[arg-type]


def test_clip_grad_norm_refuses_a_negative_max_norm() -> None:
    with pytest.raises(ArgumentError, match=r"^max_norm: expected"):
        nn.clip_grad_norm(nn.Linear(2, 2, rng=rng()).parameters(), -1.0)
