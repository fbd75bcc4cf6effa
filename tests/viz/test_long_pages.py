"""Long inputs in the page: the page carries q, k and v (rounded to fit past 16 MB), never a
head's L² weights, and computes a head's weights when it shows it; its limits are bytes,
stated in one place (PAGE_LIMITS). The timings of docs/benchmarks.md ("Long inputs in the
page") are measured here, in headless Chromium, printed and bounded only generously."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from unittest.mock import ANY

import numpy as np
import pytest

import attnlab as al
from attnlab.engine.variants import Rules
from attnlab.trace import ModelTrace
from attnlab.trace._build import build_trace
from attnlab.viz._page import PAGE_LIMITS, PageShape, check_page_size, encoding

WORDS = ["the", "cat", "sat", "on", "the", "mat", "because", "it", "was", "warm", "and", "then", "it", "slept"]
TODAY_128 = 14_436_849  # bytes: main's page of the 128-token case before this change (docs/benchmarks.md)


def gpt2_shaped(length: int, layers: int = 12, heads: int = 12, width: int = 64, seed: int = 0) -> ModelTrace:
    """A GPT-2-small-shaped model's trace: 12 heads of width 64 per layer, causal, float32, its
    q, k, v drawn N(0, 1) per number (scores of a spread like a trained model's, not a random
    init's near-uniform ones), over ``length`` tokens of a list of words."""
    rng = np.random.default_rng(seed)
    tokens = [WORDS[i % len(WORDS)] for i in range(length)]
    entries = {}
    for i in range(layers):
        q, k, v = (rng.standard_normal((heads, length, width), dtype=np.float32) for _ in range(3))
        inputs = np.zeros((length, 1), dtype=np.float32)  # not on the page: only q, k and v are
        entries[i] = build_trace(inputs, q, k, v, scale=None, is_causal=True, tokens=tokens)
    return ModelTrace("gpt2-shaped", list(range(length)), tokens, entries, num_layers=layers, num_heads=heads)


def test_the_fixed_encoding_is_each_vectors_steps_and_n_bit_numbers():
    from attnlab.viz._encoding import binary

    x = np.array([[[1.0, -0.5, 0.25], [0.0, 0.0, 0.0], [3.0, -3.0, 1.0]]])  # (1, 3 vectors, 3)
    raw = base64.b64decode(binary(x, "fixed12"))
    steps = np.frombuffer(raw[:12], "<f4")  # one float32 a vector, first
    m = 2**11 - 1
    np.testing.assert_array_equal(steps, np.float32([1 / m, 0.0, 3 / m]))
    bits = np.unpackbits(np.frombuffer(raw[12:], np.uint8))  # then 12 bits a number, big-endian, no gaps
    assert len(raw) == 12 + (9 * 12 + 7) // 8
    units = bits[: 9 * 12].reshape(9, 12) @ (1 << np.arange(11, -1, -1))
    decoded = (units.reshape(3, 3) - m) * steps[:, None].astype(np.float64)
    # by hand: 1 → m steps; −0.5 → −1023.5 steps, to the even −1024; 0.25 → 511.75 → 512; 3 → m; 1 → 682.33 → 682
    np.testing.assert_array_equal(units.reshape(3, 3), [[2 * m, m - 1024, m + 512], [m] * 3, [2 * m, 0, m + 682]])
    assert np.abs(decoded - x[0]).max() <= 3 / m / 2 * (1 + 1e-6)  # at most half a step off


def test_how_a_page_carries_its_numbers_follows_its_bytes():
    # by hand, GPT-2 small (12 × 12 heads of 64) at 1024 tokens: 1024·12·12·192 = 28,311,552 numbers
    numbers, vectors, rows = 1024 * 12 * 12 * 192, 1024 * 12 * 12 * 3, 1024 * 12  # (2048: 99.4 MB at 10 bits)
    fixed = {bits: (numbers * bits / 8 + 4 * vectors) * 4 / 3 + 12 * rows for bits in (13, 14)}  # base64, masks
    assert fixed[13] <= 64e6 < fixed[14] and numbers * 3 * 4 / 3 > 64e6  # float24 would be 113 MB
    assert encoding(PageShape(1024, 12, 12, (64, 64), model=True, itemsize=4)) == "fixed13"
    # 128 tokens: exact float32 is 18.9 MB, past 16 MB; float24 14.2 MB (as before)
    assert encoding(PageShape(128, 12, 12, (64, 64), model=True, itemsize=4)) == "float24"
    assert encoding(PageShape(16, 12, 12, (64, 64), model=True, itemsize=4)) == "float32"
    assert encoding(PageShape(4096, 12, 1, (64, 64), model=True, itemsize=4)) == "float24"  # 37.7 MB
    assert encoding(PageShape(4096, 12, 1, (64, 64), model=False, itemsize=4)) == "float32"  # a layer: exact
    assert encoding(PageShape(4096, 12, 1, (64, 64), model=False, itemsize=8)) is None  # exact: 100.7 MB


@pytest.mark.parametrize(
    ("shape", "fewer", "message"),
    [
        (PageShape(2048, 12, 12, (64, 64), model=True, itemsize=4), "--layer N or a list of layers (--layer 0,5,-1)",
         "2048 tokens × 12 layers × 12 heads: a page of about 99.4 MB (q, k and v at 10 bits, the least), at most "
         "64 MB (about 7 of its layers fit); use --layer N or a list of layers (--layer 0,5,-1), or fewer tokens"),
        (PageShape(1024, 12, 24, (64, 64), model=True, itemsize=4), "fewer layers",
         "1024 tokens × 24 layers × 12 heads: a page of about 99.4 MB (q, k and v at 10 bits, the least), at most "
         "64 MB (about 15 of its layers fit); use fewer layers, or fewer tokens"),
        (PageShape(4096, 12, 1, (64, 64), model=False, itemsize=8), "",
         "4096 tokens × 12 heads: a page of about 100.7 MB (exact), at most 64 MB; use fewer tokens or heads"),
        (PageShape(4097, 1, 1, (64, 64), model=True, itemsize=4), "",
         "4097 tokens × 1 layer × 1 heads: a head of 16,785,409 cells (L·S) for the page to compute, at most "
         "16,777,216 (4096²); use fewer tokens"),
    ],
)  # fmt: skip
def test_a_page_too_large_says_its_size_the_limit_and_what_to_use_fewer_of(shape, fewer, message):
    with pytest.raises(al.ArgumentError, match=re.escape(message)) as refused:
        check_page_size(shape, "--text", fewer or "fewer layers")
    assert str(refused.value).startswith("--text: expected a page that a browser opens in a few seconds, got ")
    assert "\n" not in str(refused.value)


def test_a_page_whose_exact_numbers_pass_its_limit_is_written_in_float24(monkeypatch):
    # by hand: exact, (16·12·12·192 numbers + 16²·144 raw scores)·4 bytes·4/3 + 12·192 = 2,558,208 bytes;
    # float24 (442,368 + 36,864)·3·4/3 + 2,304 = 1,919,232
    shape = PageShape(16, 12, 12, (64, 64), model=True, itemsize=4)
    assert encoding(shape) == "float32"
    monkeypatch.setitem(PAGE_LIMITS, "page", 2_000_000)  # below its exact bytes, and below "exact" too
    assert encoding(shape) == "float24"


def test_the_limits_are_one_table():
    assert PAGE_LIMITS == {"page": 64 * 10**6, "exact": 16 * 10**6, "head_cells": 4096**2}


def test_a_rounded_pages_data_is_its_q_k_v_rounded_and_it_says_so(monkeypatch):
    from attnlab.viz._page import page_data

    trace = gpt2_shaped(8, layers=2, heads=2, width=4)
    monkeypatch.setitem(PAGE_LIMITS, "exact", 100)  # a small page as a large one: rounded past "exact"
    # by hand: 384 numbers (8 tokens · 2 layers · 2 heads · 12), 96 vectors of 4, the 256 raw scores (float24
    # beside fixed numbers), masks 16 rows of 12 bytes: float24 (384·3 + 256·3)·4/3 + 192 = 2,752 bytes;
    # fixed16 (384·2 + 96·4 + 256·3)·4/3 + 192 = 2,752; fixed15 2,688
    monkeypatch.setitem(PAGE_LIMITS, "page", 2700)
    (first, _) = page_data(trace)["layers"]
    assert first["dtype"] == "fixed15" and first["masks"] == [[[i + 1, 7 - i] if i < 7 else [8] for i in range(8)]]
    assert "fixed15" in al.view(trace)  # the page decodes (in Chromium) and says so (js/controls.js: roundingNote)


def test_a_layer_with_numbers_that_are_not_finite_is_carried_as_float24(monkeypatch):
    from attnlab.viz._page import page_data

    trace = gpt2_shaped(8, layers=2, heads=2, width=4)
    trace.layers[1].Q[0, 0, 0] = np.inf
    monkeypatch.setitem(PAGE_LIMITS, "exact", 100)
    monkeypatch.setitem(PAGE_LIMITS, "page", 2700)  # fixed15, as above
    assert [layer["dtype"] for layer in page_data(trace)["layers"]] == ["fixed15", "float24"]


# ---- in Chromium: the targets of docs/benchmarks.md ----


def rounding_bound(trace, layer: int, head: int, dtype: str) -> np.ndarray:
    """A bound, per query row, on how far the page's weights can be from the trace's, by hand:
    each number of q and k is off by at most δ (fixedN: half its vector's step, max|x| / (2^N − 2);
    float24: |x|·2⁻¹⁷), so a score by at most δs_ij ≤ δq_i·‖k_j‖₁ + δk_j·‖q_i‖₁ + E·δq_i·δk_j (fixed)
    or 2⁻¹⁶·Σ|q_e·k_e| (float24), plus (E + 1)·2⁻²⁴·Σ|q_e·k_e| for float32's own rounding; each z by
    D_i = scale·max_j δs_ij, and a softmax weight w by at most w·(e^(2·D_i) − 1)."""
    one = trace.layers[layer]
    q, k = one.Q[head].astype(np.float64), one.K[head].astype(np.float64)  # (L, E), (S, E)
    E = q.shape[-1]
    magnitude = np.abs(q) @ np.abs(k).T  # Σ_e |q_e·k_e|, (L, S)
    if dtype.startswith("fixed"):
        bits = int(dtype[5:])
        dq, dk = (np.abs(x).max(axis=1) / (2**bits - 2) * (1 + 1e-6) for x in (q, k))  # half a step, (L,), (S,)
        ds = dq[:, None] * np.abs(k).sum(1)[None] + dk[None] * np.abs(q).sum(1)[:, None] + E * dq[:, None] * dk
    else:
        ds = magnitude * 2.0**-16
    ds = ds + (E + 1) * 2.0**-24 * magnitude
    ds[one.masked[head]] = 0
    return np.expm1(2 * one.scale * ds.max(axis=1))  # (L,): |Δw| ≤ w·this


def open_timed(browser, path: Path) -> dict[str, float]:
    """Open the page and time it: "usable" is when the opened head's heatmap, head view and
    steps are drawn and the controls bound (performance.now() at the end of the page's script,
    from the start of navigation); "wall" as Selenium sees it, until the page answers."""
    browser.get("about:blank")  # the page before it gone, its memory freed
    time.sleep(0.5)
    start = time.perf_counter()
    browser.get(path.as_uri())
    while not browser.execute_script("return !!(window.attnlabView && window.attnlabView.ready)"):
        time.sleep(0.01)
    wall = time.perf_counter() - start
    answers = []  # while the thumbnails are drawn: how long the page takes to answer
    for _ in range(5):
        before = time.perf_counter()
        browser.execute_script("return document.getElementById('head').value")
        answers.append(time.perf_counter() - before)
        time.sleep(0.05)
    usable = browser.execute_script("return window.attnlabView.usableAt") / 1000
    return {"wall": wall, "usable": usable, "answer": max(answers)}


def switch_head(browser, head: int) -> float:
    """Seconds the head selector's change takes, from the event to the head drawn."""
    return browser.execute_script(
        "const s = document.getElementById('head'), t = performance.now(); s.value = String(arguments[0]);"
        "s.dispatchEvent(new Event('change')); return (performance.now() - t) / 1000",
        head,
    )


def page_rows(browser, head: int, rows: list[int]) -> np.ndarray:
    """Rows of the shown layer's head ``head``'s weights, as the page computed them."""
    return np.array(browser.execute_script("return attnlabView.weightRows(arguments[0], arguments[1])", head, rows))


@pytest.mark.browser
def test_a_page_of_fixed_numbers_decodes_them_and_computes_the_engines_weights_within_their_rounding(
    browser, tmp_path, monkeypatch
):
    import attnlab.viz._page_size

    trace = gpt2_shaped(40, layers=2, heads=3, width=8, seed=2)
    monkeypatch.setitem(PAGE_LIMITS, "exact", 100)
    monkeypatch.setattr(attnlab.viz._page_size, "GIVEN_SCORES_UP_TO", 0)  # the page computes q·kᵀ from its fixed q, k
    monkeypatch.setitem(PAGE_LIMITS, "page", 17_000)  # by hand: float24 24,000 bytes, fixed13 17,280, fixed12 16,320
    dtype = encoding(PageShape.of(trace))
    assert dtype == "fixed12"
    path = tmp_path / "fixed.html"
    al.view(trace, path, layer=1)
    browser.get(path.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    assert browser.get_log("browser") == []
    summary = browser.find_element("id", "summary").text
    assert f"q, k, v rounded to fit the page: {dtype[5:]} bits a number" in summary, summary
    for head in range(3):
        browser.execute_script("window.attnlabView.setHead(arguments[0])", head)
        shown, expected = page_rows(browser, head, list(range(40))), trace.layers[1].weights[head].astype(np.float64)
        bound = rounding_bound(trace, 1, head, dtype)
        assert np.all(np.abs(shown - expected) <= expected * bound[:, None] + 1e-6)
        assert np.abs(shown - expected).max() > 0  # rounded: not the exact weights
    deadline = time.perf_counter() + 600  # the thumbnails, drawn after the first view: a hang, not a pace
    while browser.execute_script("return window.attnlabView.thumbnails.at") is None:
        assert time.perf_counter() < deadline
        time.sleep(0.1)
    assert browser.execute_script("return window.attnlabView.thumbnails") == {"done": 6, "total": 6, "at": ANY}


@pytest.mark.browser
@pytest.mark.parametrize("rules", [{"is_causal": True}, {"window": (2, 1)}, {"is_causal": True, "window": (3, 0)}])
def test_scores_computed_over_the_unmasked_keys_give_the_engines_weights(browser, tmp_path, monkeypatch, rules):
    from selenium.webdriver.common.by import By

    import attnlab.viz._page_size

    monkeypatch.setattr(attnlab.viz._page_size, "GIVEN_SCORES_UP_TO", 0)  # the page computes every score itself
    rng = np.random.default_rng(3)
    X = rng.standard_normal((11, 8))  # 11 rows: an odd count, the last row without a pair
    trace = al.MultiheadAttention(8, 2, seed=0, dtype=np.float64).trace(X, rules=Rules.of(**rules))
    path = tmp_path / "rules.html"
    al.view(trace, path, head=1, query=6)
    browser.get(path.as_uri())
    assert browser.execute_script("return window.attnlabView.ready") is True
    for head in (0, 1):
        browser.execute_script("window.attnlabView.setHead(arguments[0])", head)
        shown = np.array(browser.execute_script("return window.attnlabView.weights(arguments[0])", head))
        np.testing.assert_allclose(shown.reshape(11, 11), trace.weights[head], rtol=0, atol=1e-12)
    # the step table's q·k of every key, the masked ones too, as the trace has them
    column = [float(td.text) for td in browser.find_elements(By.CSS_SELECTOR, "#steps tr td:nth-child(4)")]
    np.testing.assert_allclose(column, trace.scores[1, 6], atol=5e-5)


CASES = {  # length, layers; its target: usable (s), a head switch (s), page size (bytes)
    "1024 tokens × 12 layers": (1024, 12, 3.0, 0.5, None),  # its data at most PAGE_LIMITS["page"], as every case's
    "4096 tokens × 1 layer": (4096, 1, 3.0, None, None),
    "128 tokens × 12 layers": (128, 12, 1.2, None, TODAY_128),
}


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("case", list(CASES))
def test_a_long_gpt2_shaped_page_opens_usable_and_computes_the_engines_weights(browser, tmp_path, case):
    import os

    length, layers, usable_target, switch_target, most_bytes = CASES[case]
    trace = gpt2_shaped(length, layers)
    path = tmp_path / "long.html"
    al.view(trace, path, layer=0)  # layer 0 (a causal page would open on its strongest previous-token head's)
    size, dtype = path.stat().st_size, encoding(PageShape.of(trace))
    assert dtype is not None
    times = [open_timed(browser, path) for _ in range(2)]  # the second: the file cached, as when read again
    assert browser.get_log("browser") == []  # no error in the console
    switches = [switch_head(browser, h) for h in (5, 9, 11)]
    load = os.getloadavg()[0]
    usable = ", ".join(f"{t['usable']:.2f}" for t in times)
    wall = ", ".join(f"{t['wall']:.2f}" for t in times)
    print(
        f"\n{case} × 12 heads: {size / 1e6:.1f} MB ({dtype}); usable {usable} s (wall {wall} s); answers within "
        f"{max(t['answer'] for t in times):.3f} s while drawing thumbnails; head switch "
        f"{', '.join(f'{s:.2f}' for s in switches)} s; load average {load:.1f}; targets: usable ≤ "
        f"{usable_target} s" + (f", a head switch ≤ {switch_target} s" if switch_target is not None else "")
    )
    data = path.read_text(encoding="utf-8").split('<script id="attnlab-data" type="application/json">')[1]
    assert len(data.split("</script>")[0].encode()) <= PAGE_LIMITS["page"]  # 64 MB of data; the scripts come beside
    if most_bytes is not None:
        assert size <= most_bytes
    # the times are measured and printed, never asserted (a busy machine is no failure):
    # docs/benchmarks.md "Long inputs in the page" holds them against the targets
    rows = sorted({0, 1, length // 2, length - 1, *np.random.default_rng(1).integers(0, length, 5).tolist()})
    bound = rounding_bound(trace, 0, 11, dtype)[rows]  # head 11 of the opened layer, shown last
    expected = trace.layers[0].weights[11][rows].astype(np.float64)
    shown = page_rows(browser, 11, rows)
    assert np.all(np.abs(shown - expected) <= expected * bound[:, None] + 1e-6)
    print(f"weights within {np.abs(shown - expected).max():.2e} of the engine's (bound {bound.max():.2e})")
    browser.execute_script("window.attnlabView.select(arguments[0])", length // 2)  # a query of many keys
    listed = browser.find_elements("css selector", "#steps tr")
    assert len(listed) - 1 == min(length, 512)  # a long query's table: the 512 keys of the largest weights
    shown_output = browser.find_element("id", "output-vector").text.split("[")[1].rstrip("]")
    output = trace.layers[0].output[11, length // 2]  # ⑤ over every key, listed or not (to the 3 decimals shown)
    np.testing.assert_allclose([float(x) for x in shown_output.split(", ")], output, atol=2e-3)
    if length <= 128:  # every thumbnail drawn, in the end
        deadline = time.perf_counter() + 600  # a hang, not a pace
        while browser.execute_script("return window.attnlabView.thumbnails.at") is None:
            assert time.perf_counter() < deadline
            time.sleep(0.2)
        done = browser.execute_script("return window.attnlabView.thumbnails")
        assert done["done"] == done["total"] == 144
        assert browser.find_elements("css selector", "#grid canvas.pending") == []
