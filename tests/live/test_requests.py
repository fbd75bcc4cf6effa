"""attnlab serve against requests no browser sends, written byte for byte to a real server:
each gets a 4xx JSON answer naming the header or field at fault (never a dropped
connection and a traceback), and the server goes on serving."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

from attnlab import serve
from attnlab.live import MAX_BODY

BODY = b'{"client": "raw", "number": 1, "text": "\\u5c0f\\u660e"}'


@pytest.fixture
def server(coref):
    with serve(coref, block=False) as running:
        yield running


def _send(server, head: str, body: bytes = b"") -> tuple[int, dict]:
    """The status and JSON answer to ``head`` (the request line and headers, the blank line
    added, in Latin-1 as HTTP/1.1 sends them) and ``body``."""
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.sendall(head.encode("latin-1") + b"\r\n\r\n" + body)
        response = http.client.HTTPResponse(connection)
        response.begin()
        answer = response.read()
    assert response.getheader("Content-Type") == "application/json; charset=utf-8", answer
    return response.status, json.loads(answer)


def _post(server, body: bytes = BODY, *, length: str | None = None, extra: str = "", target: str = "/api/page"):
    """POST ``body`` with the token, this server's Host, ``extra`` header lines and a
    Content-Length of ``length`` (None: the body's)."""
    size = str(len(body)) if length is None else length
    head = (
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Attnlab-Token: {server.token}\r\n"
        f"Content-Type: application/json\r\n{extra}Content-Length: {size}"
    )
    return _send(server, head, body)


def _still_serves(server) -> None:
    head = f"GET /?token={server.token} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close"
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.sendall(head.encode() + b"\r\n\r\n")
        response = http.client.HTTPResponse(connection)
        response.begin()
        assert response.status == 200 and response.read().startswith(b"<!DOCTYPE html>")


@pytest.mark.parametrize(
    "length",
    ["²", "¹²", "-1", "0x10", "1" * 5000],
    ids=["superscript 2", "superscript 12", "-1", "0x10", "5,000 digits"],
)
def test_a_content_length_of_other_than_a_size_in_ascii_digits_or_too_large_is_refused_by_name(server, length):
    status, answer = _post(server, length=length)
    if length.isascii() and length.isdigit():  # int() refuses 5,000 digits: refused by the digits' count
        assert (status, answer) == (
            413,
            {"error": f"Content-Length: expected at most {MAX_BODY:,} bytes, got {'1' * 80}"},
        )
    else:
        expected = f"Content-Length: expected the body's size in bytes, digits 0-9, got {length!r}"
        assert (status, answer) == (400, {"error": expected})
    _still_serves(server)


def test_no_content_length_is_411(server):
    head = f"POST /api/page HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Attnlab-Token: {server.token}"
    assert _send(server, head) == (411, {"error": "Content-Length: expected the body's size in bytes, got none"})
    _still_serves(server)


@pytest.mark.parametrize(
    ("body", "depth"),
    [
        (b"[" * 100_000, 100_000),
        (b'{"client": "raw", "number": 1, "text": "a", "ablate": ' + b"[" * 5000 + b"]" * 5000 + b"}", 5001),
        (b'{"client": "raw", "number": 1, "text": "a", "ablate": [[[0, 1]]]}', 4),
    ],
    ids=["100 KB of [", "5,000 levels in ablate", "4 levels"],
)
def test_json_nested_deeper_than_a_request_is_refused_with_its_depth(server, body, depth):
    expected = f"request: expected a JSON object nested at most 3 deep, got {depth:,} levels"
    assert _post(server, body) == (422, {"error": expected})
    _still_serves(server)


def test_brackets_inside_strings_do_not_count_as_nesting(server, monkeypatch):
    seen = []
    monkeypatch.setattr(server.session, "answer", lambda request, check: seen.append(request) or {"page": ""})
    text = '[[[[{{"\\" ]]'
    body = json.dumps({"client": "raw", "number": 1, "text": text, "ablate": [[0, 1]]}).encode()
    assert _post(server, body) == (200, {"page": ""})
    assert seen[0].text == text and seen[0].ablate == ((0, 1),)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("generate", "9" * 5000, "generate: expected a whole number ≥ 0, got inf"),
        ("layer", "-" + "9" * 5000, "layer: expected a whole number ≥ 0, got -inf"),
        ("number", "9" * 5000, "number: expected a whole number (the page's count of its requests), got inf"),
        ("text", "9" * 5000, "text: expected a string, got float"),
    ],
)
def test_a_number_of_5000_digits_is_refused_by_its_field(server, field, value, expected):
    fields = {"client": '"raw"', "number": "1", "text": '"a"', field: value}
    body = ("{" + ", ".join(f'"{name}": {json_value}' for name, json_value in fields.items()) + "}").encode()
    assert _post(server, body) == (422, {"error": expected})
    _still_serves(server)


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("Host: 127.0.0.1:{port}\r\nHost: attacker.example", "Host: expected one Host header, got 2: "),
        ("Host: 127.0.0.1:{port}\r\nContent-Length: 5\r\nContent-Length: 7", "Content-Length: expected one size, got "),
        ("Host: 127.0.0.1:{port}\r\nContent-Length: 5, 7", "Content-Length: expected one size, got 5, 7"),
        ("Host: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked", "Transfer-Encoding: expected none (send "),
    ],
    ids=["two Host headers", "two Content-Lengths", "a list of two sizes", "chunked"],
)
def test_a_request_rfc_9112_calls_malformed_is_400_and_closes_the_connection(server, head, expected):
    request = f"POST /api/page HTTP/1.1\r\n{head.format(port=server.port)}\r\nX-Attnlab-Token: {server.token}"
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.sendall(request.encode() + b"\r\n\r\n")
        response = http.client.HTTPResponse(connection)
        response.begin()
        answer = json.loads(response.read())
        assert connection.recv(1) == b""  # closed: what follows the head cannot be trusted to start a request
    assert response.status == 400 and answer["error"].startswith(expected), answer
    _still_serves(server)


