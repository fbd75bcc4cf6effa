"""One request cannot hold the live page's one worker: a request its page replaced, or
whose connection closed, stops before its next stage, and flow is computed only up to
attnlab view --rollout's limit. Threads meet on events, never on sleeps."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import sys
import textwrap
import threading
from concurrent.futures import CancelledError

import pytest
from interrupting import interrupted, spawned

import attnlab.analysis
import attnlab.analysis._rollout
from attnlab import serve
from attnlab.live import Request, Session
from attnlab.live._worker import Job, Worker
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


def _dropped(job: Job) -> bool:
    """Whether ``job`` ended dropped: its future raises CancelledError."""
    with pytest.raises(CancelledError):
        job.future.result(WAIT)
    return True


def test_a_running_job_that_a_newer_request_of_its_page_replaces_stops_before_its_next_stage(worker):
    job, work = _running(worker, "page", 1)
    newer = worker.submit("page", 2, lambda check: "newer")
    work.go.set()
    assert newer.future.result(WAIT) == "newer"
    assert _dropped(job) and work.stages == ["first"]


def test_a_running_job_cancelled_stops_before_its_next_stage_and_the_next_page_runs(worker):
    job, work = _running(worker, "gone", 1)
    other = worker.submit("other", 1, lambda check: "other's")
    job.cancel()
    work.go.set()
    assert other.future.result(WAIT) == "other's"
    assert _dropped(job) and work.stages == ["first"]


def test_a_job_of_another_page_does_not_stop_a_running_one(worker):
    job, work = _running(worker, "one", 1)
    worker.submit("two", 5, lambda check: None)
    work.go.set()
    assert job.future.result(WAIT) == "answered" and work.stages == ["first", "second"]


def test_a_queued_job_cancelled_never_runs(worker):
    _, work = _running(worker, "one", 1)
    ran = []
    queued = worker.submit("two", 1, lambda check: ran.append(True))
    queued.cancel()
    work.go.set()
    assert _dropped(queued) and ran == []


def test_a_queued_job_replaced_by_a_newer_request_of_its_page_never_runs(worker):
    _, work = _running(worker, "one", 1)
    ran = []
    queued = worker.submit("two", 1, lambda check: ran.append(True))
    newer = worker.submit("two", 2, lambda check: "newer")
    work.go.set()
    assert newer.future.result(WAIT) == "newer" and _dropped(queued) and ran == []


def test_jobs_run_one_at_a_time_in_the_order_they_came(worker):
    order, running = [], threading.Lock()

    def work(name):
        def run(check):
            assert running.acquire(blocking=False), "two jobs ran at once"
            order.append(name)
            running.release()

        return run

    jobs = [worker.submit(f"page {i}", 1, work(i)) for i in range(5)]
    for job in jobs:
        job.future.result(WAIT)
    assert order == list(range(5))


def test_stopping_the_worker_drops_the_waiting_jobs_and_stops_the_running_one_at_its_next_check():
    worker = Worker()
    job, work = _running(worker, "one", 1)
    ran = []
    queued = worker.submit("two", 1, lambda check: ran.append(True))
    worker.stop()  # returns at once, the running job still in its first stage
    assert worker.busy
    work.go.set()
    worker.join()  # the running job's next check
    assert not worker.busy
    assert _dropped(job) and work.stages == ["first"] and _dropped(queued) and ran == []
    assert _dropped(worker.submit("three", 1, lambda check: ran.append(True))) and ran == []  # nothing runs after


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
    # the stages only: each trace's own checks, before each layer, are the next test's
    monkeypatch.setattr(
        session.model,
        "trace",
        lambda text, name, check: seen.append(f"trace {name}") or tracing(text, name, lambda: None),
    )
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


def test_the_sessions_trace_checks_before_each_layer_and_stops_inside_the_forward(coref, monkeypatch):
    from attnlab.models._network import Block

    seen: list[str] = []
    forward = Block.forward
    monkeypatch.setattr(Block, "forward", lambda *args, **kwargs: seen.append("layer") or forward(*args, **kwargs))
    with pytest.raises(StopError):
        Session(coref).answer(Request(SENTENCE), _stop_at(3, seen))
    assert seen == ["check", "check", "layer", "check"]  # the answer's first check, then before each layer


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
                       r"0.0154 MB for 19 tokens on 2 layers; use fewer tokens$"):  # fmt: skip
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


def _no_forward(monkeypatch) -> None:
    """Every attnlab model's forward fails the test: what is refused is refused before it."""
    from attnlab.models._network import Network

    def forward(*args, **kwargs):
        raise AssertionError("the model ran before the request was refused")

    monkeypatch.setattr(Network, "forward", forward)


