"""The attnlab command: the demo against the seed program, trace, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

import attnlab as al
from attnlab.cli import _demo, main
from attnlab.trace import ModelTrace
from helpers import run_cli
from oracles import requires

NUMBER = re.compile(r"-?\d+\.\d+|-?\d+")


def numbers(text: str) -> list[str]:
    """Every number printed, in order, excluding the row/token indices in labels."""
    text = re.sub(r"(第 \d+ 行|词 \d+|row \d+|token \d+)", "", text)
    return NUMBER.findall(text)


def test_demo_prints_the_seed_programs_numbers_every_one(capsys, seed_run):
    seed_text, _ = seed_run
    code, out, _ = run_cli(capsys, "demo")
    assert code == 0
    assert numbers(out) == numbers(seed_text)
    assert len(numbers(out)) == 2 + 3 * 2 + 3 * 16 + 4 * 6


def test_demo_sections_come_in_the_seed_programs_order(capsys, seed_run):
    seed_text, _ = seed_run
    _, out, _ = run_cli(capsys, "demo")
    labels = [
        "输入序列长度",
        "输入维度",
        "Q 的形状",
        "K 的形状",
        "V 的形状",
        "原始注意力分数",
        "缩放后的注意力分数",
        "注意力权重（Softmax 后）",
        "自注意力输出",
        "词 3 的输出",
    ]
    for text in (out, seed_text):
        positions = [text.index(label) for label in labels]
        assert positions == sorted(positions)


def test_demo_in_english_has_the_same_numbers(capsys, seed_run):
    _, out, _ = run_cli(capsys, "demo", "--lang", "en")
    assert "Attention weights (after softmax)" in out and "第" not in out
    assert numbers(out) == numbers(seed_run[0])


def test_demo_json_is_the_reference_at_full_precision(capsys, seed_run):
    _, seed = seed_run
    _, out, _ = run_cli(capsys, "demo", "--format", "json")
    data = json.loads(out)
    assert data["weights"] == seed["attention_weights"]
    assert data["output"] == seed["output"]
    assert data["scale"] == 1 / np.sqrt(6)


def test_trace_json_matches_its_text(capsys, tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(np.random.default_rng(0).normal(size=(3, 5)).tolist()))
    args = [str(path), "--d-k", "4", "--seed", "3", "--tokens", "a b c"]
    _, text, _ = run_cli(capsys, "trace", *args, "--lang", "en", "--precision", "6")
    _, raw, _ = run_cli(capsys, "trace", *args, "--format", "json")
    data = json.loads(raw)
    assert data["tokens"] == ["a", "b", "c"]
    printed = [float(x) for x in numbers(text)]
    expected = [3, 5, 3, 4, 3, 4, 3, 4]
    for name in ("scores", "scaled_scores", "weights", "output"):
        expected += [round(x, 6) for row in data[name] for x in row]
    assert printed == pytest.approx(expected, abs=1e-12)
    layer = al.SelfAttention(5, 4, seed=3)
    np.testing.assert_allclose(data["output"], layer.forward(np.array(data["inputs"]))[0], atol=1e-15)


@pytest.mark.parametrize("suffix", ["json", "csv", "npy", "-"])
def test_trace_reads_every_input_kind(capsys, tmp_path, monkeypatch, suffix):
    X = np.array([[1.0, 0.5], [0.0, 2.0], [-1.0, 1.0]])
    path = tmp_path / f"x.{suffix}"
    if suffix == "json":
        path.write_text(json.dumps(X.tolist()))
    elif suffix == "csv":
        path.write_text("\n".join(",".join(map(str, row)) for row in X))
    elif suffix == "npy":
        np.save(path, X)
    else:
        monkeypatch.setattr(sys, "stdin", __import__("io").StringIO(json.dumps(X.tolist())))
        path = "-"
    code, out, _ = run_cli(capsys, "trace", str(path), "--format", "json", "--scale", "none", "--causal")
    assert code == 0
    data = json.loads(out)
    assert data["inputs"] == X.tolist() and data["scale"] == 1.0
    assert data["scaled_scores"][0][1] is None  # masked by --causal


def test_trace_text_one_hot_like_the_article(capsys):
    sentence = "小明是个运动达人，他平时很爱打篮球"
    code, out, _ = run_cli(capsys, "trace", "--text", sentence, "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["tokens"] == list(sentence)
    X = np.array(data["inputs"])
    assert X.shape == (17, 17) and np.array_equal(X, np.eye(17))  # 17 distinct characters
    _, text, _ = run_cli(capsys, "trace", "--text", sentence)
    assert "第 0 行 (小)" in text and "词 16 (球) 的输出" in text


def test_trace_text_random_embedding_repeats_vectors_for_repeated_words(capsys):
    _, out, _ = run_cli(
        capsys, "trace", "--text", "the cat saw the dog", "--embed", "random", "--d-model", "5", "--format", "json"
    )
    X = np.array(json.loads(out)["inputs"])
    assert X.shape == (5, 5) and np.array_equal(X[0], X[3]) and not np.array_equal(X[0], X[1])


BAD_INPUTS = {
    "missing file": (["missing.json"], None, "cannot read"),
    "unknown suffix": (["x.txt"], "1,2", "unknown suffix"),
    "ragged": (["x.json"], "[[1, 2], [3]]", "ragged"),
    "empty": (["x.json"], "[]", "empty"),
    "not numbers": (["x.json"], '[[1, "a"]]', "expected a number"),
    "csv not numbers": (["x.csv"], "1,2\n3,abc", "numbers only"),
    "nan": (["x.json"], "[[1, NaN]]", "finite"),
    "infinity": (["x.csv"], "1,inf", "finite"),
    "invalid json": (["x.json"], "[[1, 2]", "not valid JSON"),
    "not a list of rows": (["x.json"], '{"a": 1}', "not a trace, missing"),
    "a list of numbers": (["x.json"], "[1, 2]", "list of rows"),
    "d_k zero": (["x.json", "--d-k", "0"], "[[1, 2]]", "--d-k"),
    "tokens mismatch": (["x.json", "--tokens", "a b"], "[[1, 2]]", "--tokens: expected 1 labels"),
    "bad scale": (["x.json", "--scale", "big"], "[[1, 2]]", "--scale"),
    "no input": ([], None, "required"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_status_2(tmp_path, case, monkeypatch, capsys):
    """In-process (the process's own exit is test_python_dash_m_and_a_bare_command_show_what_attnlab_does's)."""
    argv, content, message = BAD_INPUTS[case]
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / argv[0]).write_text(content)
    code, out, err = run_cli(capsys, "trace", *argv)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert message in err


def test_npy_with_objects_is_refused_without_unpickling(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.array([[1, None]], dtype=object), allow_pickle=True)
    code, _, err = run_cli(capsys, "trace", str(tmp_path / "x.npy"))
    assert code == 2 and "pickle" in err.lower()


def test_version_and_help_with_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and al.__version__ in capsys.readouterr().out
    for command in ("demo", "trace", "plot", "view", "ablate", "heads", "bench"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "example" in capsys.readouterr().out


def test_a_bug_is_not_dressed_as_a_user_error(monkeypatch):
    """Only attnlab's own errors become one line and exit 2; a bug keeps its traceback."""

    def broken(*args, **kwargs):
        raise TypeError("an unexpected bug")

    monkeypatch.setattr(_demo, "ReferenceSelfAttention", broken)
    with pytest.raises(TypeError, match="an unexpected bug"):
        main(["demo"])


