"""One request cannot hold the live page's one worker: a request its page replaced, or
whose connection closed, stops before its next stage, and flow is computed only up to
attnlab view --rollout's limit. Threads meet on events, never on sleeps."""

from __future__ import annotations

import http.client
import json
import socket
import threading

import pytest

import attnlab.analysis
import attnlab.analysis._rollout
from attnlab import serve
from attnlab.live import Request, Session
from attnlab.live._worker import DROPPED, Job, Worker
from helpers import run_cli

SENTENCE = "小明是个运动达人，他平时很爱打篮球"
WAIT = 30  # seconds an event may take before the test fails: far above any machine's time


class Stages:
    """A job's work in two stages with a check between them: it records each stage it
    starts and blocks after the first until ``go`` is set."""

    def __init__(self) -> None:
        self.started, self.go, self.stages = threading.Event(), threading.Event(), []

    def __call__(self, check) -> str:
        self.stages.append("first")
        self.started.set()
        assert self.go.wait(WAIT)
        check()
        self.stages.append("second")
        return "answered"


@pytest.fixture
def worker():
    running = Worker()
    yield running
    running.stop()


def _running(worker: Worker, client: str, number: int) -> tuple[Job, Stages]:
    work = Stages()
    job = worker.submit(client, number, work)
    assert work.started.wait(WAIT)
    return job, work


def test_a_running_job_that_a_newer_request_of_its_page_replaces_stops_before_its_next_stage(worker):
    job, work = _running(worker, "page", 1)
    newer = worker.submit("page", 2, lambda check: "newer")
    work.go.set()
    assert newer.done.wait(WAIT) and newer.result == "newer"
    assert job.result is DROPPED and work.stages == ["first"]


def test_a_running_job_cancelled_stops_before_its_next_stage_and_the_next_page_runs(worker):
    job, work = _running(worker, "gone", 1)
    other = worker.submit("other", 1, lambda check: "other's")
    job.cancel()
    work.go.set()
    assert other.done.wait(WAIT) and other.result == "other's"
    assert job.result is DROPPED and work.stages == ["first"]


def test_a_job_of_another_page_does_not_stop_a_running_one(worker):
    job, work = _running(worker, "one", 1)
    worker.submit("two", 5, lambda check: None)
    work.go.set()
    assert job.done.wait(WAIT) and job.result == "answered" and work.stages == ["first", "second"]


def test_a_queued_job_cancelled_never_runs(worker):
    _, work = _running(worker, "one", 1)
    ran = []
    queued = worker.submit("two", 1, lambda check: ran.append(True))
    queued.cancel()
    work.go.set()
    assert queued.done.wait(WAIT) and queued.result is DROPPED and ran == []


class StopError(Exception):
    pass


def _stop_at(calls: int, seen: list[str], name: str = "check"):
    """A check that records its calls as ``name`` in ``seen`` and raises at the ``calls``-th."""

    def check() -> None:
        seen.append(name)
        if seen.count(name) == calls:
            raise StopError

    return check


def test_the_session_checks_before_each_stage_and_stops_where_its_check_raises(coref, monkeypatch):
    session, seen = Session(coref), []
    tracing = session.model.trace
    monkeypatch.setattr(session.model, "trace", lambda text, name: seen.append(f"trace {name}") or tracing(text, name))
    rollout = attnlab.analysis.rollout
    monkeypatch.setattr(attnlab.analysis, "rollout", lambda trace: seen.append("rollout") or rollout(trace))
    request = Request(SENTENCE, second="小红是个画家", rollout=True)
    with pytest.raises(StopError):
        session.answer(request, _stop_at(2, seen))  # the check after the first text's trace
    assert seen == ["check", "trace text", "check"]  # the second text is never traced
    seen.clear()
    with pytest.raises(StopError):
        session.answer(request, _stop_at(3, seen))
    assert seen == ["check", "trace text", "check", "trace second text", "check"]  # no rollout


def test_flow_calls_its_check_before_each_position_and_stops_where_it_raises(coref):
    trace, seen = coref.trace(SENTENCE), []
    with pytest.raises(StopError):
        attnlab.analysis.flow(trace, check=_stop_at(3, seen))
    assert seen == ["check"] * 3  # 2 positions' flows of layers·L computed, not all
    with pytest.raises(TypeError, match=r"^check: expected a function or None, got int$"):
        attnlab.analysis.flow(trace, check=1)


