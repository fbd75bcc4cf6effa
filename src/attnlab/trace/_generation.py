"""The attention of generated tokens, recorded from the decode steps of a generation with
a KV cache.

A causal model given a prompt of L tokens makes N new ones: the prompt's forward (its L
queries) chooses token L from its last position, then each decode step runs one query, the token
just chosen, against the cached keys of every position so far, and chooses the next. So
the step that chose token L + n (n = 0..N − 1) had one query row, at position L + n − 1,
over the L + n keys before token L + n: that row is token L + n's "attention over
everything before it", and the generation's weights of a layer are those N rows,
(H, N, L + N − 1), row n filled in its first L + n columns (0 past them: keys it did not
have). The last new token is never a query (generation stops once it is chosen).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import Array, fail
from ._display import shown_name

__all__ = ["GenerationTrace", "stack_rows"]


@dataclass
class GenerationTrace:
    """What a generation's decode steps computed, per traced layer.

    Args:
        model: the model's name (a path is kept as its folder's or file's name).
        ids: the prompt's ids and then the generated ones, L + N of them.
        tokens: their tokens, as text.
        prompt_length: L, the prompt's tokens (at least 1).
        weights: layer -> (H, N, L + N − 1) float: row n is the weights of the step that
            chose token L + n, its one query at position L + n − 1 over the keys 0..L + n − 1
            (its first L + n columns; 0 past them).
        names: layer -> its name (a module path, or "layer i").
        special: whether each token is special (<|endoftext|>), L + N of them; [] for none.

    Raises:
        ArgumentError: a prompt of no token, no token generated, tokens and ids of other
            lengths, weights of another shape.
    """

    model: str
    ids: list[int]
    tokens: list[str]
    prompt_length: int
    weights: dict[int, Array] = field(repr=False)
    names: dict[int, str] = field(default_factory=dict)
    special: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        count, prompt = len(self.ids), self.prompt_length
        if not 1 <= prompt < count:
            raise fail("prompt_length", f"a prompt of 1..{count - 1} tokens, before the generated ones", prompt)
        if len(self.tokens) != count or (self.special and len(self.special) != count):
            raise fail("tokens", f"{count} tokens (and marks), one per id", len(self.tokens))
        if not self.weights:
            raise fail("weights", "at least one layer's weights", "none")
        for layer, rows in self.weights.items():
            if rows.ndim != 3 or rows.shape[1:] != (count - prompt, count - 1):
                raise fail(
                    "weights", f"(H, {count - prompt}, {count - 1}) weights per layer", f"{rows.shape} ({layer})"
                )
        self.names = {i: self.names.get(i, f"layer {i}") for i in self.weights}
        self.model = shown_name(self.model) if isinstance(self.model, str) else self.model
        self.special = self.special or [False] * count

    @property
    def generated(self) -> int:
        """N, the tokens generated."""
        return len(self.ids) - self.prompt_length

    @property
    def text(self) -> str:
        """The generated tokens' texts, joined: what the model wrote after the prompt."""
        return "".join(self.tokens[self.prompt_length :])


def stack_rows(rows: list[Array], prompt_length: int) -> Array:
    """One layer's weights (H, N, L + N − 1) from its N recorded rows (H, L + n), each the
    one query row of a step, padded with 0 past its keys.

    Raises:
        ArgumentError: a row that does not have L + n keys (a cache that dropped keys, such
            as a sliding window's, cannot be laid out by position).
    """
    count = len(rows)
    stacked = np.zeros((rows[0].shape[0], count, prompt_length + count - 1), dtype=np.float64)  # (H, N, L + N − 1)
    for n, row in enumerate(rows):
        if row.shape[-1] != prompt_length + n:
            expected = f"{prompt_length + n} keys at step {n}, one per position so far"
            dropped = (
                f"{row.shape[-1]} keys (a sliding-window cache drops keys; its steps cannot be laid out by position)"
            )
            raise fail("the cache", expected, dropped)
        stacked[:, n, : prompt_length + n] = row
    return stacked