HOSTILE_FILES = {
    "deep.json": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "huge-int.json": ("[[" + "9" * 400 + ", 1]]", "within float range"),
    "empty.npy": ("", "cannot read"),
    "corrupt.npy": ("\x93NUMPY\x01\x00{'descr': broken", "cannot read"),
    # a header NumPy's literal_eval reads into Python's tokenizer: a TokenError, once a traceback
    "open-header.npy": ("\x93NUMPY\x01\x00\x10\x00{'descr': '<f8',\n", "not a readable .npy file"),
    "unterminated.npy": ("\x93NUMPY\x01\x00\x10\x00{'descr': '<f8 \n", "not a readable .npy file"),
    "long.json": (json.dumps([[0.0]] * 9000), "at most 16,777,216 scores"),
}


@pytest.mark.parametrize("name", HOSTILE_FILES)
def test_hostile_files_end_in_one_line(name, tmp_path, monkeypatch, capsys):
    text, message = HOSTILE_FILES[name]
    (tmp_path / name).write_bytes(text.encode("latin-1" if name.endswith(".npy") else "utf-8"))  # .npy: bytes
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "trace", name)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_an_npz_under_an_npy_name_and_a_bom_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "a.npz", x=np.ones((2, 2)))
    (tmp_path / "a.npz").rename(tmp_path / "a.npy")
    code, _, err = run_cli(capsys, "trace", "a.npy")
    assert code == 2 and "got an .npz archive" in err
    (tmp_path / "excel.csv").write_bytes(b"\xef\xbb\xbf1,0\n0,1\n")
    code, out, _ = run_cli(capsys, "trace", "excel.csv", "--format", "json")
    assert code == 0 and json.loads(out)["inputs"] == [[1.0, 0.0], [0.0, 1.0]]


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--d-k", str(10**9), "--d-k: expected an integer in 1..65536"),
        ("--d-model", str(10**9), "--d-model: expected an integer in 1..65536"),
        ("--precision", "400", "in 0..17"),
    ],
)
def test_limits_are_checked_before_work(option, value, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["trace", "--text", "a b", option, value])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(_demo, "ReferenceSelfAttention", interrupted)
    code, _, err = run_cli(capsys, "demo")
    assert code == 130 and err == "attnlab demo: interrupted\n"


