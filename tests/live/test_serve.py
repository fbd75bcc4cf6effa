"""attnlab serve, the live page: typed in a real browser (headless Chromium), its weights
against `attnlab trace --format json` for the same text; two texts typed quickly, two
pages at once; the refusals (no token, a foreign Host or Origin, a body too large); a
text the model cannot take; Ctrl-C. Each test starts its server on a free port and stops it."""

from __future__ import annotations

import http.client
import json
import sys
from urllib.parse import urlsplit

import numpy as np
import pytest
from interrupting import interrupted, spawned

from attnlab import models, serve
from attnlab.live import MAX_BODY, Request, Session
from helpers import run_cli

pytestmark = pytest.mark.browser

SENTENCE = "小明是个运动达人，他平时很爱打篮球"
SHE = "小明是个运动达人，她平时很爱打篮球"


@pytest.fixture
def server(coref):
    with serve(coref, block=False) as running:
        yield running


def _wait(browser, condition: str, timeout: float = 60) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(browser, timeout).until(lambda b: b.execute_script(f"return !!({condition})"))


def _open(browser, url: str) -> None:
    """The live page at ``url``, its first page drawn."""
    browser.get(url)
    _wait(browser, "window.attnlabServe && window.attnlabServe.answers >= 1")


def _type(browser, text: str, enter: bool = True) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = browser.find_element(By.ID, "text")
    box.clear()
    box.send_keys(text + (Keys.ENTER if enter else ""))


def _in_page(browser, script: str):
    """``script``'s value in the frame's page (attnlab view's, window.attnlabView)."""
    return browser.execute_script(
        "const view = document.getElementById('page').contentWindow.attnlabView; return view && view.ready ? "
        f"({script}) : null"
    )


def _redrawn(browser, text: str) -> None:
    _wait(browser, f"window.attnlabServe.shown && window.attnlabServe.shown.text === {json.dumps(text)} && "
          "!window.attnlabServe.busy && document.getElementById('page').contentWindow.attnlabView?.ready")  # fmt: skip


def test_a_typed_text_redraws_with_the_weights_attnlab_trace_gives_on_the_same_head(server, browser, capsys):
    _open(browser, server.url)
    assert browser.execute_script("return document.getElementById('flow-limit').textContent") == (
        ""  # flow's limit on 2 layers, ⌊√(6·64² / 2)⌋ = 110 by hand, is past builtin:coref's 64 positions: unsaid
    )
    assert _in_page(browser, "[view.layer, view.head]") == [1, 0]  # builtin:coref opens on its answering head
    _in_page(browser, "view.setHead(2)")
    _type(browser, SHE)
    _redrawn(browser, SHE)
    assert _in_page(browser, "[view.layer, view.head]") == [1, 2]  # the reader's head, kept
    code, out, _ = run_cli(
        capsys, "trace", "--model", "builtin:coref", "--text", SHE, "--layer", "all", "--format", "json"
    )
    assert code == 0
    expected = json.loads(out)["layers"]
    for layer in (0, 1):
        _in_page(browser, f"view.useLayer({layer})")
        for head in range(4):
            shown = np.array(_in_page(browser, f"view.weights({head})"))
            np.testing.assert_allclose(shown, np.ravel(expected[str(layer)]["weights"][head]), atol=2e-6)
    _in_page(browser, "view.useLayer(1)")
    with_her = "小明是个运动达人，小红是个画家，她平时很爱画画"
    _type(browser, with_her)  # the query left where the page opened: the new page opens on its own, the new pronoun
    _redrawn(browser, with_her)
    assert _in_page(browser, "[view.layer, view.head, view.query]") == [1, 2, 1 + with_her.index("她")]


@pytest.mark.slow
def test_two_texts_typed_quickly_show_the_second(server, browser):
    _open(browser, server.url)
    second = "小红是个画家"
    _type(browser, SENTENCE + "，小红是个画家，她平时很爱画画")
    _type(browser, second)
    _redrawn(browser, second)  # the worker answers in order: the first request's answer (or 409) came before
    assert browser.execute_script("return window.attnlabServe.shown.text") == second
    assert _in_page(browser, "view.lengths") == [len(second) + 2] * 2  # [CLS] 小 红 … [SEP]


