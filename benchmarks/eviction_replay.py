"""The eviction replay's target (issue 46): one policy and budget replayed against the plain
generation, side by side in one run, on SmolLM2-135M-Instruct (its Q4_1 GGUF file), then the
whole table (3 policies × 10, 25, 50 %) and its figures.

The prompt: the first 2,048 tokens of Python's own ``textwrap.py`` (the interpreter's
standard library, the same offline on every machine with this Python). The plain generation
is ``Model.generate`` of 32 greedy tokens after it (the KV cache, no trace); the replay is
``attnlab.analysis.evict`` with one policy and budget, everything included: the prompt's
forward (in chunks, its weights read), the full run's 32 greedy tokens, the full and the
evicted teacher-forced forwards. Each is timed ``--repeat`` times, alternating.

    PYTHONPATH=src python benchmarks/eviction_replay.py --out /tmp/eviction
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import attnlab
from attnlab import analysis
from attnlab.cli._evict import _write
from checkpoints import smollm2_gguf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--generate", type=int, default=32)
    parser.add_argument("--policy", default="h2o", help="the one timed against the plain generation")
    parser.add_argument("--budget", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default="eviction")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(exist_ok=True)
    runner = attnlab.load_model(smollm2_gguf())
    text = Path(textwrap.__file__).read_text(encoding="utf-8")
    ids = runner.ids(text, cut=True)[: args.tokens]
    times: dict[str, list[float]] = {"generation": [], "replay": []}
    for _ in range(args.repeat):
        start = time.perf_counter()
        runner.model.generate(ids, args.generate)
        times["generation"].append(time.perf_counter() - start)
        start = time.perf_counter()
        analysis.evict(runner, ids, policies=[args.policy], budgets=[args.budget], generate=args.generate)
        times["replay"].append(time.perf_counter() - start)
        print(f"generation {times['generation'][-1]:.1f} s, replay {times['replay'][-1]:.1f} s", flush=True)
    load = os.getloadavg()
    start = time.perf_counter()
    result = analysis.evict(runner, ids, generate=args.generate)
    whole = time.perf_counter() - start
    _write(result, out, smollm2_gguf().name)
    report = {
        "prompt": f"the first {len(ids)} tokens of {textwrap.__file__}", "python": sys.version.split()[0],
        "times_s": times, "ratio": min(times["replay"]) / min(times["generation"]),
        "policy": args.policy, "budget": args.budget, "whole_table_s": whole, "load_after_timing": load,
        "load_at_end": os.getloadavg(), "rows": result.rows(),
    }  # fmt: skip
    (out / "timing.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(result.render())
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