def test_views_too_large_for_the_page_are_refused_from_the_token_counts_before_any_forward(smollm2, monkeypatch):
    """The review's request: 150 words (151 tokens) and 64 new ones with rollout on SmolLM2
    (30 layers × 9 heads). By hand: rollout (30, 215, 215) float64, 4·⌈30·215²·8 / 3⌉ =
    14,792,000 base64 characters (flow left out past 215 tokens); the generated rows, 30
    layers of (9, 64, 214) float32, 30·4·⌈9·64·214·4 / 3⌉ = 19,722,240: 34.5 MB, over 16 MB.
    It ran 21 s, then was refused; now refused before the model runs."""
    _no_forward(monkeypatch)
    expected = (
        r"^views: expected at most 16 MB of the views' data, got 34\.5 MB \(rollout 14\.8 MB, generated tokens "
        r"19\.7 MB\) for 215 tokens on 30 layers; use fewer tokens or generated tokens$"
    )
    with pytest.raises(attnlab.ArgumentError, match=expected):
        Session(smollm2).answer(Request("word " * 150, generate=64, rollout=True))


def test_two_texts_too_large_for_the_page_are_refused_before_either_is_traced(coref, monkeypatch):
    """By hand: builtin:coref's 2 layers × 4 heads; the sentence's 19 tokens and 小红是个画家's
    8, each (4, L, L) float32 a layer: 2·(4·⌈4·19²·4 / 3⌉ + 4·⌈4·8²·4 / 3⌉) = 18,144 characters."""
    import attnlab.viz._views

    monkeypatch.setattr(attnlab.viz._views, "MAX_VIEWS_BYTES", 18_143)
    _no_forward(monkeypatch)
    with pytest.raises(
        attnlab.ArgumentError, match=r"^views: .* got 0\.0181 MB for 19 tokens on 2 layers; use fewer tokens$"
    ):
        Session(coref).answer(Request(SENTENCE, second="小红是个画家"))


@pytest.mark.parametrize(("pair", "layer", "head"), [((30, 0), 30, 0), ((0, 9), 0, 9)])
def test_a_head_to_ablate_that_the_model_lacks_is_refused_as_ablate_before_any_forward(
    smollm2, monkeypatch, pair, layer, head
):
    _no_forward(monkeypatch)
    expected = (
        rf"^ablate: expected \[layer, head\] pairs with layer in 0\.\.29 and head in 0\.\.8, got \[{layer}, {head}\]$"
    )
    with pytest.raises(attnlab.ArgumentError, match=expected):
        Session(smollm2).answer(Request("word", ablate=((0, 0), pair)))


def test_an_ablation_of_a_model_without_a_head_to_the_vocabulary_is_refused_before_any_forward(coref, monkeypatch):
    _no_forward(monkeypatch)
    expected = r"^ablate: expected a model with a head to the vocabulary \(serve --model of one\), got builtin:coref, "
    with pytest.raises(attnlab.ArgumentError, match=expected):
        Session(coref).answer(Request(SENTENCE, ablate=((0, 0),)))


def _counted_forwards(monkeypatch) -> list[int]:
    from attnlab.models._network import Network

    forwards, forward = [], Network.forward
    monkeypatch.setattr(Network, "forward", lambda *args, **kwargs: forwards.append(0) or forward(*args, **kwargs))
    return forwards


def test_a_generation_stops_at_the_sessions_check_before_its_next_token(smollm2, monkeypatch):
    forwards, seen = _counted_forwards(monkeypatch), []
    with pytest.raises(StopError):
        Session(smollm2).answer(Request("word", generate=64), _stop_at(4, seen))
    assert len(forwards) == 2  # checks: the request's, before token 1 and 2; token 3 never computed


def test_an_ablation_is_given_the_sessions_check(smollm2, monkeypatch):
    """ablate calls it before each head's forward (tests/analysis/test_ablate.py): the
    session hands it its own, the request's."""
    given = []

    def ablate(model, text, *, heads, check):
        given.append(heads)
        check()
        raise AssertionError("the session's check did not stop the ablation")

    monkeypatch.setattr(attnlab.analysis, "ablate", ablate)
    seen, session = [], Session(smollm2)
    layers = session.model.layers  # the trace checks before each of its layers too
    with pytest.raises(StopError):
        session.answer(Request("word", ablate=((0, 0), (0, 1))), _stop_at(4 + layers, seen))
    # the request's, one per layer of the trace, the trace's end, the ablation's, ablate's
    assert given == [[(0, 0), (0, 1)]] and seen == ["check"] * (4 + layers)


