"""The command line's input files as a hostile user makes them: a FIFO, /dev/zero, a file
over the limit, .npy headers of another version, a negative shape or Python 2's format, a
path holding a newline, a text holding a lone surrogate. Each ends in one line on standard
error (no warning, no traceback) and exit status 2; the expected lines are written out here."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.cli import _inputs
from helpers import run_cli

SUFFIXES = [".json", ".csv", ".npy"]


def attnlab(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``attnlab *argv`` in a process of its own, so that a read that blocks (a FIFO) or
    never ends (/dev/zero) fails the test at the timeout instead of hanging the suite, and
    so that whatever it writes on standard error (a warning included) is seen."""
    return subprocess.run(
        [sys.executable, "-m", "attnlab.cli", *argv], cwd=cwd, capture_output=True, text=True, timeout=60
    )


def npy(version: tuple[int, int], header: str, data: bytes) -> bytes:
    """An .npy file written by hand: the magic string, the version's two bytes, the
    header's length (2 bytes in 1.0, 4 after), the header padded with spaces to a multiple
    of 64 bytes and ended by a newline, then the data."""
    size = "<H" if version[0] == 1 else "<I"
    start = 8 + struct.calcsize(size)
    text = header + " " * (-(start + len(header) + 1) % 64) + "\n"
    return b"\x93NUMPY" + bytes(version) + struct.pack(size, len(text)) + text.encode("latin-1") + data


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_fifo_is_refused_before_it_is_opened(tmp_path, suffix):
    os.mkfifo(tmp_path / f"in{suffix}")  # no writer: opening it for reading would block for ever
    result = attnlab(tmp_path, "trace", f"in{suffix}")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"attnlab trace: error: in{suffix}: cannot read: expected a regular file, got a FIFO\n"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_link_to_dev_zero_is_refused_as_a_device(tmp_path, suffix):
    (tmp_path / f"in{suffix}").symlink_to("/dev/zero")  # read to its end, it would fill the memory
    result = attnlab(tmp_path, "trace", f"in{suffix}")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"attnlab trace: error: in{suffix}: cannot read: expected a regular file, got a character device\n"
    )


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_file_over_the_limit_is_refused_by_its_size_unread(tmp_path, monkeypatch, capsys, suffix):
    with open(tmp_path / f"big{suffix}", "wb") as f:  # 1 GiB and a byte, sparse: no disk, and nothing to read
        f.truncate(2**30 + 1)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "trace", f"big{suffix}")
    assert (code, out) == (2, "")
    assert err == (
        f"attnlab trace: error: big{suffix}: cannot read: expected a file of at most 1,073,741,824 bytes, "
        "got 1,073,741,825 bytes\n"
    )


def test_standard_input_is_read_up_to_the_limit(monkeypatch, capsys):
    import io

    monkeypatch.setattr(_inputs, "MAX_BYTES", 10)
    monkeypatch.setattr(sys, "stdin", io.StringIO("[[1, 2, 3]]"))  # 11 characters
    code, out, err = run_cli(capsys, "trace", "-")
    assert (code, out) == (2, "")
    assert err == "attnlab trace: error: standard input: expected at most 10 characters, got more\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO("[[1, 2.5]]"))  # 10 characters: read
    code, out, err = run_cli(capsys, "trace", "-", "--format", "json")
    assert (code, err) == (0, "")
    assert json.loads(out)["inputs"] == [[1.0, 2.5]]


