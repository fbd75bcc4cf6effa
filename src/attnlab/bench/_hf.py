"""``attnlab bench --hf``: attnlab as transformers' attention backend
(``attn_implementation="attnlab"``) against transformers' own sdpa and eager attention,
in one Llama-shaped model, side by side in one process.

The model is transformers' ``LlamaModel`` (the decoder without its vocabulary head, whose
product would dwarf the attention), random weights from ``torch.manual_seed(0)``, no
download: 4 layers, hidden 256, 4 heads of 64 (no GQA), 512 tokens, causal with no padding
(so that transformers hands the attention ``attention_mask=None`` and ``is_causal``).
Each implementation runs its own deep copy of one model. torch and attnlab's blocked
engines both get 2 threads (``torch.set_num_threads``, ``ATTNLAB_NUM_THREADS``), restored
afterwards; attnlab's recording (``attnlab.hf.trace``) is off.

Figures (ms, the best of ``repeat`` settled runs taken in turns by
:func:`attnlab._timer.best_times`, with a pause before each so that the previous
implementation's threads stop spinning):

- the model's forward (``torch.inference_mode``) by attnlab, sdpa and eager;
- its forward and backward: the loss Σ hidden∘G for a fixed random G (1, tokens, hidden),
  gradients into every parameter, by attnlab and sdpa;
- one layer's attention alone, on the model's shapes (query, key, value (1, 4, 512, 64),
  causal): :func:`attnlab.attention` against ``torch.nn.functional.scaled_dot_product_attention``,
  forward and forward + backward, which says how much of the model's ratio the engine
  itself accounts for: ``engine bound`` = (sdpa's model time + layers × (attnlab's
  attention − sdpa's)) ÷ sdpa's model time, the ratio if only the attention differed.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .._timer import PAUSE_SECONDS, best_times
from .._validation import MissingDependencyError
from ..engine._attention import attention
from ..engine._threads import THREADS_ENV
from ._table import cell, markdown_table, ratio

__all__ = ["LLAMA", "TARGETS", "THREADS", "TOKENS", "format_hf", "hf_rows"]

# a Llama-shaped decoder: Llama's 8/3 MLP ratio (rounded to 16), Llama's vocabulary
LLAMA: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
}
TOKENS = 512
THREADS = 2
TARGETS = {"forward": 1.15, "forward+backward": 1.3}  # attnlab's time ÷ sdpa's, at most (issue 22)


@contextlib.contextmanager
def _threads(torch: Any, threads: int) -> Iterator[None]:
    """torch and attnlab's blocked engines at ``threads`` threads, restored afterwards."""
    torch_threads, attnlab_threads = torch.get_num_threads(), os.environ.get(THREADS_ENV)
    torch.set_num_threads(threads)
    os.environ[THREADS_ENV] = str(threads)
    try:
        yield
    finally:
        torch.set_num_threads(torch_threads)
        if attnlab_threads is None:
            del os.environ[THREADS_ENV]
        else:
            os.environ[THREADS_ENV] = attnlab_threads


def _models(torch: Any, transformers: Any, config: dict[str, Any]) -> dict[str, Any]:
    """One randomly initialised LlamaModel, a deep copy per attention implementation."""
    torch.manual_seed(0)
    base = transformers.LlamaModel(transformers.LlamaConfig(**config))
    models = {}
    for implementation in ("attnlab", "sdpa", "eager"):
        model = copy.deepcopy(base)
        model.set_attn_implementation(implementation)
        models[implementation] = model
    return models


def _model_runs(torch: Any, models: dict[str, Any], tokens: int) -> dict[str, Callable[[], object]]:
    """The timed callables: each model's forward, and attnlab's and sdpa's forward+backward."""
    generator = torch.Generator().manual_seed(0)
    config = models["sdpa"].config
    ids = torch.randint(0, config.vocab_size, (1, tokens), generator=generator)  # (1, tokens)
    cotangent = torch.randn(1, tokens, config.hidden_size, generator=generator)  # G, (1, tokens, hidden)

    def forward(model: Any) -> Callable[[], object]:
        def run() -> None:
            with torch.inference_mode():
                model(ids)

        return run

    def forward_backward(model: Any) -> Callable[[], object]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            (model(ids).last_hidden_state * cotangent).sum().backward()

        return run

    runs = {f"forward {name}": forward(model) for name, model in models.items()}
    runs |= {f"forward+backward {name}": forward_backward(models[name]) for name in ("attnlab", "sdpa")}
    return runs


