"""attnlab._io, the one bounded reader: a regular file under a limit, checked before it is
opened, its refusal the caller's error when it gives ``refuse``."""

from __future__ import annotations

import os

import pytest

from attnlab import _io
from attnlab._exceptions import CheckpointError, InputError


def test_a_fifo_is_refused_before_it_is_opened_as_a_checkpoint_error_naming_it(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # opening it would block: the test would hang
    with pytest.raises(CheckpointError) as caught:
        _io.read_bounded(fifo, 10)
    assert str(caught.value) == f"{fifo}: expected a regular file, got a FIFO"


def test_refuse_makes_the_callers_error_from_the_reason(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 11)
    with pytest.raises(InputError) as caught:
        _io.check_file(path, 10, lambda reason: InputError(f"big.json: cannot read: {reason}"))
    assert str(caught.value) == "big.json: cannot read: expected a file of at most 10 bytes, got 11 bytes"


def test_a_file_that_grew_past_the_limit_after_its_check_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 11)
    monkeypatch.setattr(_io, "_unreadable", lambda path, limit: None)  # as if it had 10 bytes when checked
    with pytest.raises(CheckpointError) as caught:
        _io.read_bounded(path, 10)
    assert str(caught.value) == f"{path}: expected a file of at most 10 bytes, got more"
    assert _io.read_bounded(path, 11) == b"x" * 11


def test_a_fifo_swapped_in_after_the_check_is_refused_not_read(tmp_path, monkeypatch):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # as if a regular file had been there when checked, then replaced: a blocking read would hang
    monkeypatch.setattr(_io, "_unreadable", lambda path, limit: None)
    with pytest.raises(CheckpointError) as caught:
        _io.read_bounded(fifo, 10)
    assert str(caught.value) == f"{fifo}: expected a regular file, got a FIFO"