def test_a_terminal_without_chinese_gets_escapes():
    result = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "demo"],
        capture_output=True,
        env={**__import__("os").environ, "PYTHONIOENCODING": "ascii"},
    )
    assert result.returncode == 0 and b"\\u81ea" in result.stdout


@requires("matplotlib")
def test_scores_that_overflow_give_valid_json_a_plot_and_a_page(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.json").write_text("[[1e200, 1e200], [1e200, -1e200]]")
    code, out, _ = run_cli(capsys, "trace", "x.json", "--format", "json")
    data = json.loads(out)  # valid JSON: NaN is written "NaN", never a bare NaN
    assert code == 0 and data["weights"][0][0] == "NaN"
    (tmp_path / "trace.json").write_text(out)
    assert al.Trace.from_dict(data).weights.shape == (2, 2)
    assert np.isnan(al.Trace.from_dict(data).weights).all()
    code, _, _ = run_cli(capsys, "plot", "trace.json", "-o", "x.png")
    assert code == 0 and (tmp_path / "x.png").stat().st_size > 0
    code, _, _ = run_cli(capsys, "view", "x.json", "-o", "x.html")  # the page shows them as not numbers
    assert code == 0 and (tmp_path / "x.html").stat().st_size > 0


def test_a_page_too_large_for_a_browser_is_refused_before_work(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "long.json").write_text(json.dumps([[1.0, 0.0]] * 4097))
    code, _, err = run_cli(capsys, "view", "long.json", "-o", "x.html")
    # 4097² cells of its one head, past 4096²: the page computes a head's scores and weights when it shows it
    assert code == 2 and "a head of 16,785,409 cells (L·S) for the page to compute, at most 16,777,216 (4096²)" in err
    assert "use fewer tokens" in err and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [("head_cells", 8, "a head of 9 cells (L·S) for the page to compute, at most 8; use fewer tokens"),
     ("page", 300, "MB (exact), at most 0.0003 MB; use fewer tokens or heads")],
)  # fmt: skip
def test_the_cli_and_the_page_refuse_a_page_by_the_same_numbers(tmp_path, monkeypatch, capsys, limit, value, message):
    import attnlab.viz._page

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(attnlab.viz._page.PAGE_LIMITS, limit, value)
    code, _, err = run_cli(capsys, "view", "--text", "a b c", "-o", "x.html")  # 9 cells, about 400 bytes
    assert (
        code == 2
        and err.startswith("attnlab view: error: --text: expected a page that a browser opens")
        and message in err
    )
    assert not (tmp_path / "x.html").exists()
    with pytest.raises(al.ArgumentError, match=re.escape(message)) as refused:
        al.view(al.SelfAttention(3, 3).trace(np.eye(3)))
    assert str(refused.value).startswith("trace: expected a page that a browser opens in a few seconds, got 3 tokens")
    assert run_cli(capsys, "view", "--text", "a b", "-o", "x.html")[0] == 0 and (tmp_path / "x.html").exists()


def test_a_trace_with_inconsistent_arrays_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, out, _ = run_cli(capsys, "trace", "--text", "a b c", "--format", "json")
    for field, value in [("Q", [1.0, 2.0]), ("K", [[1.0]]), ("scale", 1e400), ("scale", None)]:
        data = json.loads(out)
        data[field] = value
        (tmp_path / "t.json").write_text(json.dumps(data))
        code, _, err = run_cli(capsys, "view", "t.json", "-o", "t.html")
        assert code == 2 and f"t.json: {field}: expected" in err, (field, err)


def test_the_output_is_checked_first_and_named_when_the_disk_is_full(tmp_path, capsys):
    code, _, err = run_cli(capsys, "view", "--text", "a b", "-o", str(tmp_path / "missing" / "x.html"))
    assert code == 2 and "-o: expected a file in a folder that exists" in err
    full = tmp_path / "full.html"
    full.symlink_to("/dev/full")  # every write fails with ENOSPC
    code, _, err = run_cli(capsys, "view", "--text", "a b", "-o", str(full))
    assert code == 2 and err == f"attnlab view: error: {full}: No space left on device\n"


def test_a_wide_one_hot_text_traces_with_d_k_at_most_64(capsys):
    """200 distinct characters are 200 one-hot dimensions; d_k stays 64 (2000 would draw 2000² weights
    in pure Python without the cap)."""
    text = "".join(chr(0x4E00 + i) for i in range(200))
    code, out, _ = run_cli(capsys, "trace", "--text", text, "--format", "json")
    data = json.loads(out)
    assert code == 0 and len(data["tokens"]) == len(data["inputs"][0]) == 200 and len(data["Q"][0]) == 64