def test_two_equal_content_lengths_are_one(server, monkeypatch):
    monkeypatch.setattr(server.session, "answer", lambda request, check: {"page": request.text})
    assert _post(server, extra=f"Content-Length: {len(BODY)}\r\n") == (200, {"page": "小明"})


@pytest.mark.parametrize(
    ("target", "status"),
    [
        ("http://evil.example/api/page", 400),
        ("https://127.0.0.1:{port}/api/page", 400),
        ("http://127.0.0.1:{port}/api/page", 200),
    ],
)
def test_a_target_in_absolute_form_must_name_this_server(server, monkeypatch, target, status):
    monkeypatch.setattr(server.session, "answer", lambda request, check: {"page": request.text})
    address = target.format(port=server.port)
    expected = f"request target: expected a path, or this server's http:// address, got {address!r}"
    assert _post(server, target=address) == ((200, {"page": "小明"}) if status == 200 else (400, {"error": expected}))
    _still_serves(server)


def test_a_string_never_closed_is_scanned_once_to_its_end_not_from_each_quote():
    """The depth count's string pattern matches at every quote it starts at, so the scan
    never restarts inside a string: one pass, linear (a pattern that needs the closing
    quote backtracks from each \\" of an unclosed string to the end: 24,000 of them took
    13 s, the server's whole GIL, and 256 KB would take minutes)."""
    from attnlab.live._server import _JSON_STRING

    text = '{"text": "' + '\\"' * 1000
    assert [match.span() for match in _JSON_STRING.finditer(text)] == [(1, 7), (9, len(text))]