@pytest.mark.slow
def test_two_pages_at_once_each_get_their_own_answers(server, browser):
    first, second = "小明爱打篮球", "小红是个音乐迷，她平时很爱弹钢琴"
    _open(browser, server.url)
    tab = browser.current_window_handle
    browser.switch_to.new_window("tab")
    _open(browser, server.url)
    other = browser.current_window_handle
    _type(browser, second)
    browser.switch_to.window(tab)
    _type(browser, first)
    _redrawn(browser, first)
    assert _in_page(browser, "view.lengths") == [len(first) + 2] * 2
    browser.switch_to.window(other)
    _redrawn(browser, second)
    assert _in_page(browser, "view.lengths") == [len(second) + 2] * 2
    browser.close()
    browser.switch_to.window(tab)


@pytest.mark.slow
def test_a_text_the_model_cannot_take_is_a_message_in_the_page(server, browser):
    _open(browser, server.url)
    _type(browser, "好" * 600)  # builtin:coref has 64 positions
    _wait(browser, "window.attnlabServe.errors >= 1 && !window.attnlabServe.busy")
    status = browser.execute_script("return document.getElementById('status').textContent")
    assert status.startswith("text: ") and "positions" in status and "Traceback" not in status
    _type(browser, SENTENCE)  # and the page goes on
    _redrawn(browser, SENTENCE)


@pytest.mark.slow
def test_a_click_on_a_head_ablates_it_and_the_page_shows_its_effect_where_the_reader_was(tmp_path, browser):
    from selenium.webdriver.common.by import By

    from attnlab.analysis import ablate
    from checkpoints import tiny_checkpoint_with_tokenizer

    model = models.load(str(tiny_checkpoint_with_tokenizer(tmp_path)))
    text = "The cat sat on the mat"
    with serve(model, text=text, block=False) as running:
        _open(browser, running.url)
        browser.find_element(By.ID, "ablate-mode").click()
        browser.switch_to.frame("page")
        cell = browser.find_element(By.CSS_SELECTOR, "#grid canvas[data-layer='1'][data-head='3']")
        cell.click()
        place = browser.execute_script("return window.scrollY")  # the page scrolled to the head it opened
        assert place > 0
        browser.switch_to.default_content()
        _wait(browser, "window.attnlabServe.answers >= 2 && !window.attnlabServe.busy")
        note = browser.find_element(By.ID, "answer-note").text
        _wait(browser, f"document.getElementById('page').contentWindow.scrollY === {place}", 10)  # not at its top
    expected = ablate(model, text, heads=[(1, 3)]).effect[1, 3]
    assert "ablated (zero) heads, KL" in note and f"1.3: {expected:.4f}" in note


def _request(server, method: str, path: str, body: bytes | None = None, **headers: str) -> tuple[int, dict]:
    address = urlsplit(server.url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
    for name, value in {"Host": address.netloc, **headers}.items():
        if value is not None:
            connection.putheader(name, value)
    if body is not None and "Content-Length" not in headers:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body if body is not None and "Content-Length" not in headers else None)
    response = connection.getresponse()
    answer = response.read()
    connection.close()
    return response.status, json.loads(answer) if response.getheader("Content-Type", "").startswith(
        "application/json"
    ) else {}


def _other(character: str) -> str:
    """A character of the token's alphabet other than ``character``."""
    return "a" if character != "a" else "b"


def test_no_token_a_foreign_host_or_origin_and_a_body_too_large_are_refused_and_it_keeps_serving(server):
    token = server.token
    body = json.dumps({"client": "test", "number": 1, "text": SENTENCE}).encode()
    good = {"X-Attnlab-Token": token, "Content-Type": "application/json"}
    wrong_last, wrong_first = token[:-1] + _other(token[-1]), _other(token[0]) + token[1:]
    assert token not in (wrong_last, wrong_first)
    assert _request(server, "GET", "/")[0] == 403
    assert _request(server, "GET", "/?token=" + wrong_last)[0] == 403
    assert _request(server, "POST", "/api/page", body, **{"Content-Type": "application/json"})[0] == 403
    assert _request(server, "POST", "/api/page", body, **{**good, "X-Attnlab-Token": wrong_first})[0] == 403
    assert _request(server, "GET", f"/?token={token}", Host="attacker.example:80")[0] == 403  # DNS rebinding
    refused = _request(server, "POST", "/api/page", body, **good, Origin="http://attacker.example")
    assert refused == (403, {"error": "the Host or Origin header does not name this server"})
    status, answer = _request(server, "POST", "/api/page", b"", **good, **{"Content-Length": str(MAX_BODY + 1)})
    assert (status, answer) == (
        413,
        {"error": f"Content-Length: expected at most {MAX_BODY:,} bytes, got {MAX_BODY + 1}"},
    )
    assert _request(server, "GET", f"/?token={token}")[0] == 200
    status, answer = _request(server, "POST", "/api/page", body, **good, Origin=f"http://127.0.0.1:{server.port}")
    assert status == 200 and answer["page"].startswith("<!DOCTYPE html>")


