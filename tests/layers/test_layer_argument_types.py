"""Type errors for the layers' settings (issue 24, item 6): ``scale`` "2", True or 1j in
SelfAttention's forward and trace, and ``dropout`` "0.1" in MultiheadAttention."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import attnlab as al
import attnlab.reference
from attnlab import _validation


@pytest.mark.parametrize("scale", ["2", True, np.True_, 1j], ids=repr)
@pytest.mark.parametrize("method", ["forward", "trace"])
def test_self_attention_refuses_a_scale_of_text_bool_or_complex(method: str, scale: Any) -> None:
    layer = al.SelfAttention(4, 2)
    with pytest.raises(al.ArgumentTypeError, match=r"^scale: expected a real number, got "):
        getattr(layer, method)(np.ones((3, 4)), scale=scale)


@pytest.mark.parametrize("dropout", ["0.1", True, 1j], ids=repr)
def test_multihead_attention_refuses_a_dropout_of_text_bool_or_complex(dropout: Any) -> None:
    with pytest.raises(al.ArgumentTypeError, match=r"^dropout: expected a number in \[0, 1\), got "):
        al.MultiheadAttention(8, 2, dropout=dropout)


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: al.SelfAttention(8, 0), al.ArgumentError, r"^d_k: expected an integer >= 1, got 0"),
        (lambda: al.SelfAttention(0, 8), al.ArgumentError, r"^d_model: expected an integer >= 1, got 0"),
        (lambda: al.SelfAttention(8, 2, dtype=int), al.ArgumentTypeError, r"^dtype: expected float32 or float64"),
        (lambda: al.MultiheadAttention(8, 0), al.ArgumentError, r"^num_heads: expected an integer >= 1, got 0"),
        (lambda: al.MultiheadAttention(8, -2), al.ArgumentError, r"^num_heads: expected an integer >= 1, got -2"),
        (lambda: al.MultiheadAttention(0, 1), al.ArgumentError, r"^embed_dim: expected an integer >= 1, got 0"),
        (lambda: al.MultiheadAttention(8, 2, dtype=int), al.ArgumentTypeError, r"^dtype: expected float32 or float64"),
    ],
    ids=["self-attention-d_k-zero", "self-attention-d_model-zero", "self-attention-int-dtype", "mha-heads-zero",
         "mha-heads-negative", "mha-width-zero", "mha-int-dtype"],
)  # fmt: skip
def test_zero_or_negative_widths_and_head_counts_and_an_int_dtype_are_refused(
    build: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build()


def test_weights_beyond_the_machines_memory_are_refused_before_any_is_drawn(monkeypatch) -> None:
    """SelfAttention(10**6, 10**6) would draw 3·10¹² numbers in Python (it ran without end);
    MultiheadAttention(10**6, 1) raised NumPy's bare MemoryError."""

    def never(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("the weights were drawn before their size was checked")

    monkeypatch.setattr(attnlab.reference, "SelfAttention", never)
    with pytest.raises(al.ArgumentError) as caught:
        al.SelfAttention(10**6, 10**6)
    assert caught.value.argument == "d_model, d_k"
    assert str(caught.value).startswith(
        "d_model, d_k: expected weights (Wq, Wk, Wv: d_model × d_k each) that fit in this machine's "
    )
    assert str(caught.value).endswith("of memory, got 3 × 1,000,000 × 1,000,000 numbers drawn in Python, about 48 "
                                      "bytes each: 134,110.5 GiB")  # fmt: skip
    with pytest.raises(al.ArgumentError, match=r"^embed_dim: expected weights .* got 4,000,000,000,000 numbers"):
        al.MultiheadAttention(10**6, 1)
    monkeypatch.setattr(_validation, "machine_memory", lambda: 100_000)  # the bound is the machine's memory
    with pytest.raises(al.ArgumentError, match=r"this machine's 0\.0 GiB of memory, got 3 × 64 × 64 numbers"):
        al.SelfAttention(64, 64)
    al.SelfAttention(64, 64, weights=[np.zeros((64, 64))] * 3)  # given weights are there already: not refused