def _attention_runs(torch: Any, config: dict[str, Any], tokens: int) -> dict[str, Callable[[], object]]:
    """One layer's attention alone, attnlab's engine against torch's SDPA, on the same
    seeded q, k, v and dO (1, H, tokens, hidden / H), causal: forward, forward+backward."""
    heads = config["num_attention_heads"]
    shape = (1, heads, tokens, config["hidden_size"] // heads)  # (B, H, L, E)
    rng = np.random.default_rng(0)
    q, k, v, grad = (rng.standard_normal(shape, dtype=np.float32) for _ in range(4))
    tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_() for x in (q, k, v))
    tgrad = torch.from_numpy(grad)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_forward() -> None:
        with torch.inference_mode():
            sdpa(tq, tk, tv, is_causal=True)

    def torch_backward() -> None:
        tq.grad = tk.grad = tv.grad = None
        sdpa(tq, tk, tv, is_causal=True).backward(tgrad)

    return {
        "attention forward attnlab": lambda: attention(q, k, v, is_causal=True),
        "attention forward sdpa": torch_forward,
        "attention forward+backward attnlab": lambda: attention(q, k, v, is_causal=True).backward(grad),
        "attention forward+backward sdpa": torch_backward,
    }


def _largest_differences(torch: Any, models: dict[str, Any], tokens: int) -> dict[str, float]:
    """attnlab's model against sdpa's on one seeded batch: the largest absolute difference
    of the hidden states, and max |attnlab's − sdpa's| ÷ max |sdpa's| over every
    parameter's gradient (a check that both computed the same thing, not a test)."""
    generator = torch.Generator().manual_seed(1)
    config = models["sdpa"].config
    ids = torch.randint(0, config.vocab_size, (1, tokens), generator=generator)  # (1, tokens)
    cotangent = torch.randn(1, tokens, config.hidden_size, generator=generator)  # (1, tokens, hidden)
    hidden, grads = {}, {}
    for name in ("attnlab", "sdpa"):
        model = models[name]
        model.zero_grad(set_to_none=True)
        output = model(ids).last_hidden_state
        (output * cotangent).sum().backward()
        hidden[name] = output.detach()
        grads[name] = [p.grad for p in model.parameters() if p.grad is not None]
        model.zero_grad(set_to_none=True)
    pairs = list(zip(grads["attnlab"], grads["sdpa"], strict=True))
    largest = max(float(b.abs().max()) for _, b in pairs)
    return {
        "hidden": float((hidden["attnlab"] - hidden["sdpa"]).abs().max()),
        "gradient_relative": max(float((a - b).abs().max()) for a, b in pairs) / largest,
    }