def test_what_a_saved_trace_cannot_honour_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, out, _ = run_cli(capsys, "trace", "--text", "a b", "--format", "json")
    (tmp_path / "t.json").write_text(out)
    for option in (["--causal"], ["--num-heads", "2"], ["--d-k", "3"], ["--scale", "2"]):
        code, _, err = run_cli(capsys, "view", "t.json", *option, "-o", "t.html")
        assert code == 2 and f"{option[0]}: t.json is a saved trace, already computed" in err


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("inputs", [[[[[[[[[[1.0]]]]]]]]]] * 1, "inputs: expected"),
        ("scale", 10**400, "scale: expected a finite number, got an integer of 401 digits"),
        ("Q", [[], []], "Q: expected shape"),
    ],
)
def test_hostile_saved_traces(field, value, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, out, _ = run_cli(capsys, "trace", "--text", "a b", "--format", "json")
    data = json.loads(out)
    data[field] = value
    (tmp_path / "t.json").write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "trace", "t.json")
    assert code == 2 and message in err and err.count("\n") == 1


def test_a_huge_npy_header_is_refused_before_reading(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with open(tmp_path / "huge.npy", "wb") as f:  # a header that promises 10¹² numbers, and no data
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
    code, _, err = run_cli(capsys, "trace", "huge.npy")
    assert code == 2 and "expected at most 67,108,864 numbers, got shape (1000000, 1000000)" in err


def test_bench_checks_its_output_before_running(capsys):
    code, _, err = run_cli(capsys, "bench", "--quick", "--json", "/no/such/folder/x.json")
    assert code == 2 and "--json: expected a file in a folder that exists" in err


def test_python_dash_m_and_a_bare_command_show_what_attnlab_does(tmp_path):
    bare = subprocess.run([sys.executable, "-m", "attnlab"], capture_output=True, text=True)
    assert bare.returncode == 0, bare.stderr
    assert "usage: attnlab" in bare.stdout and "demo" in bare.stdout and "examples:" in bare.stdout
    # the process itself: a user's error is one line on stderr and exit status 2 (the cases: in-process, above)
    refused = subprocess.run(
        [sys.executable, "-m", "attnlab.cli", "trace", "x.json"], cwd=tmp_path, capture_output=True, text=True
    )
    assert (refused.returncode, refused.stdout) == (2, "")
    unread = "x.json: cannot read: expected a readable regular file, got No such file or directory"
    assert refused.stderr == f"attnlab trace: error: {unread}\n"


def attnlab(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "attnlab", *argv], capture_output=True, text=True)


def test_a_multi_head_trace_shows_each_head_and_the_layer_output():
    argv = [
        "trace",
        "--text",
        "我 love 猫咪 x",
        "--embed",
        "random",
        "--d-model",
        "4",
        "--num-heads",
        "2",
        "--lang",
        "en",
    ]
    text = attnlab(*argv).stdout
    assert "Output of head 0 (before out_proj):" in text and "Output of head 1 (before out_proj):" in text
    assert "Self-attention output" not in text
    data = json.loads(attnlab(*argv, "--format", "json").stdout)
    layer = al.MultiheadAttention(4, 2, seed=42, dtype=np.float64)
    heads = np.array(data["output"]).transpose(1, 0, 2).reshape(4, 4)  # (L, H·E)
    state = layer.state_dict()
    expected = heads @ state["out_proj.weight"].T + state["out_proj.bias"]  # out_proj by hand
    np.testing.assert_allclose(data["layer_output"], expected, atol=1e-12)
    last = text.split("Layer output (the heads side by side, through out_proj):")[1]
    assert [float(x) for x in re.findall(r"-?\d+\.\d+", last.splitlines()[2].split(":")[1])] == [
        round(x, 4) for x in expected[0]
    ]


def test_rows_line_up_under_headers_whatever_the_tokens():
    text = attnlab("trace", "--text", "我 love 猫咪 x", "--lang", "en").stdout
    block = text.split("Attention weights (after softmax):")[1].splitlines()[1:6]
    assert block[0].strip().startswith("keys")
    widths = {unicodedata_width(line.split(":")[0]) for line in block[1:]}
    assert len(widths) == 1  # every row's label takes the same columns


def unicodedata_width(text: str) -> int:
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def test_an_option_the_input_cannot_honour_is_refused():
    result = attnlab("trace", "--text", "a b c d", "--num-heads", "2", "--d-k", "3")
    assert result.returncode == 2 and "--d-k: with --num-heads 2" in result.stderr and result.stderr.count("\n") == 1


def test_a_csv_header_and_a_first_column_of_tokens(tmp_path):
    (tmp_path / "named.csv").write_text("token,x0,x1\nI,1,0\nlove,0,1\ncats,1,1\n")
    data = json.loads(attnlab("trace", str(tmp_path / "named.csv"), "--format", "json").stdout)
    assert data["tokens"] == ["I", "love", "cats"] and data["inputs"] == [[1, 0], [0, 1], [1, 1]]
    (tmp_path / "plain.csv").write_text("x0,x1\n1,0\n0,1\n")
    data = json.loads(attnlab("trace", str(tmp_path / "plain.csv"), "--format", "json").stdout)
    assert data["tokens"] is None and data["inputs"] == [[1, 0], [0, 1]]
    relabelled = json.loads(
        attnlab("trace", str(tmp_path / "named.csv"), "--tokens", "a b c", "--format", "json").stdout
    )
    assert relabelled["tokens"] == ["a", "b", "c"]


