"""A long real text, offline, the same on every machine with the same Python: the Python
Language Reference as Python itself ships it (``pydoc_data.topics``, the text ``help()``
shows), every topic in the order of its name. About 465,000 characters of English prose
with code in it, about 100,000 tokens: enough for any model's positions that attnlab runs
at length (SmolLM2's 8,192).

Why it is fair: people wrote it to be read, not to test attention; it has what long texts
have (sections that refer back, repeated names, code that repeats a few words, headings),
and nothing was picked for a result. It is no random text, whose attention would be flat,
and no repeated one, which shows induction rather than reading (the experiments make that
one themselves). It comes with Python, so no download and no file of the package's own
changes it; a different Python version may word some topics differently.
"""

from __future__ import annotations

from typing import Any

from .._validation import fail, positive_int

__all__ = ["LONG_TEXT_SOURCE", "long_text", "long_text_ids"]

LONG_TEXT_SOURCE = "the Python Language Reference as Python ships it (pydoc_data.topics)"


def long_text() -> str:
    """The whole text: every topic of ``pydoc_data.topics``, by name, apart by a blank line."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics))


def long_text_ids(runner: Any, length: int) -> list[int]:
    """The first ``length`` token ids of :func:`long_text` as ``runner``'s tokenizer reads it
    (its special tokens first, as :meth:`Runner.ids` adds them).

    Args:
        runner: an :class:`attnlab.runner.Runner` with a tokenizer.
        length: the tokens wanted, at most the model's positions.

    Raises:
        ArgumentError: a length below 1 or past the model's positions (or past the text).
    """
    length = positive_int("length", length)
    if runner.positions is not None and length > runner.positions:
        raise fail("length", f"at most the model's {runner.positions} positions", length)
    ids = runner.encode(long_text(), "text")
    if length > len(ids):
        raise fail("length", f"at most the text's {len(ids)} tokens", length)
    return [int(i) for i in ids[:length]]