def test_a_malformed_request_is_a_message_not_a_traceback(server):
    good = {"X-Attnlab-Token": server.token, "Content-Type": "application/json"}
    status, answer = _request(server, "POST", "/api/page", b"{not json", **good)
    assert (status, answer) == (422, {"error": "request: expected a JSON object, got text that is not JSON"})
    body = json.dumps({"client": "t", "number": 1, "text": SENTENCE, "generate": -1}).encode()
    assert _request(server, "POST", "/api/page", body, **good) == (
        422,
        {"error": "generate: expected a whole number ≥ 0, got -1"},
    )


def test_the_server_stops_on_sigint_at_once():
    with spawned([sys.executable, "-m", "attnlab", "serve"]) as process:
        line = process.stdout.readline()
        assert line.startswith("attnlab serve: the article's SelfAttention"), line + process.stderr.read()
        url = line.split(" at ")[1].strip()
        assert urlsplit(url).hostname == "127.0.0.1"
        process.stdout.readline()  # Ctrl-C stops it
        waited = interrupted(process)
    assert process.returncode == 0 and process.stdout.read() == "attnlab serve: stopped\n"
    assert waited < 10  # at once: 0.1 s on an idle 2-core machine; 10 s leaves room for a loaded one


def test_another_host_than_this_machine_is_warned_of_and_reached_by_its_addresses_not_by_a_name(coref, capsys):
    with serve(coref, host="0.0.0.0", block=False) as running:
        port = running.port
        assert running.allowed({"Host": f"192.0.2.7:{port}", "Origin": f"http://192.0.2.7:{port}"})
        assert running.allowed({"Host": f"[2001:db8::1]:{port}"}) and running.allowed({"Host": f"localhost:{port}"})
        assert not running.allowed({"Host": f"attacker.example:{port}"})  # a name rebound to this machine
        assert not running.allowed({"Host": f"192.0.2.7:{port + 1}"})
        assert not running.allowed({"Host": f"192.0.2.7:{port}", "Origin": f"http://attacker.example:{port}"})
    err = capsys.readouterr().err
    assert err.startswith("attnlab serve: warning: listening on 0.0.0.0, which other machines can reach")


@pytest.mark.slow  # 14 s on 2 shared cores: torch and transformers imported, a tokenizer trained
def test_the_session_generates_as_transformers_greedy_generate_does(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from checkpoints import tiny_checkpoint_with_tokenizer

    folder = tiny_checkpoint_with_tokenizer(tmp_path)
    answer = Session(models.load(str(folder))).answer(Request("The cat sat on", generate=5))
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("The cat sat on", return_tensors="pt").input_ids
    with torch.no_grad():
        greedy = reference.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    assert answer["generated"] == tokenizer.decode(greedy[0, ids.shape[1] :])
    assert '"generation": {' in answer["page"]


def test_a_request_keeps_the_readers_head_and_drops_a_query_past_the_new_text(coref):
    page = Session(coref).answer(Request("小明爱球", layer=0, head=3, query=5))["page"]
    opens = json.loads(page.split('<script id="attnlab-data" type="application/json">')[1].split("</script>")[0])[
        "opens"
    ]
    assert opens == {"layer": 0, "head": 3, "query": 5}
    page = Session(coref).answer(Request("小明", layer=0, head=3, query=5))["page"]
    opens = json.loads(page.split('<script id="attnlab-data" type="application/json">')[1].split("</script>")[0])[
        "opens"
    ]
    assert opens == {"layer": 0, "head": 3, "query": 0}  # 4 tokens: query 5 is gone


def test_serve_refuses_what_it_cannot_use(coref):
    with pytest.raises(
        TypeError, match=r"^model: expected None, an attnlab.models.Model or a transformers model, got str$"
    ):
        serve("builtin:coref", block=False)
    with pytest.raises(ValueError, match=r"^port: expected a port number 0\.\.65535 \(0: a free one\), got 70000$"):
        serve(coref, port=70000, block=False)
    with pytest.raises(TypeError, match=r"^block: expected True, False or None, got 'yes'$"):
        serve(coref, block="yes")
