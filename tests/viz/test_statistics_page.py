"""The statistics page (viz._statistics_page, _statistics_data, _head_roles): each head's role
against the shares computed here from dense weights, the page's size policy against the byte
count worked by hand, and the page itself (its data block, a token that would
close the block)."""

from __future__ import annotations

import base64
import json
import re
import zlib

import numpy as np
import pytest

from attnlab.engine import attention_statistics
from attnlab.viz._head_roles import ROLES, head_roles
from attnlab.viz._page_size import PAGE_LIMITS
from attnlab.viz._statistics_data import page_top_k, statistics_bytes, statistics_data
from attnlab.viz._statistics_page import past_the_page, render_statistics_page, write_statistics_page
from statistics_cases import model_statistics


def dense_causal_weights(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """softmax(q·kᵀ/√E) over the keys j <= i, (H, L, L) float64."""
    z = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])  # (H, L, L)
    z = np.where(np.tril(np.ones(z.shape[-2:], bool)), z, -np.inf)
    w = np.exp(z - z.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def test_head_roles_shares_are_those_of_the_dense_weights():
    rng = np.random.default_rng(1)
    L, s, k = 700, 4, 8
    q = rng.standard_normal((3, L, 8)) * [[[0.5]], [[2.0]], [[4.0]]]
    keys = rng.standard_normal((3, L, 8))
    q[2, 300:] = keys[2, :-300] * 3  # head 2: queries past 300 look 300 back
    common = rng.standard_normal(8)
    q[1] += common
    keys[1, 40] = common * 3  # head 1: key 40 a sink past the first keys
    P = dense_causal_weights(q, keys)
    roles = head_roles(attention_statistics(q, keys, is_causal=True, top_k=k, sink_keys=s))
    i, j = np.indices((L, L))
    total = P.sum(axis=(1, 2))
    received = P.sum(axis=1)  # (3, L)
    sinks = [sorted(range(L), key=lambda key, h=h: (-received[h, key], key))[:s] for h in range(3)]
    np.testing.assert_array_equal(roles.sinks, sinks)
    assert 40 in sinks[1]
    np.testing.assert_allclose(roles.sink, [received[h, sinks[h]].sum() / total[h] for h in range(3)], rtol=1e-9)
    np.testing.assert_allclose(roles.local, (P * ((i - j >= 0) & (i - j <= 15))).sum(axis=(1, 2)) / total, rtol=1e-9)
    far = []
    for h in range(3):  # each query's top k by weight (ties: the lower key), not a sink key, 256 or more behind it
        rows = [sum(P[h, a, b] for b in np.lexsort((np.arange(L), -P[h, a]))[:k] if b not in sinks[h] and a - b >= 256)
                for a in range(256, L)]  # fmt: skip
        far.append(np.mean(rows))
    np.testing.assert_allclose(roles.far, far, rtol=1e-9)
    assert roles.far[2] > 0.2 and ROLES[roles.role[2]] == "long-range"


def test_heads_made_to_a_role_are_labelled_with_it():
    kinds = [["sink", "local", "long-range", "random"], ["random", "long-range", "sink", "local"]]
    roles = head_roles(model_statistics(1100, kinds).statistics)
    expected = [[{"random": "mixed"}.get(kind, kind) for kind in row] for row in kinds]
    assert [[ROLES[r] for r in row] for row in roles.role] == expected


def test_the_page_fits_by_carrying_fewer_top_keys_as_the_hand_count_says():
    # SmolLM2-135M at 8,192 tokens: 30 × 9 heads, each position 4 bytes and 3 a top key, in base64 (4/3)
    heads, L = 30 * 9, 8192
    assert statistics_bytes(heads, L, 5) == heads * L * (4 + 3 * 5) * 4 // 3
    most = max(k for k in range(9) if heads * L * (4 + 3 * k) * 4 / 3 <= PAGE_LIMITS["page"])
    assert most == 5
    assert page_top_k(heads, L, 8) == 5
    assert page_top_k(heads, L, 3) == 3  # what the statistics keep, when it fits
    with pytest.raises(ValueError, match="statistics: expected a page"):
        page_top_k(heads, 65536 * 4, 8)


def test_the_pages_data_is_the_statistics_packed():
    stats = model_statistics(600, [["sink", "local"]])
    data = statistics_data(stats, opens={"head": 1, "token": 5})
    s = stats.statistics

    L, k = 600, data["top_k"]
    heads = [zlib.decompress(base64.b64decode(text)) for text in data["head_data"]]  # layer 0's heads 0 and 1
    ends = np.cumsum([2 * L, L, L, 2 * L * k, L * k])  # received f16, entropy, sink share, top keys u16, weights
    assert [len(h) for h in heads] == [ends[-1]] * 2

    def unpacked(part: int, dtype: str) -> np.ndarray:
        start = ends[part - 1] if part else 0
        return np.stack([np.frombuffer(h[start : ends[part]], dtype) for h in heads])[None]  # (1, 2, …)

    received = unpacked(0, "<f2")
    np.testing.assert_allclose(received, s.received, rtol=2**-11, atol=2**-25)  # float16: subnormal below 2⁻¹⁴
    keys = unpacked(3, "<u2").reshape(1, 2, L, k)
    np.testing.assert_array_equal(np.where(keys == 0xFFFF, -1, keys.astype(np.int64)), s.top_keys)
    sink = unpacked(2, "u1") / 255
    np.testing.assert_allclose(sink, s.sink_share, atol=1 / 510 + 1e-12)
    entropy = unpacked(1, "u1") / 255 * np.log(600)
    np.testing.assert_allclose(entropy, s.entropy, atol=np.log(600) / 510 + 1e-12)
    np.testing.assert_allclose(np.array(data["distance"]).sum(axis=1), 1, atol=1e-3)  # each head's shares
    assert data["opens"] == {"layer": 0, "head": 1, "token": 5}
    assert [data["roles"]["names"][r] for r in data["roles"]["role"]] == ["sink", "local"]


def test_the_page_holds_its_data_in_a_block_no_token_can_close(tmp_path):
    stats = model_statistics(300, [["sink"]])
    stats.tokens[3] = "</script><b>"
    stats.tokens[4] = "\n\tx\x1b"
    html = render_statistics_page(stats, cap=256)
    block = re.search(r'<script type="application/json" id="attnlab-data">(.*?)</script>', html, re.S)
    assert block is not None and "</script>" not in block[1]
    data = json.loads(block[1])
    assert data["sequence"]["tokens"][3] == "</script><b>"
    assert data["sequence"]["tokens"][4] == "↵⇥x\\x1b"  # a label: ↵, ⇥, other controls escaped
    assert data["text"][4] == "\n\tx\\x1b"  # the text panel: its lines and tabs kept
    assert data["cap"] == 256  # the page's headline says it in its own language (tests/viz/test_statistics_browser.py)
    assert past_the_page(8192, 4096) == (
        "8,192 tokens: past the 4,096-token page of weights, this page shows statistics computed exactly from the tiles"
    )
    assert "__ATTNLAB" not in html
    path = tmp_path / "stats.html"
    write_statistics_page(stats, path, lang="zh")
    assert '"lang":"zh"' in path.read_text(encoding="utf-8").replace(" ", "")


def test_a_page_past_its_size_carries_fewer_top_keys_down_to_what_fits_uncompressed(monkeypatch):
    stats = model_statistics(600, [["random", "local"]])  # 4 top keys a query
    full = statistics_data(stats)
    assert full["top_k"] == 4
    size = sum(map(len, full["head_data"]))
    monkeypatch.setitem(PAGE_LIMITS, "page", size - 1)  # the compressed page of 4 keys is one byte too many
    fewer = statistics_data(stats)
    assert fewer["top_k"] == 3 and sum(map(len, fewer["head_data"])) <= size - 1
    monkeypatch.setitem(PAGE_LIMITS, "page", statistics_bytes(2, 600, 1))  # 1 key fits uncompressed
    assert statistics_data(stats)["top_k"] >= 1


def test_a_text_past_the_pages_key_indices_is_refused_by_name():
    import dataclasses

    from attnlab import ArgumentError

    small, n = model_statistics(8, [["sink"]]), 0xFFFF  # 65,535 tokens: uint16's last value, the page's "no key"
    s = small.statistics
    grown = {  # every per-query and per-key array of 8 made one of n (zeros: only the shapes matter here)
        f.name: np.zeros((1, 1, n, *getattr(s, f.name).shape[3:]), getattr(s, f.name).dtype)
        for f in dataclasses.fields(s)
        if isinstance(getattr(s, f.name), np.ndarray) and getattr(s, f.name).shape[:3] == (1, 1, 8)
    }
    past = dataclasses.replace(
        small, statistics=dataclasses.replace(s, **grown), ids=list(range(n)), tokens=["t"] * n,
        special=[False] * n, template=[False] * n, parts=[""] * n if small.parts else small.parts,
    )  # fmt: skip
    with pytest.raises(
        ArgumentError, match=r"^statistics: expected at most 65,534 tokens on a page, got 65,535 tokens"
    ):
        statistics_data(past)
