"""The one headless Chromium of the page's browser tests (Debian's chromium and
chromium-driver, as the README's test command installs them), one per test module."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="module")
def browser():
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
