"""``attnlab bench --models``: a randomly initialised model with Qwen2.5-0.5B's shapes run
by attnlab and by transformers (eager and sdpa attention) on the CPU, side by side in
one run.

transformers builds the model and saves it as float32 safetensors in a temporary
directory; both libraries load that file. Figures: the best of ``repeat`` forwards over 32
and 512 tokens, and 64 greedy tokens after a 32-token prompt with the KV cache (the time
of the whole generation). attnlab's peak memory is measured in a process of its own
(``python -m attnlab.bench._models DIR``) that loads the model, runs the 512-token forward
and the generation, against the float32 weight bytes.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from .._timer import best_times
from .._validation import Array, MissingDependencyError
from ._memory import peak_rss_mib
from ._table import markdown_table

__all__ = ["QWEN2_5_0_5B", "format_models", "main", "memory", "run_models"]

# Qwen/Qwen2.5-0.5B's config.json, the shapes that matter
QWEN2_5_0_5B: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
PROMPT = 32


LIBRARIES: dict[str, str | None] = {"attnlab": None, "eager": "eager", "sdpa": "sdpa"}  # transformers' attention


def run_models(
    config: dict[str, Any] = QWEN2_5_0_5B,
    lengths: tuple[int, ...] = (32, 512),
    new_tokens: int = 64,
    repeat: int = 3,
    threads: int | None = None,
) -> dict[str, Any]:
    """Every figure of the models benchmark, as a dict (see the module's docstring):
    {config, weight_bytes, forward: [one row per length], generate, memory}.

    Raises MissingDependencyError without torch or transformers; ArgumentError or
    ArgumentTypeError: ``repeat`` not an integer >= 1."""
    try:
        import torch
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "bench --models compares with transformers: pip install 'attnlab[test]' (torch and transformers)"
        ) from None
    from ..models import load

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="attnlab-bench-") as directory:
        reference = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**config)).eval()
        reference.save_pretrained(directory)
        weight_bytes = sum(p.numel() * 4 for p in reference.parameters())
        ours = load(directory)
        rng = np.random.default_rng(0)
        prompt = rng.integers(0, config["vocab_size"], PROMPT)
        results: dict[str, Any] = {"config": config, "weight_bytes": weight_bytes, "forward": [], "generate": {}}
        for length in lengths:
            results["forward"].append(
                _forward_row(ours, reference, rng.integers(0, config["vocab_size"], length), repeat)
            )
        results["generate"] = _generation(ours, reference, prompt, new_tokens)
        results["memory"] = memory(directory, lengths[-1], new_tokens)
    results["memory"]["ratio"] = results["memory"]["peak_bytes"] / weight_bytes
    return results


def _forward_row(ours: Any, reference: Any, ids: Array, repeat: int) -> dict[str, Any]:
    """One forward over ``ids`` by each library, seconds, the best of ``repeat`` one after
    the other (not settled: as the model comes), and the largest logit difference."""
    import torch

    tensor = torch.tensor(ids[None])  # (1, tokens)
    row: dict[str, Any] = {"tokens": len(ids)}
    with torch.inference_mode():
        for name, implementation in LIBRARIES.items():
            if implementation is not None:
                reference.set_attn_implementation(implementation)
            forward = functools.partial(ours, ids) if implementation is None else functools.partial(reference, tensor)
            row[name] = best_times({name: forward}, repeat, settle=False)[name]
        reference.set_attn_implementation("sdpa")
        expected = reference(tensor).logits.numpy()[0]
    row["max_abs_logit_difference"] = float(np.abs(ours(ids).logits - expected).max())
    return row


def _generation(ours: Any, reference: Any, prompt: Array, new_tokens: int) -> dict[str, Any]:
    """``new_tokens`` greedy tokens after ``prompt`` by each library, one timed generation
    each, seconds; and whether attnlab's tokens are sdpa's."""
    import torch

    tokens: dict[str, Array] = {}

    def generate(name: str, implementation: str | None) -> Callable[[], object]:
        def run() -> None:
            if implementation is None:
                tokens[name] = ours.generate(prompt, new_tokens)
            else:
                reference.set_attn_implementation(implementation)
                tokens[name] = reference.generate(
                    torch.tensor(prompt[None]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                    do_sample=False, pad_token_id=0,
                ).numpy()[0]  # fmt: skip

        return run

    with torch.inference_mode():
        seconds = best_times({name: generate(name, kind) for name, kind in LIBRARIES.items()}, settle=False)
    same = tokens["attnlab"].tolist() == tokens["sdpa"].tolist()
    return {**seconds, "new_tokens": new_tokens, "same_tokens": same}


def memory(directory: str, length: int, new_tokens: int) -> dict[str, Any]:
    """attnlab's peak resident memory in a fresh process: load, one forward, a generation."""
    command = [sys.executable, "-m", "attnlab.bench._models", directory, str(length), str(new_tokens)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout))


def format_models(results: dict[str, Any]) -> str:
    """The Markdown tables of :func:`run_models`'s results."""
    c = results["config"]
    lines = [
        f"Qwen2-shaped model, random weights: {c['num_hidden_layers']} layers, hidden {c['hidden_size']}, "
        f"{c['num_attention_heads']} query / {c['num_key_value_heads']} key-value heads, vocabulary "
        f"{c['vocab_size']}, {results['weight_bytes'] / 2**30:.2f} GiB of float32 weights; ratio = "
        "transformers' time / attnlab's (above 1: attnlab is faster)",
    ]
    header = [
        "tokens",
        "attnlab",
        "transformers eager",
        "transformers sdpa",
        "vs eager",
        "vs sdpa",
        "max abs logit diff",
    ]
    body = [
        [row["tokens"], *(f"{row[name] * 1e3:.0f} ms" for name in LIBRARIES),
         *(f"{row[name] / row['attnlab']:.2f}×" for name in ("eager", "sdpa")),
         f"{row['max_abs_logit_difference']:.1e}"]
        for row in results["forward"]
    ]  # fmt: skip
    lines += ["", markdown_table(header, body, align="---:")]
    g = results["generate"]
    lines += [
        "",
        f"generate {g['new_tokens']} tokens after a {PROMPT}-token prompt (greedy, KV cache): attnlab "
        f"{g['attnlab']:.2f} s, eager {g['eager']:.2f} s ({g['eager'] / g['attnlab']:.2f}×), sdpa "
        f"{g['sdpa']:.2f} s ({g['sdpa'] / g['attnlab']:.2f}×); same tokens as sdpa: {g['same_tokens']}",
        f"attnlab's peak memory (a fresh process: load, {results['forward'][-1]['tokens']}-token forward, "
        f"generation): {results['memory']['peak_bytes'] / 2**30:.2f} GiB = {results['memory']['ratio']:.2f}× "
        "the float32 weight bytes",
    ]
    return "\n".join(lines)


def main(directory: str, length: int, new_tokens: int) -> dict[str, Any]:
    """The memory probe: this process's peak after a load, a forward and a generation."""
    from ..models import load

    model = load(directory)
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, length)
    model(ids)
    model.generate(ids[:PROMPT], new_tokens)
    return {"peak_bytes": peak_rss_mib() * 2**20}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
