"""A text as the seed's layer reads it: its tokens, split as a reader sees them, and one
vector per token."""

from __future__ import annotations

import numpy as np

from .._validation import Array, fail

__all__ = ["embed_tokens", "split_text"]


def split_text(text: str) -> list[str]:
    """Tokens of ``text``: split on whitespace, or into characters when it has none, a
    character being what a reader sees as one: a grapheme cluster (Unicode's UAX #29, the
    ``regex`` library's ``\\X``), so that a ZWJ emoji such as 👩‍💻, a flag or a letter with its
    combining accents is one token, not its code points.

    Raises:
        ArgumentError: ``text`` has no token (empty, or only whitespace).
    """
    import regex  # imported when a text is split (90 ms), not with attnlab

    tokens = text.split() if any(c.isspace() for c in text.strip()) else regex.findall(r"\X", text.strip())
    if not tokens:
        raise fail("text", "a text of at least one token", repr(text))
    return tokens


def embed_tokens(tokens: list[str], embed: str, d_model: int, seed: int) -> Array:
    """(L, d_model) vectors: one-hot over the distinct tokens in order of first appearance
    (d_model = their count), or seeded N(0, 1) vectors of width ``d_model``, one per
    distinct token."""
    vocabulary = {token: n for n, token in enumerate(dict.fromkeys(tokens))}
    index = [vocabulary[t] for t in tokens]
    if embed == "onehot":
        table = np.eye(len(vocabulary))
    else:
        table = np.random.default_rng(seed).standard_normal((len(vocabulary), d_model))
    return table[index]