def test_a_csv_of_named_rows_without_a_header_keeps_every_row(tmp_path):
    (tmp_path / "named.csv").write_text('a,1,0\n"hello, world",0,1\nc,1,1\n')
    data = json.loads(attnlab("trace", str(tmp_path / "named.csv"), "--format", "json").stdout)
    assert data["tokens"] == ["a", "hello, world", "c"] and len(data["inputs"]) == 3


def test_wide_tokens_widen_their_columns():
    text = attnlab("trace", "--text", "I basketball 猫", "--lang", "en").stdout
    header, first = text.split("Raw attention scores:")[1].splitlines()[1:3]
    assert header.index("basketball") + len("basketball") == first.index(",", first.index(",") + 1)


def test_a_saved_trace_refuses_embedding_options(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, out, _ = run_cli(capsys, "trace", "--text", "a b", "--format", "json")
    (tmp_path / "t.json").write_text(out)
    code, _, err = run_cli(capsys, "trace", "t.json", "--embed", "random")
    assert code == 2 and "--embed: t.json is a saved trace" in err


# --- suggestions, the terminal, byte-level pieces (issue 23) ------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["trace", "--text", "ab", "--casual"], "error: unrecognized arguments: --casual; did you mean --causal?"),
        (["trace", "--text", "ab", "--casual=1"], "unrecognized arguments: --casual=1; did you mean --causal?"),
        (["trce"], "invalid choice: 'trce' (choose from 'demo', 'trace', 'plot', 'view', 'serve', 'ablate', 'heads', "
                   "'evict', 'bench', 'experiment', 'ring'); did you mean 'trace'?"),
        (["trace", "--text", "ab", "--format", "jsn"], "did you mean 'json'?"),
    ],
)  # fmt: skip
def test_a_mistyped_option_or_command_names_the_nearest(argv, message):
    run = attnlab(*argv)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and message in run.stderr, run.stderr


def test_nothing_near_suggests_nothing():
    run = attnlab("trace", "--text", "ab", "--zzzzzz")
    assert run.returncode == 2 and run.stderr == "attnlab trace: error: unrecognized arguments: --zzzzzz\n"


LONG_TEXT = "小明是个运动达人，他平时很爱打篮球。" * 34  # 612 characters: about 10 MB of text trace


def on_a_terminal(*argv: str) -> tuple[int, bytes, str]:
    """attnlab with standard output on a pseudo-terminal: status, what reached the terminal, stderr."""
    import os
    import pty

    master, slave = pty.openpty()
    try:
        run = subprocess.run([sys.executable, "-m", "attnlab", *argv], stdout=slave, stderr=subprocess.PIPE,
                             text=True, timeout=600)  # fmt: skip
        os.set_blocking(master, False)
        try:
            shown = os.read(master, 1 << 16)
        except (BlockingIOError, OSError):
            shown = b""
    finally:
        os.close(slave)
        os.close(master)
    return run.returncode, shown, run.stderr


@pytest.mark.slow
def test_a_trace_over_1_mb_is_refused_on_a_terminal_and_says_how_to_keep_it():
    status, shown, stderr = on_a_terminal("trace", "--text", LONG_TEXT)
    assert status == 2 and shown == b""
    assert stderr.count("\n") == 1
    assert stderr.startswith("attnlab trace: error: output: expected at most 1 MB on a terminal")
    assert "> trace.txt" in stderr and "--format json > trace.json" in stderr and "| less" in stderr
    size = float(stderr.rsplit("got ", 1)[1].split()[0])
    piped = attnlab("trace", "--text", LONG_TEXT)  # a pipe gets everything, the size the message gave
    assert piped.returncode == 0 and round(len(piped.stdout.encode()) / 1e6, 1) == size > 1


def test_a_small_trace_reaches_the_terminal():
    status, shown, stderr = on_a_terminal("trace", "--text", "ab", "--lang", "en")
    assert status == 0 and stderr == "" and b"Self-attention trace" in shown


def byte_level_trace() -> ModelTrace:
    """A model's trace over a, then 篮 in three byte-level pieces (the first two show nothing)."""
    tokens, parts = ["a", "", "", "篮"], ["", "篮", "篮", "篮"]
    x = np.random.default_rng(0).standard_normal((4, 4))
    layer = al.SelfAttention(4, 2, seed=0).trace(x, tokens=tokens)
    return ModelTrace("tiny", [1, 2, 3, 4], tokens, {0: layer}, 1, 1, parts=parts)


