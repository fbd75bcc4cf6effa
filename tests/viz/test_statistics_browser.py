"""The statistics page in a real browser (headless Chromium driven by Selenium): it opens with
no error in the console, a click on a profile of the grid selects that head, a click on the
text goes to the token and draws its top keys (those the engine found), and the wheel zooms."""

from __future__ import annotations

import pytest

pytest.importorskip("selenium")

from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from attnlab.viz._statistics_page import write_statistics_page
from helpers import open_page
from statistics_cases import model_statistics

pytestmark = pytest.mark.browser

READY = "window.attnlabStatistics && window.attnlabStatistics.ready"  # its opened head decoded and drawn


def wait_for(browser, expression: str) -> None:
    """Until the JavaScript ``expression`` is true (a head is drawn once its numbers are inflated: a promise)."""
    WebDriverWait(browser, 10).until(lambda b: b.execute_script(f"return !!({expression})"))


@pytest.fixture(scope="module")
def stats():
    return model_statistics(700, [["sink", "local", "long-range"], ["local", "random", "sink"]])


def test_the_page_opens_and_a_click_on_a_profile_selects_its_head(browser, tmp_path, stats):
    path = tmp_path / "stats.html"
    write_statistics_page(stats, path, cap=4096)
    open_page(browser, path, READY, timeout=10)
    assert browser.get_log("browser") == []  # no error in the console
    assert browser.find_element(By.ID, "headline").text.startswith("700 tokens: past the 4,096-token page")
    grid = browser.execute_script("return window.attnlabStatistics.grid")
    canvas = browser.find_element(By.ID, "profiles")
    x = grid["left"] + 2.5 * grid["cellW"] - canvas.size["width"] / 2  # head 2, layer 1
    y = grid["top"] + 1.5 * grid["cellH"] - canvas.size["height"] / 2
    ActionChains(browser).move_to_element_with_offset(canvas, int(x), int(y)).click().perform()
    wait_for(browser, "window.attnlabStatistics.layer === 1 && window.attnlabStatistics.head === 2")
    assert browser.find_element(By.ID, "head-title").text.startswith("layer 1, head 2: sink")
    assert browser.get_log("browser") == []


def test_a_click_on_the_text_goes_to_the_token_and_draws_its_top_keys(browser, tmp_path, stats):
    path = tmp_path / "stats.html"
    write_statistics_page(stats, path, opens={"layer": 0, "head": 2})
    open_page(browser, path, READY, timeout=10)
    token = browser.find_element(By.CSS_SELECTOR, '#text span[data-i="650"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'nearest'})", token)
    token.click()
    assert browser.execute_script("return window.attnlabStatistics.token") == 650
    assert "selected" in token.get_attribute("class")
    expected = [int(j) for j in stats.statistics.top_keys[0, 2, 650] if j >= 0]
    shown = browser.execute_script("return window.attnlabStatistics.topKeys().map(([key]) => key)")
    assert shown == expected and 650 - 512 in shown  # the long-range head's key, 512 back
    for key in expected:
        assert "key" in browser.find_element(By.CSS_SELECTOR, f'#text span[data-i="{key}"]').get_attribute("class")
    box = browser.find_element(By.ID, "text")
    top = browser.execute_script("return arguments[0].scrollTop", box)
    assert top > 0  # the text scrolled to the token


def test_the_wheel_zooms_the_charts_about_the_pointer(browser, tmp_path, stats):
    path = tmp_path / "stats.html"
    write_statistics_page(stats, path)
    open_page(browser, path, READY, timeout=10)
    assert browser.execute_script("return window.attnlabStatistics.range") == [0, 700]
    canvas = browser.find_element(By.ID, "received")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, -100).perform()  # one notch in
    start, stop = browser.execute_script("return window.attnlabStatistics.range")
    assert stop - start == 560 and start <= 350 < stop  # 0.8 of the text, about its middle
    assert browser.get_log("browser") == []
