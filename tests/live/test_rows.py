"""serve's clicked row (POST /api/row): one query's whole row of one head, computed for that
row alone, against the dense weights of the model's trace of the same text; its fields
checked and refused by name."""

from __future__ import annotations

import http.client
import json
import socket

import numpy as np
import pytest

from attnlab import serve
from attnlab.live import Session
from attnlab.live._session import RowRequest
from checkpoints import SENTENCE


@pytest.fixture
def server(coref):
    with serve(coref, block=False) as running:
        yield running


def post_row(server, fields: dict) -> tuple[int, dict]:
    """POST /api/row with the token and ``fields`` (a client and number added)."""
    body = json.dumps({"client": "rows", "number": 1, **fields}).encode()
    head = (
        f"POST /api/row HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nX-Attnlab-Token: {server.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
    )
    with socket.create_connection((server.host, server.port), timeout=60) as connection:
        connection.sendall(head.encode("latin-1") + b"\r\n\r\n" + body)
        response = http.client.HTTPResponse(connection)
        response.begin()
        return response.status, json.loads(response.read())


def test_a_clicked_row_is_the_dense_weights_row(server, coref):
    trace = coref.trace(SENTENCE)
    for layer, head, query in ((0, 0, 0), (1, 3, 9), (1, 1, len(trace.tokens) - 1)):
        status, answer = post_row(server, {"text": SENTENCE, "layer": layer, "head": head, "query": query})
        assert status == 200, answer
        assert (answer["layer"], answer["head"], answer["query"]) == (layer, head, query)
        want = trace.layers[layer].weights[head, query]
        assert len(answer["weights"]) == len(trace.tokens)
        np.testing.assert_allclose(answer["weights"], want, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"layer": 9, "head": 0, "query": 0}, "layer: expected an index in 0..1, got 9"),
        ({"layer": 0, "head": 7, "query": 0}, "head: expected an index in 0..3, got 7"),
        ({"layer": 0, "head": 0, "query": 99}, "query: expected an index in 0.."),
        ({"layer": -1, "head": 0, "query": 0}, "layer: expected a whole number ≥ 0, got -1"),
        ({"layer": 0, "head": "0", "query": 0}, "head: expected a whole number ≥ 0, got '0'"),
        ({"layer": 0, "head": 0}, "query: expected a whole number ≥ 0, got None"),
    ],
)
def test_a_cell_the_model_does_not_have_is_a_message_naming_it(server, fields, message):
    status, answer = post_row(server, {"text": SENTENCE, **fields})
    assert status == 422 and answer["error"].startswith(message), answer


def test_the_seeds_layer_has_no_row_to_ask_for():
    with pytest.raises(ValueError, match=r"^row: expected a model's layers \(serve --model\)"):
        Session().row(RowRequest("a b", 0, 0, 0))