def test_256_kb_of_escaped_quotes_never_closed_is_refused_as_not_json(server):
    head = b'{"client": "raw", "number": 1, "text": "'
    body = head + b'\\"' * ((MAX_BODY - len(head)) // 2)
    expected = "request: expected a JSON object, got text that is not JSON"
    assert _post(server, body) == (422, {"error": expected})  # within _send's 30 s: a quadratic scan takes minutes
    _still_serves(server)


@pytest.mark.parametrize(
    "sent",
    ["POST /api/page HTTP/1.1\r\nHost: 127.0.0.1", "POST /api/page HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
     "X-Attnlab-Token: {token}\r\nContent-Length: 100\r\n\r\n" + '{{"client": "raw"'],
    ids=["half the headers", "half the body"],
)  # fmt: skip
def test_a_connection_that_stops_sending_its_request_is_closed_after_the_timeout(coref, monkeypatch, sent):
    import attnlab.live._server

    monkeypatch.setattr(attnlab.live._server, "_IDLE", 0.2)  # 30 s as served
    with serve(coref, block=False) as server:
        with socket.create_connection((server.host, server.port), timeout=30) as connection:
            connection.sendall(sent.format(port=server.port, token=server.token).encode())
            assert connection.recv(1) == b""  # closed by the server, its thread ended
        _still_serves(server)


def test_connections_past_the_most_open_at_once_are_closed_and_their_slots_come_back(coref, monkeypatch):
    import attnlab.live._server

    monkeypatch.setattr(attnlab.live._server, "MAX_CONNECTIONS", 2)  # 64 as served
    with serve(coref, block=False) as server:
        address = (server.host, server.port)
        with socket.create_connection(address, timeout=30) as one, socket.create_connection(address, timeout=30) as two:
            for held in (one, two):  # each a thread, waiting for its request
                held.sendall(b"GET /")
            with socket.create_connection(address, timeout=30) as third:
                head = f"GET /?token={server.token} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n"
                third.sendall(head.encode())
                try:
                    answered = third.recv(1)
                except ConnectionResetError:  # closed with the request unread
                    answered = b""
                assert answered == b""  # closed as it came, never answered: no thread for it
        slots = server._httpd.slots
        for _ in range(2):  # the two closed: their threads end and give back their slots (a hang bound, not a pace)
            assert slots.acquire(timeout=30)
        for _ in range(2):
            slots.release()
        _still_serves(server)


def test_the_handler_times_out_an_idle_connection_as_served():
    from attnlab.live._server import _IDLE

    with serve(block=False) as running:
        assert running._httpd.RequestHandlerClass.timeout == _IDLE == 30


@pytest.mark.parametrize(
    ("head", "status", "expected"),
    [
        ("GARBAGE", 400, "request line: expected a method, a target and HTTP/1.0 or HTTP/1.1, apart by spaces, "
         "got 'GARBAGE'"),
        ("GET /?token={token} NOT-HTTP", 400, "request line: expected a method, a target and HTTP/1.0 or HTTP/1.1"),
        ("GET /?token={token}", 400, "request line: expected a method, a target and HTTP/1.0 or HTTP/1.1"),
        ("GET / HTTP/2.0", 505, "request line: expected HTTP/1.0 or HTTP/1.1, got 'GET / HTTP/2.0'"),
        ("GET /" + "a" * 70_000 + " HTTP/1.1", 414, "request line: expected at most 65,536 bytes, got more"),
        ("GET / HTTP/1.1\r\nX-Long: " + "a" * 70_000, 431, "headers: expected lines of at most 65,536 bytes, got a "
         "longer one"),
        ("GET / HTTP/1.1" + "".join(f"\r\nX-{i}: {i}" for i in range(101)), 431, "headers: expected at most 100 "
         "header lines, got more"),
        ("DELETE /api/page HTTP/1.1\r\nHost: 127.0.0.1:{port}", 405, "method: expected GET or POST, got DELETE"),
        ("PUT /api/page HTTP/1.1\r\nHost: 127.0.0.1:{port}", 405, "method: expected GET or POST, got PUT"),
        ("OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1:{port}", 405, "method: expected GET or POST, got OPTIONS"),
        ("GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nno colon here\r\nX-After: 1", 400,
         "headers: expected lines of 'name: value', each on one line, got 'no colon here'"),
        ("GET /?token={token} HTTP/1.1\r\n Host: 127.0.0.1:{port}", 400,
         "headers: expected lines of 'name: value', each on one line, got ' Host: 127.0.0.1:"),
        ("GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Folded: a\r\n b", 400,
         "headers: expected lines of 'name: value', each on one line, got 'X-Folded: a\\r\\n b'"),
    ],
    ids=[
        "one word", "no HTTP version", "HTTP/0.9", "HTTP/2.0", "a request line of 70 KB", "a header of 70 KB",
        "101 headers", "DELETE", "PUT", "OPTIONS", "a line without a colon", "a first line folded", "obs-fold",
    ],
)  # fmt: skip
def test_a_request_the_standard_library_cannot_read_or_serve_is_json_naming_what_was_wrong(
    server, head, status, expected
):
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.sendall(head.format(port=server.port, token=server.token).encode("latin-1") + b"\r\n\r\n")
        response = http.client.HTTPResponse(connection)
        response.begin()
        answer = json.loads(response.read())
        assert _closed(connection)  # what follows cannot be trusted to start a request
    assert response.getheader("Content-Type") == "application/json; charset=utf-8"
    assert response.status == status and answer["error"].startswith(expected), answer
    if status == 405:
        assert response.getheader("Allow") == "GET, POST"
    _still_serves(server)


def _closed(connection: socket.socket) -> bool:
    """Whether the server closed ``connection``: its end read, or a reset (a close that left
    bytes of the request unread, such as the rest of a line too long)."""
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_head_is_405_without_a_body(server):
    head = f"HEAD /?token={server.token} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}"
    with socket.create_connection((server.host, server.port), timeout=30) as connection:
        connection.sendall(head.encode() + b"\r\n\r\n")
        response = http.client.HTTPResponse(connection, method="HEAD")
        response.begin()
        assert (response.status, response.getheader("Allow"), response.read()) == (405, "GET, POST", b"")
        assert connection.recv(1) == b""
    _still_serves(server)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("second", 0, "second text: expected a string, got int"),
        ("second", False, "second text: expected a string, got bool"),
        ("second", [], "second text: expected a string, got list"),
        ("ablate", 0, "ablate: expected a list of at most 64 [layer, head] pairs, got 0"),
        ("ablate", False, "ablate: expected a list of at most 64 [layer, head] pairs, got False"),
        ("ablate", "", "ablate: expected a list of at most 64 [layer, head] pairs, got ''"),
        ("ablate", {}, "ablate: expected a list of at most 64 [layer, head] pairs, got {}"),
    ],
)
def test_a_field_of_another_type_is_refused_even_when_javascript_calls_it_false(server, monkeypatch, field, value,
                                                                                  expected):  # fmt: skip
    monkeypatch.setattr(server.session, "answer", lambda request, check: {"page": "answered"})
    body = json.dumps({"client": "raw", "number": 1, "text": "a", field: value}).encode()
    assert _post(server, body) == (422, {"error": expected})


@pytest.mark.parametrize(("field", "value"), [("second", None), ("second", ""), ("ablate", None), ("ablate", [])])
def test_null_an_empty_second_text_and_no_heads_mean_none(server, monkeypatch, field, value):
    seen = []
    monkeypatch.setattr(server.session, "answer", lambda request, check: seen.append(request) or {"page": ""})
    body = json.dumps({"client": "raw", "number": 1, "text": "a", field: value}).encode()
    assert _post(server, body) == (200, {"page": ""})
    assert seen[0].second is None and seen[0].ablate == ()