def test_a_text_over_the_flow_limit_gets_its_rollout_and_a_note_instead_of_flow(coref, monkeypatch):
    limit = 8  # builtin:coref's 64 positions hold no text over its real limit (110 tokens on 2 layers): lowered
    monkeypatch.setattr(attnlab.analysis._rollout, "MAX_FLOW_PROBLEMS", 2 * limit**2)

    def no_flow(*args, **kwargs):
        raise AssertionError("flow computed over the limit")

    monkeypatch.setattr(attnlab.analysis, "flow", no_flow)
    answer = Session(coref).answer(Request(SENTENCE, rollout=True))
    assert answer["notes"] == [f"flow is shown up to {limit} tokens (this text has {len(SENTENCE) + 2})"]
    views = json.loads(_script(answer["page"], "attnlab-views"))
    assert "rollout" in views["flows"] and "flow" not in views["flows"]


def test_a_rollout_too_large_for_the_page_is_refused_before_it_is_computed(coref, monkeypatch):
    """By hand: builtin:coref's sentence is 19 tokens on 2 layers; rollout and flow, two
    (2, 19, 19) float64 arrays, are 2·4·⌈2·19²·8 / 3⌉ = 15,408 base64 characters."""
    import attnlab.viz._views

    monkeypatch.setattr(attnlab.viz._views, "MAX_VIEWS_BYTES", 15_407)

    def no_rollout(*args, **kwargs):
        raise AssertionError("rollout computed past the page's limit")

    monkeypatch.setattr(attnlab.analysis, "rollout", no_rollout)
    with pytest.raises(attnlab.ArgumentError, match=r"^rollout: expected at most 0.015407 MB of the views' data, got "
                       r"0.0 MB for 19 tokens on 2 layers; use fewer tokens$"):  # fmt: skip
        Session(coref).answer(Request(SENTENCE, rollout=True))
    monkeypatch.setattr(attnlab.viz._views, "MAX_VIEWS_BYTES", 15_408)
    with pytest.raises(AssertionError, match="rollout computed"):  # within the limit: computed
        Session(coref).answer(Request(SENTENCE, rollout=True))


def test_the_page_and_attnlab_view_state_and_apply_one_flow_limit(coref, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(attnlab.analysis._rollout, "MAX_FLOW_PROBLEMS", 2 * 8**2 + 1)  # 8 tokens on 2 layers
    with serve(coref, block=False) as running:
        shell = running.shell()
    settings = json.loads(_script(shell, "live-settings"))
    assert settings["maxFlowTokens"] == 8  # live.js writes "(flow up to 8 tokens)" beside the box
    code, _, err = run_cli(
        capsys, "view", "--model", "builtin:coref", "--text", SENTENCE, "--rollout", "-o", str(tmp_path / "p.html")
    )
    assert code == 0 and "flow left out past 8 tokens (it solves L² max-flows per layer, minutes past" in err


def test_a_request_whose_connection_closes_stops_before_its_next_stage_and_the_server_goes_on(coref, monkeypatch):
    work, cancelled = Stages(), threading.Event()
    cancel = Job.cancel
    monkeypatch.setattr(Job, "cancel", lambda job: (cancel(job), cancelled.set()))
    with serve(coref, block=False) as running:
        monkeypatch.setattr(running.session, "answer", lambda request, check: {"page": work(check)})
        with socket.create_connection((running.host, running.port), timeout=WAIT) as connection:
            connection.sendall(_post(running, {"client": "gone", "number": 1, "text": "a"}))
            assert work.started.wait(WAIT)
        assert cancelled.wait(WAIT)  # the handler saw the connection's end while the job ran
        work.go.set()
        monkeypatch.setattr(running.session, "answer", lambda request, check: {"page": request.text})
        with socket.create_connection((running.host, running.port), timeout=WAIT) as connection:
            connection.sendall(_post(running, {"client": "next", "number": 1, "text": "b"}))
            response = http.client.HTTPResponse(connection)
            response.begin()
            assert (response.status, json.loads(response.read())) == (200, {"page": "b"})
    assert work.stages == ["first"]  # the job stopped at its check: its second stage never ran


def _script(page: str, name: str) -> str:
    """The JSON of the page's <script id=name>."""
    return page.split(f'<script id="{name}" type="application/json">')[1].split("</script>")[0]


def _post(server, fields: dict) -> bytes:
    body = json.dumps(fields).encode()
    head = (
        f"POST /api/page HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Attnlab-Token: {server.token}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
