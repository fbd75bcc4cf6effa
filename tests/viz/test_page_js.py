"""The page's script's pure modules (assets/js/: decoding, maths, state, i18n) under node's own test runner
(tests/viz/js/*.test.js): the numbers they check are computed here with NumPy (the encodings of
viz._encoding applied to known arrays, softmax and the score rules on given scores, and the engine's
weights of two traces) and handed to node as one JSON file (ATTNLAB_JS_CASES)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

import attnlab as al
from attnlab.engine.variants import Rules
from attnlab.viz._encoding import binary, mask_runs
from attnlab.viz._statistics_data import statistics_data
from attnlab.viz._views import ALIGNMENT_RULE

JS_TESTS = Path(__file__).parent / "js"


def listed(x: np.ndarray) -> list[object]:
    """Numbers for JSON: NaN as null, ±∞ as "inf" and "-inf"."""
    return [None if np.isnan(v) else ("inf" if v > 0 else "-inf") if np.isinf(v) else float(v) for v in x.ravel()]


def float24(x: np.ndarray) -> np.ndarray:
    """float32 rounded to nearest with 16 mantissa bits, as the definition in _encoding.binary says."""
    bits = np.where(np.isnan(x), np.nan, x).astype("<f4").view("<u4")
    near_top = (bits & 0x7FFFFFFF) >= 0x7F7FFF80
    return (np.where(near_top, bits, bits + 0x80) & 0xFFFFFF00).astype("<u4").view("<f4")


def fixed(x: np.ndarray, bits: int) -> np.ndarray:
    """Each vector (last axis) as whole steps of its largest |x| / (2^(N−1) − 1), float32 step."""
    most = 2 ** (bits - 1) - 1
    step = (np.abs(x).max(axis=-1, keepdims=True) / most).astype(np.float32).astype(np.float64)
    units = np.clip(np.rint(x / np.where(step > 0, step, 1)), -most, most)
    return (units * step).astype(np.float32)


def decoding_cases() -> dict[str, object]:
    rng = np.random.default_rng(0)
    special = np.array([[1.5, -2.25, np.nan, np.inf], [-np.inf, 0.0, 1e-30, 3.4e38]])
    vectors = rng.standard_normal((3, 5)) * [[1.0], [1e-3], [40.0]]
    arrays = [
        ("specials", "float64", special, special),
        ("specials", "float32", special, special.astype(np.float32)),
        ("specials", "float24", special, float24(special)),
        ("vectors", "fixed16", vectors, fixed(vectors, 16)),
        ("vectors", "fixed12", vectors, fixed(vectors, 12)),
        ("vectors", "fixed10", vectors, fixed(vectors, 10)),
        ("zero vectors", "fixed13", np.zeros((2, 3)), np.zeros((2, 3))),
    ]
    masks = {
        "causal": np.triu(np.ones((5, 5), dtype=bool), 1)[None],
        "a window and a row that starts masked": np.array([[[0, 0, 1, 1], [1, 0, 0, 1], [1, 1, 1, 1]]], dtype=bool),
        "one per head": np.array([np.eye(3, dtype=bool), ~np.eye(3, dtype=bool)]),
    }
    return {
        "arrays": [
            {"name": name, "dtype": dtype, "width": x.shape[-1], "text": binary(x, dtype), "expected": listed(y)}
            for name, dtype, x, y in arrays
        ],
        "masks": [
            {
                "name": name,
                "S": m.shape[-1],
                "runs": mask_runs(m),
                "expected": m.astype(int).reshape(len(m), -1).tolist(),
            }
            for name, m in masks.items()
        ],
    }


def softmax(z: np.ndarray, masked: np.ndarray, sink: float | None) -> np.ndarray:
    """softmax over the unmasked keys of each row, the sink's logit in the sum; a row all masked: 0."""
    z = np.where(masked, -np.inf, z)
    top = np.maximum(z.max(axis=-1, keepdims=True), -np.inf if sink is None else sink)
    safe = np.where(np.isfinite(top), top, 0.0)
    e = np.where(masked, 0.0, np.exp(z - safe))
    total = e.sum(axis=-1, keepdims=True) + (0.0 if sink is None else np.exp(sink - safe))
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def hand_layer(given: bool, rules: bool) -> dict[str, object]:
    """A layer of the page's JSON built by hand (float64), its weights and z by NumPy."""
    rng = np.random.default_rng(1 + given + 2 * rules)
    H, L, E, Ev, scale = 2, 5, 3, 2, 0.7
    q, k, v = rng.standard_normal((H, L, E)) * 2, rng.standard_normal((H, L, E)), rng.standard_normal((H, L, Ev))
    causal = np.triu(np.ones((L, L), dtype=bool), 1)
    window = ~(np.abs(np.subtract.outer(np.arange(L), np.arange(L))) <= 1)
    window[2] = True  # a row all masked
    masked = np.array([causal, window]) if rules else causal[None]
    softcap, bias, sinks = (2.0, rng.standard_normal((H, L, L)), [0.3, -1.0]) if rules else (None, None, None)
    scores = q @ k.transpose(0, 2, 1)
    z = scale * scores
    if softcap is not None:
        z = softcap * np.tanh(z / softcap)
    if bias is not None:
        z = z + bias
    weights = [softmax(z[h], masked[h % len(masked)], None if sinks is None else sinks[h]) for h in range(H)]
    layer = {
        "name": "", "index": None, "kind": "self", "rows": 0, "cols": 0, "scale": scale, "heads": H, "d_k": E,
        "d_v": Ev, "dtype": "float64", "single": False, "masks": mask_runs(masked),
        **{name: binary(x, "float64") for name, x in (("q", q), ("k", k), ("v", v))},
        "scores": binary(scores, "float64") if given else None,
        "bias": None if bias is None else binary(bias, "float64"),
        "bias_heads": 0 if bias is None else H, "softcap": softcap, "sinks": sinks, "rules": "",
    }  # fmt: skip
    name = f"a hand layer ({'given scores' if given else 'scores computed'}, {'rules' if rules else 'causal'})"
    sequences = [{"name": "tokens", "tokens": list("abcde"), "special": [False] * L, "parts": [""] * L}]
    return {
        "name": name,
        "layer": layer,
        "sequences": sequences,
        "scale": scale,
        "tolerance": 1e-12,
        "weights": [listed(w) for w in weights],
        "scores": [listed(s) for s in scores],
        "z": listed(z[0]),
    }


