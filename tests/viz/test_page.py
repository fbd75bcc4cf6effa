"""The page's HTML and data, checked without a browser (tests/viz/test_view.py opens it in one)."""

from __future__ import annotations

from importlib.resources import files

import numpy as np
import pytest

import attnlab as al
from attnlab.cli import main


def test_view_returns_the_page_or_writes_it(tmp_path):
    trace = al.SelfAttention(3, 2).trace(np.eye(3))
    page = al.view(trace)
    assert page is not None and page.startswith("<!DOCTYPE html>")
    assert al.view(trace, tmp_path / "t.html") is None and (tmp_path / "t.html").read_text() == page
    with pytest.raises(TypeError, match=r"trace: expected an attnlab\.Trace or attnlab\.models\.ModelTrace, got dict"):
        al.view({})


def test_the_page_is_self_contained(tmp_path):
    page = tmp_path / "p.html"
    assert main(["view", "--text", "a b", "-o", str(page)]) == 0
    html = page.read_text()
    assert (
        "<script src" not in html
        and "<link" not in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )


def test_page_data_has_a_head_axis_for_one_head_or_many():
    import base64

    from attnlab.viz._page import page_data

    for trace in (
        al.SelfAttention(4, 3).trace(np.eye(4)),
        al.MultiheadAttention(4, 1, seed=0, dtype=np.float64).trace(np.eye(4)),
        al.MultiheadAttention(4, 2, seed=0, dtype=np.float64).trace(np.eye(4)),
    ):
        (data,) = page_data(trace)["layers"]
        assert data["heads"] == trace.num_heads and data["dtype"] == "float64"
        scores = np.frombuffer(base64.b64decode(data["scores"]), "<f8").reshape(trace.num_heads, 4, 4)
        np.testing.assert_array_equal(scores, trace.scores.reshape(scores.shape))  # exact, as the trace has them
        q = np.frombuffer(base64.b64decode(data["q"]), "<f8")
        assert q.size == trace.num_heads * 4 * data["d_k"]


def test_overflow_is_not_mistaken_for_a_mask():
    from attnlab.viz._page import page_data

    trace = al.SelfAttention(2, 2).trace(np.array([[1e200, 1e200], [1e200, -1e200]]))
    assert page_data(trace)["layers"][0]["masked"] == ["00", "00"]


def test_the_page_inlines_its_assets_and_leaves_tokens_that_name_a_slot_as_data():
    assets = files("attnlab.viz") / "assets"
    slots = ["__ATTNLAB_STYLE__", "__ATTNLAB_SCRIPT__", "__ATTNLAB_DATA__"]
    page = al.view(al.SelfAttention(3, 2).trace(np.eye(3), tokens=slots))
    assert page is not None
    csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:"
    assert f'<meta http-equiv="Content-Security-Policy" content="{csp}">' in page
    for name, tag in (("page.css", "style"), ("page.js", "script")):
        text = (assets / name).read_text(encoding="utf-8")
        assert text in page and f"</{tag}" not in text.lower()  # inline, and cannot end its own block
    assert [page.count(slot) for slot in slots] == [1, 1, 1]  # each token once, in the data; no slot left
