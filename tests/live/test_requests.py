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