def engine_layer(monkeypatch, given: bool, rules: dict[str, object]) -> dict[str, object]:
    """A trace's page data and the engine's own weights."""
    import attnlab.viz._page_size
    from attnlab.viz._page import page_data

    monkeypatch.setattr(attnlab.viz._page_size, "GIVEN_SCORES_UP_TO", 2**18 if given else 0)
    X = np.random.default_rng(3).standard_normal((7, 8))
    trace = al.MultiheadAttention(8, 2, seed=0, dtype=np.float64).trace(X, rules=Rules.of(**rules))
    data = page_data(trace)
    weights, scores = np.asarray(trace.weights), np.asarray(trace.scores)
    return {
        "name": f"the engine's trace ({rules}, {'given scores' if given else 'scores computed'})",
        "layer": data["layers"][0],
        "sequences": data["sequences"],
        "scale": trace.scale,
        "tolerance": 1e-12,
        "weights": [listed(w) for w in weights],
        "scores": [listed(s) for s in scores],
    }


def length_cases() -> dict[str, object]:
    """A statistics page's data (viz._statistics_data) and, for three of its heads, the engine's statistics
    themselves: the top keys without the −1 past the keys a query sees."""
    from statistics_cases import model_statistics

    stats = model_statistics(600, [["sink", "local"], ["long-range", "random"]])
    page = statistics_data(stats)
    heads = [(0, 0), (0, 1), (1, 0)]
    s, k = stats.statistics, page["top_k"]
    top = [[[int(j) for j in row[:k] if j >= 0] for row in s.top_keys[layer, head]] for layer, head in heads]
    return {
        "page": page,
        "expected": {
            "heads": heads,
            "received": [s.received[layer, head].tolist() for layer, head in heads],
            "entropy": [s.entropy[layer, head].tolist() for layer, head in heads],
            "sink_share": [s.sink_share[layer, head].tolist() for layer, head in heads],
            "top_keys": top,
            "top_weights": [s.top_weights[layer, head, :, :k].tolist() for layer, head in heads],
        },
    }


def test_the_page_scripts_pure_modules_pass_their_node_tests(tmp_path, monkeypatch):
    node = shutil.which("node")
    assert node, "the page's script's tests need node (Debian's nodejs, as the README's test command installs it)"
    layers = [hand_layer(given, rules) for given in (True, False) for rules in (False, True)]
    layers += [engine_layer(monkeypatch, given, {"is_causal": True}) for given in (True, False)]
    layers.append(engine_layer(monkeypatch, False, {"window": (2, 1)}))
    length_scaled = {"is_causal": True, "window": (3, 0), "length_scale": [0.8, 1.7]}  # m_i = s_h·log n_i
    layers += [engine_layer(monkeypatch, given, length_scaled) for given in (True, False)]
    cases = {
        "decoding": decoding_cases(),
        "maths": {"layers": layers, "modified": [layers[1]]},
        "i18n": {"alignment_rule": ALIGNMENT_RULE},  # the page's data, which i18n.js translates too
        "length": length_cases(),
    }
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases, allow_nan=False), encoding="utf-8")
    files = sorted(str(p) for p in JS_TESTS.glob("*.test.js"))
    names = {Path(f).name for f in files}
    assert names >= {f"{n}.test.js" for n in ("answer", "decoding", "i18n", "length_state", "maths", "state")}, names
    run = subprocess.run(
        [node, "--test", *files], env={**os.environ, "ATTNLAB_JS_CASES": str(path)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "# fail 0" in run.stdout and "# pass 0" not in run.stdout, run.stdout


def test_the_json_helpers_encode_nan_and_infinity():
    assert listed(np.array([np.nan, np.inf, -np.inf, 1.0])) == [None, "inf", "-inf", 1.0]
    assert base64.b64decode(binary(np.array([1.0]), "float64")) == np.array([1.0]).tobytes()
