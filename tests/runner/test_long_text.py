"""The long real text that runs at length (runner._long_text): Python's Language Reference as
Python ships it, read by the model's tokenizer and cut to the length asked for."""

from __future__ import annotations

import pytest

import attnlab
from attnlab import ArgumentError
from attnlab.runner._long_text import long_text, long_text_ids


def test_the_text_is_every_topic_of_pythons_language_reference_in_order():
    from pydoc_data.topics import topics

    text = long_text()
    assert len(text) > 300_000  # ample for 8,192 tokens of any tokenizer
    first, second = sorted(topics)[:2]
    assert text.startswith(topics[first].strip() + "\n\n" + topics[second].strip())


def test_the_ids_are_the_first_tokens_of_the_text_as_the_model_reads_it():
    runner = attnlab.load_model("builtin:coref")
    ids = long_text_ids(runner, 20)
    assert ids == [int(i) for i in runner.model.tokenizer.encode(long_text())[:20]]
    with pytest.raises(ArgumentError, match=rf"^length: expected at most the model's {runner.positions} positions"):
        long_text_ids(runner, runner.positions + 1)
