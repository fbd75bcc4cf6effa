"""The documentation site, built once for the tests of tests/docs/ (``mkdocs build --strict``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """site/ as ``mkdocs build --strict`` writes it, into a temporary folder; fails on any warning."""
    for tool in ("mkdocs", "material", "mkdocstrings_handlers.python", "markdown_exec", "mkdocs_static_i18n"):
        pytest.importorskip(tool)  # the docs extra (the test extra includes it)
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}  # fmt: skip
    started = time.perf_counter()
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    noise = [line for line in built.stderr.splitlines() if "findfont" in line or "%|" in line]  # fonts, tqdm bars
    assert noise == [], noise[:5]  # a quiet build log: the tutorial's cells draw no bar and no font chatter
    print(f"mkdocs build --strict: {time.perf_counter() - started:.1f} s")
    return site