def hf_rows(
    repeat: int = 7, config: dict[str, Any] | None = None, tokens: int | None = None, threads: int | None = None
) -> dict[str, Any]:
    """Every figure of ``attnlab bench --hf`` (see the module's docstring): {config,
    tokens, threads, repeat, ms: {run: ms}, ratios, engine_bound, differences}.

    Args:
        repeat: timed runs of each, the best kept.
        config: the LlamaConfig's fields; None: ``LLAMA``.
        tokens: the sequence's length; None: ``TOKENS``.
        threads: torch's and attnlab's threads; None: ``THREADS``.

    Raises:
        MissingDependencyError: torch or transformers is not installed (``attnlab[hf]``).
        ArgumentError or ArgumentTypeError: ``repeat`` not an integer >= 1.
    """
    try:
        import torch
        import transformers

        from .. import hf  # noqa: F401  (registers attn_implementation="attnlab")
    except ImportError:
        raise MissingDependencyError("bench --hf needs torch and transformers: pip install 'attnlab[hf]'") from None
    config = dict(LLAMA if config is None else config)
    tokens = TOKENS if tokens is None else tokens
    threads = THREADS if threads is None else threads
    with _threads(torch, threads):
        models = _models(torch, transformers, config)
        runs = _model_runs(torch, models, tokens) | _attention_runs(torch, config, tokens)
        ms = best_times(runs, repeat, settle=True, pause=PAUSE_SECONDS, milliseconds=True)
        differences = _largest_differences(torch, models, tokens)
    layers = config["num_hidden_layers"]
    ratios, bound = {}, {}
    for kind in ("forward", "forward+backward"):
        ours, sdpa = ms[f"{kind} attnlab"], ms[f"{kind} sdpa"]
        ratios[f"{kind} attnlab ÷ sdpa"] = ours / sdpa
        extra = ms[f"attention {kind} attnlab"] - ms[f"attention {kind} sdpa"]
        bound[kind] = (sdpa + layers * extra) / sdpa
    ratios["forward attnlab ÷ eager"] = ms["forward attnlab"] / ms["forward eager"]
    return {
        "config": config,
        "tokens": tokens,
        "threads": threads,
        "repeat": repeat,
        "ms": ms,
        "ratios": ratios,
        "engine_bound": bound,
        "differences": differences,
    }


def format_hf(rows: dict[str, Any]) -> str:
    """Markdown: the model's forward and forward+backward by each implementation with
    attnlab's time ÷ each (below 1: attnlab is faster) against the target, then one
    layer's attention alone and the model ratio it accounts for."""
    c, ms = rows["config"], rows["ms"]
    heads = c["num_attention_heads"]
    lines = [
        f"transformers LlamaModel, random weights: {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, "
        f"{heads} heads, {rows['tokens']} tokens, causal, B=1, float32; {rows['threads']} threads (torch and "
        f"attnlab), recording off; best of {rows['repeat']}, interleaved; ratio = attnlab's time ÷ the other's",
        "",
    ]
    header = [
        "pass",
        "attnlab ms",
        "sdpa ms",
        "eager ms",
        "attnlab ÷ sdpa",
        "attnlab ÷ eager",
        "target",
        "engine bound",
    ]
    body = []
    for kind, target in TARGETS.items():
        mine, sdpa, eager = ms[f"{kind} attnlab"], ms[f"{kind} sdpa"], ms.get(f"{kind} eager")
        mine_over_sdpa, mine_over_eager = cell(ratio(mine, sdpa), 2, "×"), cell(ratio(mine, eager), 2, "×")
        bound = cell(rows["engine_bound"][kind], 2, "×")
        body.append(
            [kind, cell(mine), cell(sdpa), cell(eager), mine_over_sdpa, mine_over_eager, f"≤ {target:.2f}×", bound]
        )
    lines += [markdown_table(header, body), ""]
    shape = f"1×{heads}×{rows['tokens']}×{c['hidden_size'] // heads}"
    header = ["one layer's attention alone", "attnlab.attention ms", "torch SDPA ms", "attnlab ÷ SDPA"]
    body = []
    for kind in TARGETS:
        mine, sdpa = ms[f"attention {kind} attnlab"], ms[f"attention {kind} sdpa"]
        body.append([f"{kind}, q k v {shape}, causal", cell(mine, 2), cell(sdpa, 2), cell(ratio(mine, sdpa), 2, "×")])
    lines += [markdown_table(header, body), ""]
    d = rows["differences"]
    lines += [
        "engine bound: the model's ratio if only the attention differed, (sdpa's model time + layers × (attnlab's "
        "attention − SDPA's)) ÷ sdpa's model time",
        f"attnlab vs sdpa: hidden states within {d['hidden']:.1e} (absolute), parameter gradients within "
        f"{d['gradient_relative']:.1e} of the largest",
    ]
    return "\n".join(lines)