FOUR = struct.pack("<4d", 1.0, 2.0, 3.0, 4.0)
REFUSED_NPY = {
    "v9.npy": (
        npy((9, 0), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", FOUR),
        "cannot read: expected an .npy file of format version 1.0, 2.0 or 3.0 (what NumPy reads), got version 9.0",
    ),
    "v1-1.npy": (
        npy((1, 1), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", FOUR),
        "cannot read: expected an .npy file of format version 1.0, 2.0 or 3.0 (what NumPy reads), got version 1.1",
    ),
    "negative.npy": (
        npy((1, 0), "{'descr': '<f8', 'fortran_order': False, 'shape': (-3, 3), }", FOUR * 3),
        "cannot read: its header's shape: expected sizes of at least 0, got (-3, 3)",
    ),
    "negative-v2.npy": (
        npy((2, 0), "{'descr': '<f8', 'fortran_order': False, 'shape': (2, -2), }", FOUR),
        "cannot read: its header's shape: expected sizes of at least 0, got (2, -2)",
    ),
    # Python 2 wrote long integers as 2L: NumPy reads them, warning on stderr that it did
    "py2-negative.npy": (
        npy((1, 0), "{'descr': '<f8', 'fortran_order': False, 'shape': (-3L, 3L), }", FOUR * 3),
        "cannot read: its header's shape: expected sizes of at least 0, got (-3, 3)",
    ),
    "py2-bool.npy": (
        npy((1, 0), "{'descr': '|b1', 'fortran_order': False, 'shape': (2L, 2L), }", b"\x01\x00\x00\x01"),
        "expected an array of numbers (no pickle), got dtype bool",
    ),
    "py2-complex.npy": (
        npy((1, 0), "{'descr': '<c16', 'fortran_order': False, 'shape': (1L, 2L), }", FOUR),
        "expected an array of numbers (no pickle), got dtype complex128",
    ),
    "py2-object.npy": (
        npy((1, 0), "{'descr': '|O', 'fortran_order': False, 'shape': (1L, 1L), }", b""),
        "expected an array of numbers (no pickle), got dtype object",
    ),
}


@pytest.mark.parametrize("name", REFUSED_NPY)
def test_npy_headers_numpy_cannot_use_are_refused_in_one_line_without_warnings(tmp_path, name):
    content, message = REFUSED_NPY[name]
    (tmp_path / name).write_bytes(content)
    result = attnlab(tmp_path, "trace", name)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"attnlab trace: error: {name}: {message}\n"  # no UserWarning before it


@pytest.mark.parametrize(
    ("version", "shape"), [((1, 0), "(2L, 2L)"), ((2, 0), "(2, 2)"), ((3, 0), "(2, 2)")], ids=["py2", "v2", "v3"]
)
def test_npy_files_numpy_reads_are_read_silently(tmp_path, version, shape):
    """Every version NumPy writes, and a Python 2 header: read, and no warning on stderr."""
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': {shape}, }}"
    (tmp_path / "x.npy").write_bytes(npy(version, header, FOUR))
    result = attnlab(tmp_path, "trace", "x.npy", "--format", "json")
    assert (result.returncode, result.stderr) == (0, "")
    assert json.loads(result.stdout)["inputs"] == [[1.0, 2.0], [3.0, 4.0]]


def test_a_path_holding_control_characters_gives_one_line(tmp_path, monkeypatch, capsys):
    name = "a\nb\tc\u2028d.json"  # a newline, a tab, a line separator
    (tmp_path / name).write_text("[]")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "trace", name)
    assert (code, out) == (2, "")
    assert err == "attnlab trace: error: a\\nb\\tc\\u2028d.json: the sequence is empty\n"


def test_a_model_folder_holding_a_newline_gives_one_line(tmp_path, capsys):
    folder = tmp_path / "p\nnewline"
    folder.mkdir()
    (folder / "config.json").write_text("{")  # whichever reads it names it, with the folder's path
    code, out, err = run_cli(capsys, "trace", "--model", str(folder), "--text", "hi")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.endswith("\n") and "\r" not in err
    assert err.startswith("attnlab trace: error: ") and "p\\nnewline" in err


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    from checkpoints import tiny_checkpoint_with_tokenizer

    return tiny_checkpoint_with_tokenizer(tmp_path_factory.mktemp("gpt2-surrogate"))


@pytest.mark.parametrize("command", ["trace", "view", "plot", "ablate", "heads"])
def test_a_lone_surrogate_in_the_text_names_the_text_option(gpt2, tmp_path, capsys, command):
    """$'ab\\xffcd' on a Linux command line: Python makes the byte 0xff the lone surrogate
    U+DCFF, at position 2 (after a and b)."""
    output = {"view": ["-o", str(tmp_path / "v.html")], "plot": ["-o", str(tmp_path / "p.png")]}.get(command, [])
    code, out, err = run_cli(capsys, command, "--model", str(gpt2), "--text", "ab\udcffcd", *output)
    assert (code, out) == (2, "")
    message = "--text: expected a text of Unicode characters, got a lone surrogate at position 2"
    assert err == f"attnlab {command}: error: {message}\n"
