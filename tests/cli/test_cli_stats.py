"""attnlab trace --stats: the model's statistics as JSON (stdout or --out), equal to
Runner.statistics' own, and every misuse a one-line error with exit status 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import attnlab
from attnlab.cli import main
from attnlab.trace import ModelStatistics
from checkpoints import SENTENCE

COREF = ["trace", "--model", "builtin:coref", "--text", SENTENCE, "--stats"]


def test_stats_to_out_is_the_runners_statistics_read_back(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main([*COREF, "--top-k", "3", "--sink-keys", "2", "--local-keys", "5", "--out", str(out)]) == 0
    assert capsys.readouterr().out == ""
    saved = ModelStatistics.from_json(out.read_text(encoding="utf-8"), "s.json")
    want = attnlab.load_model("builtin:coref").statistics(SENTENCE, top_k=3, sink_keys=2, local_keys=5)
    assert saved.tokens == want.tokens and saved.top_k == 3
    assert (saved.statistics.sink_keys, saved.statistics.local_keys) == (2, 5)
    np.testing.assert_array_equal(saved.statistics.entropy, want.statistics.entropy)
    np.testing.assert_array_equal(saved.statistics.top_keys, want.statistics.top_keys)


def test_stats_on_stdout_is_json_with_the_default_sizes(capsys):
    assert main(COREF) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "builtin:coref"
    assert (data["statistics"]["sink_keys"], data["statistics"]["local_keys"]) == (4, 64)
    assert data["statistics"]["top_keys"]["shape"][-1] == 8


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*COREF, "--top-k", "0"], "argument --top-k: expected an integer >= 1, got 0"),
        ([*COREF, "--sink-keys", "x"], "argument --sink-keys: expected an integer, got 'x'"),
        ([*COREF, "--local-keys", "-3"], "argument --local-keys: expected an integer >= 1, got -3"),
        (["trace", "--text", "a b", "--stats"], "--stats: expected --model and --text"),
        (["trace", "--model", "builtin:coref", "--text", "a", "--top-k", "3"], "--top-k: expected --stats with it"),
        (["trace", "--model", "builtin:coref", "--text", "a", "--out", "s.json"], "--out: expected --stats with it"),
        ([*COREF, "--layer", "0"], "--layer: --stats keeps every layer's statistics"),
        ([*COREF, "--causal"], "--causal: --model builtin:coref fixes"),
        ([*COREF, "--out", "s.txt"], "--out: expected a file ending in .json"),
    ],
)
def test_a_misuse_is_one_line_and_exit_status_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert exit_status(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "s.json").exists()


def exit_status(argv: list[str]) -> int:
    """main's exit status, argparse's own usage errors (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exit:
        return int(exit.code or 0)