def test_a_generation_whose_connection_closes_stops_at_its_next_token_and_the_next_page_is_served(smollm2, monkeypatch):
    """The review's case: a page left during a 64-token generation held the next page for
    55 s. The first decode step waits for the handler to cancel the job, then the
    generation stops before its next token."""
    from attnlab.models._network import Network

    cancelled, decoding, forwards, forward = threading.Event(), threading.Event(), [], Network.forward
    cancel = Job.cancel
    monkeypatch.setattr(Job, "cancel", lambda job: (cancel(job), cancelled.set()))

    def waiting(*args, **kwargs):
        forwards.append(0)
        if len(forwards) == 2:  # the first decode step: runs once the page has gone
            decoding.set()
            assert cancelled.wait(WAIT)
        return forward(*args, **kwargs)

    monkeypatch.setattr(Network, "forward", waiting)
    with serve(smollm2, block=False) as running:
        with socket.create_connection((running.host, running.port), timeout=WAIT) as connection:
            connection.sendall(_post(running, {"client": "gone", "number": 1, "text": "word", "generate": 64}))
            assert decoding.wait(WAIT)
        monkeypatch.setattr(running.session, "answer", lambda request, check: {"page": request.text})
        with socket.create_connection((running.host, running.port), timeout=WAIT) as connection:
            connection.sendall(_post(running, {"client": "next", "number": 1, "text": "b"}))
            response = http.client.HTTPResponse(connection)
            response.begin()
            assert (response.status, json.loads(response.read())) == (200, {"page": "b"})  # answered after the stop
    assert len(forwards) == 2  # the prompt's and one decode step: the third token never computed


def _serving_a_request(stages: int, seconds: float) -> str:
    """A script that serves a request of ``stages`` stages of ``seconds`` each, a check
    before each (it prints "running" as it starts), and prints "stopped" once stopped."""
    return textwrap.dedent(f"""
        import http.client, json, threading, time
        import attnlab.live._session as session
        from attnlab.live._server import LiveServer

        def answer(self, request, check):
            print("running", flush=True)
            for _ in range({stages}):
                check()
                time.sleep({seconds})
            return {{"page": "done"}}

        def post():
            body = json.dumps({{"client": "page", "number": 1, "text": "a"}})
            connection = http.client.HTTPConnection(server.host, server.port, timeout=60)
            connection.request("POST", "/api/page", body, {{"X-Attnlab-Token": server.token}})
            connection.getresponse()

        session.Session.answer = answer
        server = LiveServer(session.Session(None, None), "a", "127.0.0.1", 0)
        threading.Thread(target=post, daemon=True).start()
        server.serve_forever()
        print("stopped", flush=True)
    """)


def test_ctrl_c_while_a_request_runs_stops_the_server_at_the_requests_next_stage():
    """The worker's executor thread is joined before the exit: Ctrl-C cancels the running
    request, which ends at its next check (0.1 s here), not after its 30 s."""
    with spawned([sys.executable, "-c", _serving_a_request(300, 0.1)]) as process:
        assert process.stdout.readline() == "attnlab serve: Ctrl-C stops it\n", process.stderr.read()
        assert process.stdout.readline() == "running\n", process.stderr.read()
        waited = interrupted(process)
    assert process.returncode == 0 and process.stdout.read() == "stopped\n", process.stderr.read()
    assert waited < 10  # one stage (0.1 s) and the interpreter's exit; 10 s leaves room for a loaded machine


def test_a_second_ctrl_c_while_the_running_stage_ends_exits_at_once():
    with spawned([sys.executable, "-c", _serving_a_request(1, 60)]) as process:  # one stage of a minute
        assert process.stdout.readline() == "attnlab serve: Ctrl-C stops it\n", process.stderr.read()
        assert process.stdout.readline() == "running\n", process.stderr.read()
        process.send_signal(signal.SIGINT)
        said = "attnlab serve: stopping: the request running ends at its next stage (Ctrl-C again exits now)\n"
        lines = [process.stderr.readline()]  # what else stderr says first, if anything, then that
        while lines[-1] not in (said, "") and len(lines) < 50:
            lines.append(process.stderr.readline())
        assert lines[-1] == said, lines  # "": the process ended without saying it
        waited = interrupted(process)
    assert process.returncode == 130 and process.stdout.read() == ""
    assert waited < 10  # at once; 10 s leaves room for a loaded machine