def test_byte_level_pieces_are_labelled_in_the_text_trace(tmp_path):
    trace = byte_level_trace()
    assert trace.labels() == ["a", "‹piece of 篮›", "‹piece of 篮›", "篮"]
    text = trace.render(lang="en")
    assert "()" not in text and "row 1 (‹piece of 篮›)" in text and "row 3 (篮)" in text, text
    saved = tmp_path / "trace.json"
    saved.write_text(trace.to_json(), encoding="utf-8")
    run = attnlab("trace", str(saved), "--lang", "en")
    assert run.returncode == 0 and run.stdout.strip() == text


# --- the attention variants (issue 21) ---------------------------------------------------


def test_window_softcap_and_alignment_reach_the_trace(capsys):
    code, out, _ = run_cli(capsys, "trace", "--text", "a b c d e", "--window", "2,0", "--softcap", "0.5",
                           "--scale", "3", "--format", "json")  # fmt: skip
    data = json.loads(out)
    assert code == 0 and data["variants"]["window"] == [2, 0] and data["variants"]["softcap"] == 0.5
    raw = np.array(data["scores"])
    for i in range(5):
        for j in range(5):
            if i - 2 <= j <= i:  # by hand: softcap(scale·q·k) inside the band, null (−∞) outside
                assert data["scaled_scores"][i][j] == pytest.approx(0.5 * np.tanh(3 * raw[i, j] / 0.5), abs=1e-15)
            else:
                assert data["scaled_scores"][i][j] is None and data["weights"][i][j] == 0.0
    for given, sides in (("2,", [2, None]), (",0", [None, 0]), ("none,1", [None, 1]), ("NONE, 3", [None, 3])):
        code, out, _ = run_cli(capsys, "trace", "--text", "a b c", "--window", given, "--format", "json")
        assert code == 0 and json.loads(out)["variants"]["window"] == sides
    argv = ["trace", "--text", "a b c d", "--embed", "random", "--d-model", "4", "--num-heads", "2", "--causal"]
    _, top_left, _ = run_cli(capsys, *argv, "--format", "json")
    code, bottom_right, _ = run_cli(capsys, *argv, "--causal-alignment", "bottom_right", "--format", "json")
    bottom_right = json.loads(bottom_right)
    assert code == 0 and bottom_right["variants"]["causal_alignment"] == "bottom_right"
    assert bottom_right["weights"] == json.loads(top_left)["weights"]  # as many keys as queries: the same diagonal
    code, out, _ = run_cli(capsys, "trace", "--text", "a b c", "--window", "1,0", "--lang", "en")
    assert code == 0 and "attention rules: sliding window (1, 0): query i sees keys i − 1 … i" in out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--window", "-1,0", "argument --window: expected L,R, each an integer >= 0 or empty or 'none'"),
        ("--window", "2", "argument --window: expected L,R"),
        ("--window", "1,2,3", "got '1,2,3'"),
        ("--window", "a,0", "got 'a,0'"),
        ("--window", "1.5,0", "got '1.5,0'"),
        ("--softcap", "0", "argument --softcap: expected a finite number > 0, got '0'"),
        ("--softcap", "-2", "argument --softcap: expected a finite number > 0, got '-2'"),
        ("--softcap", "nan", "argument --softcap: expected a finite number > 0, got 'nan'"),
        ("--softcap", "inf", "argument --softcap: expected a finite number > 0, got 'inf'"),
        ("--softcap", "big", "argument --softcap: expected a number > 0, got 'big'"),
        ("--causal-alignment", "bottom", "argument --causal-alignment: invalid choice: 'bottom'"),
    ],
)
def test_bad_variant_options_are_one_line_naming_the_option(option, value, message, capsys):
    commands = (["trace"], ["plot", "-o", "x.png"], ["view", "-o", "x.html"]) if option == "--window" else (["trace"],)
    for command in commands:
        with pytest.raises(SystemExit) as exit:
            main([*command, "--text", "a b", f"{option}={value}"])
        out, err = capsys.readouterr()
        assert exit.value.code == 2 and out == ""
        assert err.count("\n") == 1 and message in err and err.startswith(f"attnlab {command[0]}: error: "), err


