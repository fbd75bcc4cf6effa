"""Shared fixtures; the oracles themselves are in oracles.py."""

from __future__ import annotations

import contextlib
import io
import runpy
from typing import Any

import pytest

from oracles import SEED_PROGRAM


@pytest.fixture(scope="session")
def seed_run() -> tuple[str, dict[str, Any]]:
    """The seed program's printed text and its module namespace (attn, X, output, ...)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = runpy.run_path(str(SEED_PROGRAM))
    return out.getvalue(), namespace
