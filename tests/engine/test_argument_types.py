"""Type errors for the engine's settings (issue 24, item 6): ``scale`` "2", True or 1j,
``dropout_p`` "0.1", ``num_threads`` 2.0 or True are refused with a TypeError naming the
argument, at every entry point, where they could otherwise be taken as numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import attnlab as al
from oracles import optional_module, requires

torch = optional_module("torch")

X = np.ones((1, 2, 3, 4))


def forward(**kwargs: Any) -> Any:
    return al.attention(X, X, X, **kwargs)


def functional(**kwargs: Any) -> Any:
    return al.scaled_dot_product_attention(X, X, X, **kwargs)


def functional_backward(**kwargs: Any) -> Any:
    return al.scaled_dot_product_attention_backward(X, X, X, X, **kwargs)


ENTRIES = [forward, functional, functional_backward]
BAD_SCALES = ["2", True, np.True_, 1j, np.complex128(1j)]
BAD_THREADS = [2.0, True, np.True_, np.float64(2.0), "2"]


@pytest.mark.parametrize("scale", BAD_SCALES, ids=repr)
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__)
def test_a_scale_of_text_bool_or_complex_is_a_type_error(entry: Any, scale: Any) -> None:
    with pytest.raises(al.ArgumentTypeError, match=r"^scale: expected a real number, got "):
        entry(scale=scale)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__)
def test_a_dropout_p_of_text_is_a_type_error(entry: Any) -> None:
    with pytest.raises(al.ArgumentTypeError, match=r"^dropout_p: expected a number in \[0, 1\), got '0\.1'"):
        entry(dropout_p="0.1", rng=0)


@pytest.mark.parametrize("num_threads", BAD_THREADS, ids=repr)
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__)
def test_num_threads_of_float_bool_or_text_is_a_type_error(entry: Any, num_threads: Any) -> None:
    with pytest.raises(al.ArgumentTypeError, match=r"^num_threads: expected an integer >= 1, got "):
        entry(num_threads=num_threads, engine="tiled")


def test_backward_of_a_result_keeps_its_checked_thread_count() -> None:
    result = forward(num_threads=np.int64(2), engine="tiled")
    assert result.num_threads == 2 and type(result.num_threads) is int


@requires("torch")
@pytest.mark.parametrize("kwargs", [{"scale": "2"}, {"scale": 1j}, {"dropout_p": "0.1"}], ids=repr)
def test_torch_refuses_the_same_types(kwargs: dict[str, Any]) -> None:
    t = torch.ones(1, 2, 3, 4, dtype=torch.float64)
    with pytest.raises(TypeError):  # the oracle: torch's own refusal
        torch.nn.functional.scaled_dot_product_attention(t, t, t, **kwargs)