def test_a_saved_trace_or_a_model_refuses_the_variant_options(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _, out, _ = run_cli(capsys, "trace", "--text", "a b", "--window", "1,0", "--format", "json")
    (tmp_path / "t.json").write_text(out)
    for option in (["--window", "1,0"], ["--softcap", "2"], ["--causal-alignment", "bottom_right"]):
        code, _, err = run_cli(capsys, "view", "t.json", *option, "-o", "t.html")
        assert code == 2 and err.count("\n") == 1
        assert f"{option[0]}: t.json is a saved trace, already computed; {option[0]} cannot change it" in err
    code, _, _ = run_cli(capsys, "view", "t.json", "-o", "t.html")  # its own window is kept, and shown
    assert code == 0 and "sliding window (1, 0)" in (tmp_path / "t.html").read_text()
    for option in (["--window", "4,0"], ["--softcap", "30"], ["--causal-alignment", "bottom_right"]):
        code, _, err = run_cli(
            capsys, "trace", "--model", "gpt2", "--text", "a", *option
        )  # refused before any download
        assert code == 2 and err.count("\n") == 1
        assert f"{option[0]}: --model gpt2 attends as its config says (its causal mask, its own window)" in err


# ---- issue 24: text as text, and a refusal in one line for every bad setting ----


def test_a_csv_field_over_the_csv_modules_limit_is_refused_in_one_line(capsys, tmp_path):
    big = tmp_path / "big.csv"
    big.write_text("x" * 140_000 + ",1\nb,2\n", encoding="utf-8")  # csv's default field_size_limit is 131,072
    code, out, err = run_cli(capsys, "trace", str(big))
    assert code == 2 and out == ""
    assert err == f"attnlab trace: error: {big}: cannot read as CSV: line 1: field larger than field limit (131072)\n"


@pytest.mark.parametrize("first", ["nan,1", "inf,1", "1,-inf", "1,NaN"])
def test_a_csv_whose_first_row_holds_nan_or_inf_is_refused_not_taken_as_a_header(capsys, tmp_path, first):
    table = tmp_path / "x.csv"
    table.write_text(f"{first}\n2,3\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "trace", str(table))
    bad = next(j for j, field in enumerate(first.split(",")) if field.strip().lower().lstrip("+-") in ("nan", "inf"))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"attnlab trace: error: {table}: row 0, column {bad}: expected a finite number, got {first.split(',')[bad]!r}"
    ]


@pytest.mark.parametrize("header", ["token,x0,x1", "token,x0,1"])  # a header is a row not all numbers, nan not one
def test_a_csv_header_is_still_skipped(capsys, tmp_path, header):
    table = tmp_path / "x.csv"
    table.write_text(f"{header}\na,1,0\nb,0,1\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "trace", str(table), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inputs"] == [[1.0, 0.0], [0.0, 1.0]] and json.loads(out)["tokens"] == ["a", "b"]


def test_a_bom_is_accepted_only_at_the_start_of_a_file(capsys, tmp_path):
    """Excel's "CSV UTF-8" starts with a BOM (accepted, as issue 9 asked; RFC 8259 lets a JSON
    parser ignore one there); a BOM anywhere else is two files joined, and refused, not read
    as a header (which is how the row used to vanish) or as part of a token."""
    for name, text in [("a.csv", "\ufeff1,0\n0,1\n"), ("a.json", "\ufeff[[1, 0], [0, 1]]")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        code, out, err = run_cli(capsys, "trace", str(tmp_path / name), "--format", "json")
        assert code == 0 and json.loads(out)["inputs"] == [[1.0, 0.0], [0.0, 1.0]], err
    joined = tmp_path / "joined.csv"
    joined.write_text("x,\ufeff1,2\nb,3,4\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "trace", str(joined))
    assert (code, out) == (2, "")
    assert (
        err
        == f"attnlab trace: error: {joined}: row 0, column 1: expected no byte-order mark (U+FEFF), got '\\ufeff1'\n"
    )
    twice = tmp_path / "twice.json"
    twice.write_text("\ufeff\ufeff[[1]]", encoding="utf-8")
    code, _, err = run_cli(capsys, "trace", str(twice))
    assert code == 2 and "not valid JSON" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("👩\u200d💻是", ["👩\u200d💻", "是"]),  # a ZWJ sequence: woman + ZWJ + laptop, one picture
        ("🇨🇳好", ["🇨🇳", "好"]),  # a flag: two regional indicators
        ("cafe\u0301", ["c", "a", "f", "e\u0301"]),  # e and a combining acute accent: é
        ("👍🏽!", ["👍🏽", "!"]),  # an emoji and its skin-tone modifier
    ],
)
def test_a_grapheme_cluster_in_text_is_one_token(capsys, text, tokens):
    code, out, _ = run_cli(capsys, "trace", "--text", text, "--format", "json")
    assert code == 0 and json.loads(out)["tokens"] == tokens  # the clusters, written out by hand (UAX #29)


def test_control_characters_and_lone_surrogates_are_escaped_on_the_terminal_and_kept_in_json(capsys):
    text = "a\x1b[31m b\udcff c\x07"  # an ANSI colour, an undecodable argv byte, the bell
    code, out, _ = run_cli(capsys, "trace", "--text", text)
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\udcff" not in out
    assert "(a\\x1b[31m)" in out and "(b\\udcff)" in out and "(c\\x07)" in out
    code, out, _ = run_cli(capsys, "trace", "--text", text, "--format", "json")
    assert code == 0 and json.loads(out)["tokens"] == ["a\x1b[31m", "b\udcff", "c\x07"]  # exactly as given


def test_the_help_states_the_limits_of_precision_and_seed(capsys):
    for argv in (["trace", "--help"], ["experiment", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        help_text = " ".join(capsys.readouterr().out.split())
        if argv[0] == "trace":
            assert "decimals in the text, 0..17" in help_text and "seed of the weights, 0..2**63-1" in help_text
        else:
            assert "the seed, 0..2**32-1" in help_text
    for argv, message in [
        (["trace", "--text", "a b", "--precision", "100"], "expected an integer in 0..17, got 100"),
        (["trace", "--text", "a b", "--seed", str(2**200)], f"expected an integer in 0..{2**63 - 1}, got {2**200}"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err and len(err.splitlines()) == 1


def test_experiment_list_refuses_a_stray_word(capsys):
    code, out, err = run_cli(capsys, "experiment", "list", "scaling")
    assert (code, out) == (2, "")
    assert err == "attnlab experiment: error: NAME: expected nothing after 'list' (it lists them all), got 'scaling'\n"
    code, out, _ = run_cli(capsys, "experiment", "list")
    assert code == 0 and out.startswith("scaling ")


def test_ring_takes_a_count_of_heads_as_num_heads_and_its_old_heads_with_a_deprecation_line(capsys, monkeypatch):
    import attnlab.bench

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(attnlab.bench, "launch_ring", lambda *args, **kwargs: calls.append(kwargs) or {})
    monkeypatch.setattr(attnlab.bench, "format_ring", lambda report: "ran")
    code, out, err = run_cli(capsys, "ring", "--nproc", "2", "--length", "8", "--num-heads", "3", "--causal")
    assert (code, out, err) == (0, "ran\n", "")
    assert calls[-1]["heads"] == 3 and calls[-1]["is_causal"] is True
    code, out, err = run_cli(capsys, "ring", "--nproc", "2", "--length", "8", "--heads", "5")
    assert (code, out) == (0, "ran\n") and calls[-1]["heads"] == 5
    assert err == "attnlab ring: --heads is deprecated and will be removed in the next release: use --num-heads\n"
    with pytest.raises(SystemExit):
        main(["ring", "--help"])
    help_text = capsys.readouterr().out
    assert "--num-heads" in help_text and "--heads" not in help_text.replace("--num-heads", "")


ALPHABET = " ".join("abcdefghijklmnopqrst")  # one-hot: 20 wide


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("a b c", ["--embed", "random", "--d-model", "8000", "--d-k", "8000"],
         "--d-k: expected d_model × d_k at most 1,048,576, the numbers of a weight matrix the seed's layer draws in "
         "pure Python (about a million a second), got 8,000 × 8,000 = 64,000,000 (--d-model 8000); use a smaller "
         "--d-k or --d-model"),
        ("a b c", ["--embed", "random", "--d-model", "2048", "--num-heads", "2"],
         "--d-model: expected a width of at most 1,024 with --num-heads (four width × width weight matrices, at most "
         "1,048,576 numbers each), got --d-model 2048"),
        (ALPHABET, ["--d-k", "65536"],
         "--d-k: expected d_model × d_k at most 1,048,576, the numbers of a weight matrix the seed's layer draws in "
         "pure Python (about a million a second), got 20 × 65,536 = 1,310,720 (the input's width 20); use a smaller "
         "--d-k"),
    ],
)  # fmt: skip
def test_a_layer_too_large_to_draw_is_refused_naming_the_option(monkeypatch, capsys, text, options, message):
    """--d-model 8000 --d-k 8000 drew 192 million numbers in Python (40 s, 1.9 GB) for a page of three tokens."""
    from attnlab.cli import _sequence

    def never(*_args, **_kwargs):
        raise AssertionError("the layer was made before its size was checked")

    monkeypatch.setattr(_sequence, "SelfAttention", never)
    monkeypatch.setattr(_sequence, "MultiheadAttention", never)
    for command in ("trace", "view"):
        code, _, err = run_cli(capsys, command, "--text", text, *options, *(["-o", "x.html"] * (command == "view")))
        assert code == 2 and err == f"attnlab {command}: error: {message}\n", err


def test_random_vectors_beyond_a_traces_scores_are_refused_naming_d_model(capsys):
    text = " ".join(str(i) for i in range(3000))
    code, _, err = run_cli(capsys, "trace", "--text", text, "--embed", "random", "--d-model", "8192", "--d-k", "2")
    assert code == 2 and err == (
        "attnlab trace: error: --d-model: expected tokens × d_model at most 16,777,216 numbers (--embed random's "
        "vectors), got 3,000 × 8,192 = 24,576,000; use a smaller --d-model or fewer tokens\n"
    ), err


def test_the_default_d_k_keeps_the_widest_input_within_the_weights_bound():
    from attnlab.cli._sequence import MAX_WEIGHTS, MAX_WIDTH, _default_d_k

    assert [_default_d_k(w) for w in (3, 64, 1000, 16384, 32768, MAX_WIDTH)] == [3, 64, 64, 64, 32, 16]
    assert all(w * _default_d_k(w) <= MAX_WEIGHTS for w in range(1, MAX_WIDTH + 1, 97))
