"""The one interface of a model that the library runs, whichever backend runs it: "run
this model on these ids and record what is asked" (the attention weights of every layer,
the next-token logits at the last position, each head's output, or the logits with given
heads' outputs replaced), and the tokenizer's work around it (a text's ids, readable
tokens, one target token). :class:`NumpyRunner` implements it on an
:class:`attnlab.models.Model`, :class:`TransformersRunner` on a transformers model through
attnlab's backend (``attnlab.hf``); :func:`attnlab.runner.as_runner` gives the one for a model.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np

from .._exceptions import ArgumentError, UnsupportedModelError
from .._validation import Array, fail, flag, is_integer, text_ids
from ..engine._statistics import LOCAL_KEYS, SINK_KEYS, TOP_K
from ..models._statistics import statistics_sizes
from ..trace import GenerationTrace, ModelStatistics, ModelTrace
from ..viz._page import PageShape

__all__ = [
    "NUMPY_ONLY",
    "Cells",
    "Runner",
    "check_numpy_only",
    "encoder_decoder_refusal",
    "layer_weights",
    "ordinary_ids",
    "token_ids",
]

Cells = list[tuple[int, int, Array]]  # (layer, head, the head's output (L, Ev)) of each forward of a batch
# vocabulary entries that are not ordinary text even when not marked special: BERT's [unused0], Llama's <0x0A>
_RESERVED = re.compile(r"^(\[.*\]|<.*>)$")


Check = Callable[[], object] | None  # called before each layer or token; what it raises stops the work


class Prompting(NamedTuple):
    """How a text becomes a prompt on attnlab's models: ``truncation`` cuts it to the
    model's positions, ``chat`` puts it in the chat template as a user's message."""

    truncation: bool = False
    chat: bool = False


class Runner(abc.ABC):
    """A model as the library runs it (see the module). Each refusal that both backends
    make is written here once, in the same words, each backend supplying only the facts.
    Its attributes:

    - ``model``, ``tokenizer`` (None for attnlab's model, which has its own), ``name``
      (what traces and tables call it), ``backend`` ("numpy" or "transformers") and
      ``description`` (its model type, or what a GGUF file holds);
    - ``vocab_size``, ``positions`` (the most tokens it takes; None: no limit of its own),
      ``layers`` and ``heads`` (the config's; None where it has none);
    - ``num_layers``, ``num_heads`` and ``layer_labels``: the layers an ablation counts
      (a transformers model's attention modules in the order a forward calls them, known
      after its first :meth:`record`; 0 and [] before);
    - ``prefix``: the first token of a sequence the model reads ([BOS], [CLS]) or none;
    - ``has_head``: whether it has a language-modelling head (logits over the vocabulary);
    - ``causal``: whether it generates text (a causal language model).
    """

    model: Any
    tokenizer: Any
    name: str
    backend: str
    description: str
    vocab_size: int
    positions: int | None
    layers: int | None
    heads: int | None
    num_layers: int = 0
    num_heads: int = 0
    layer_labels: list[str]
    prefix: list[int]
    has_head: bool
    causal: bool

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.description}, {self.layers} layers × {self.heads} heads)"

    def ids(self, text: Any, name: str = "text", cut: bool = False) -> Array:
        """The ids (L,) int64 of a text (the tokenizer's, special tokens added) or of ids,
        checked against the vocabulary and the positions; ``cut``: a text longer than the
        positions cut to them.

        Raises:
            ArgumentError: no token, an id outside the vocabulary, too many tokens; a text
                where there is no tokenizer.
        """
        ids = text
        if isinstance(text, str):
            ids = self.encode(text, name)
            if cut and self.positions is not None:
                ids = ids[: self.positions]
        return text_ids(name, text, ids, self.vocab_size, self.positions)

    def target(self, target: Any) -> tuple[int, str]:
        """The target's id and text: a string that is one token, or a token id.

        Raises:
            ArgumentError: an id outside the vocabulary, a string of another count of tokens.
        """
        if is_integer(target):
            if not 0 <= target < self.vocab_size:
                raise fail("target", f"a token id in 0..{self.vocab_size - 1}", repr(target))
            return int(target), self.tokens(np.array([target]))[0]
        ids = self.plain_ids(target)
        if len(ids) != 1:
            raise fail("target", "one token of the model's vocabulary", f"{target!r}, {len(ids)} tokens")
        return int(ids[0]), str(target)

    def page_shape(self, length: int, layers: int | None = None) -> PageShape | None:
        """The shape of the page of ``length`` tokens through ``layers`` of its layers (None:
        every one), from its config, to check before any forward; None where the config
        lacks the sizes (the page's own check, of its trace, then decides)."""
        width = self.head_width
        if self.heads is None or self.layers is None or not width:
            return None
        return PageShape(length, self.heads, layers or self.layers, (width, width), model=True)

    def most_repeat(self, most: int) -> int:
        """The most n ≤ ``most`` that [prefix] + n ordinary tokens twice take: the positions
        and the ordinary tokens bound it; 0 where not even 2 fit."""
        most = min(most, len(self.ordinary()))
        if self.positions is not None:
            most = min(most, (self.positions - len(self.prefix)) // 2)
        return most if most >= 2 else 0

    def repeated(self, n: int, rng: np.random.Generator) -> list[int]:
        """[prefix] + r + r, r = n distinct ordinary ids drawn with ``rng``.

        Raises:
            ArgumentError: n below 2, or more than the positions or the ordinary tokens take
                (named ``repeat``).
        """
        if not is_integer(n) or n < 2:
            raise fail("repeat", "0 (no induction) or n ≥ 2 random tokens, twice", repr(n))
        length = len(self.prefix) + 2 * n
        if self.positions is not None and length > self.positions:
            most = (self.positions - len(self.prefix)) // 2
            within = f"{'1 + ' if self.prefix else ''}2n tokens within the model's {self.positions} positions"
            raise fail("repeat", f"at most {most} ({within})", n)
        candidates = self.ordinary()
        if n > len(candidates):
            raise fail("repeat", f"at most {len(candidates)}, the ordinary tokens of the vocabulary", n)
        r = rng.choice(candidates, size=n, replace=False)
        return [*self.prefix, *(int(i) for i in r), *(int(i) for i in r)]

    def check_head(self) -> None:
        """Refuse a model without a language-modelling head (before :meth:`record`).

        Raises:
            ArgumentError: named ``model``.
        """
        if not self.has_head:
            self.refuse_no_head()

    def length(self, text: str) -> int:
        """The tokens of ``text``, special ones included, as :meth:`trace` reads it (no forward).

        Raises:
            ArgumentError: a text the model cannot take (too long, empty, no tokenizer),
                named ``text``, as :meth:`ids` refuses it.
        """
        return len(self.ids(text, "text"))

    def generate(
        self,
        text: str,
        count: int,
        check: Check = None,
        layers: Any = None,
        *,
        truncation: bool = False,
        chat: bool = False,
        progress: bool = False,
    ) -> tuple[ModelTrace, GenerationTrace]:
        """``count`` new tokens after ``text``, greedy: the whole sequence's trace (its
        prompt's chat-template tokens marked) and the generation's (``check`` called before
        each new token and in the trace's forward); ``truncation`` and ``chat`` as
        :meth:`trace` takes them; ``progress``: a bar on stderr, tokens generated.

        Raises:
            UnsupportedModelError: an encoder-decoder model.
            ArgumentError: a model that does not generate (named ``model``); ``truncation``
                or ``chat`` on transformers; the generation's own refusals (its text,
                ``max_new_tokens``).
        """
        check_numpy_only(self.backend, self.name, truncation, chat)
        self.check_one_stack()
        if not (self.causal and self.has_head):
            raise fail(
                "model", "a causal language model, which generates text", f"{self.name}, a {self.description} model"
            )
        how = Prompting(truncation, chat)
        generation = self._generation(text, count, check, layers, how, progress)
        full = self.trace(generation.ids, layers, check)
        return self._marked(full, text, generation.generated, how), generation

    def trace(
        self, text: Any, layers: Any = None, check: Check = None, *, truncation: bool = False, chat: bool = False
    ) -> ModelTrace:
        """The trace of ``text`` (a text or ids) through ``layers`` (None: every one);
        ``check`` called before each layer (each attention call on transformers). On
        attnlab's models, ``truncation`` cuts a text to the model's positions and ``chat``
        puts it in the model's chat template as a user's message; the transformers backend
        refuses them (:func:`check_numpy_only`).

        Raises:
            ArgumentError: ``truncation`` or ``chat`` on transformers; the backend's own
                refusals of the text or the layers.
        """
        check_numpy_only(self.backend, self.name, truncation, chat)
        return self._trace(text, layers, check, Prompting(truncation, chat))

    def statistics(
        self, text_or_ids: Any, *, top_k: int = TOP_K, sink_keys: int = SINK_KEYS, local_keys: int = LOCAL_KEYS,
        check: Check = None,
        truncation: bool = False, chat: bool = False,
    ) -> ModelStatistics:  # fmt: skip
        """The statistics of every layer's and head's attention weights in one forward of
        ``text_or_ids`` (:class:`attnlab.models.ModelStatistics`), kept instead of the
        weights: exact, from each layer's own q and k in the forward's tiles, never an
        (L, L) matrix, so at any length the model takes. ``check``, ``truncation`` and
        ``chat`` as :meth:`trace` takes them.

        Args:
            text_or_ids: a text or ids (L,).
            top_k: the keys kept per query, as :func:`attnlab.engine.attention_statistics` takes it.
            sink_keys: the first keys of the sink share, as there.
            local_keys: the last keys of the local share, as there.
            check: called before each layer, as :meth:`trace` takes it.
            truncation: cut a text past the positions, as :meth:`trace` takes it.
            chat: the text as a chat's user turn, as :meth:`trace` takes it.

        Raises:
            ArgumentError, ArgumentTypeError: a count that is not a whole number ≥ 1;
                ``truncation`` or ``chat`` on transformers; what :meth:`trace` refuses.
            UnsupportedModelError: an encoder-decoder model.
            Exception: whatever ``check`` raises.
        """
        sizes = statistics_sizes(top_k, sink_keys, local_keys)
        check_numpy_only(self.backend, self.name, truncation, chat)
        self.check_one_stack()
        return self._statistics(text_or_ids, sizes, check, Prompting(truncation, chat))

    def row(self, text_or_ids: Any, layer: int, head: int, query: int, check: Check = None) -> Array:
        """Query ``query``'s whole row of head ``head``'s weights in layer ``layer`` of one
        forward of ``text_or_ids``, (S,) float64 (the L keys' weights; with sinks, they sum
        to 1 − the sink's): computed for that one row (:func:`attnlab.engine.attention_row`),
        never the (L, L) weights; ``check`` called before each layer (each attention call on
        transformers), as :meth:`trace` calls it.

        Args:
            text_or_ids: a text or ids (L,).
            layer: the layer (on transformers, the attention call in the forward's order).
            head: the head of that layer.
            query: the query's index in 0..L − 1.
            check: None, or a function called before each layer; what it raises ends the work.

        Raises:
            ArgumentError: a layer, head or query out of range (named), or what :meth:`ids`
                refuses.
            UnsupportedModelError: an encoder-decoder model.
            Exception: whatever ``check`` raises.
        """
        self.check_one_stack()
        ids = self.ids(text_or_ids, "text_or_ids")
        rows = self._rows(ids, layer, query, check)  # (H, S)
        if not is_integer(head) or not 0 <= head < rows.shape[0]:
            raise fail("head", f"an index in 0..{rows.shape[0] - 1}", repr(head))
        return rows[int(head)].astype(np.float64)

    def _marked(self, full: ModelTrace, text: str, generated: int, how: Prompting) -> ModelTrace:
        """A generation's whole trace with its prompt's chat-template tokens marked (and
        the notes of how the prompt was made): the transformers backend makes none."""
        return full

    def refuse_no_head(self) -> NoReturn:
        """The one refusal of a model without a language-modelling head (ablation's logits)."""
        expected = "a model with a language-modelling head (logits over the vocabulary)"
        raise fail("model", expected, f"{self.name}, a {self.description} model without one")

    def refuse_no_tokenizer(self, name: str) -> NoReturn:
        """The one refusal of a text given to a model without a tokenizer (``name``: the
        argument that gave it; "target" for one token)."""
        ids = "a token id" if name == "target" else "token ids"
        raise fail(name, f"{ids}: the model has no tokenizer to read a text", "a text")

    # each backend's own
    head_width: int | None  # each head's width of q, k and v (None: not in the config)

    @abc.abstractmethod
    def check_one_stack(self) -> None:
        """Refuse an encoder-decoder model (T5, BART), which an analysis of one stack of
        layers cannot read (:func:`encoder_decoder_refusal`, the one refusal of it).

        Raises:
            UnsupportedModelError: an encoder-decoder model (named ``model``).
        """

    @abc.abstractmethod
    def _trace(self, text: Any, layers: Any, check: Check, how: Prompting) -> ModelTrace:
        """:meth:`trace`'s trace, once ``how`` is known to be one the backend takes."""

    @abc.abstractmethod
    def _statistics(self, text: Any, sizes: dict[str, Any], check: Check, how: Prompting) -> ModelStatistics:
        """:meth:`statistics`' statistics, the sizes checked, once ``how`` is one the backend takes."""

    @abc.abstractmethod
    def _rows(self, ids: Array, layer: int, query: int, check: Check) -> Array:
        """Query ``query``'s row of every head's weights in layer ``layer`` of a forward of
        ``ids`` (L,), (H, S); a layer or query out of range refused, named."""

    @abc.abstractmethod
    def _generation(
        self, text: str, count: int, check: Check, layers: Any, how: Prompting, progress: bool
    ) -> GenerationTrace:
        """:meth:`generate`'s generation, once the model is known to generate."""

    @abc.abstractmethod
    def encode(self, text: str, name: str) -> list[int]:
        """A text's ids, special tokens added (``name``: the argument that gave it)."""

    @abc.abstractmethod
    def plain_ids(self, text: str) -> list[int]:
        """A text's ids without special tokens (``target``'s)."""

    @abc.abstractmethod
    def tokens(self, ids: Array) -> list[str]:
        """The ids' tokens, readable (byte-level pieces as characters)."""

    @abc.abstractmethod
    def ordinary(self) -> Array:
        """The ids an induction sequence is drawn from: every id of the vocabulary that is
        not special, the prefix or a reserved entry."""

    @abc.abstractmethod
    def attention(self, ids: list[int]) -> tuple[list[str], list[bool], Array]:
        """One forward of ``ids``: their tokens, which are special ([] where unknown), and
        every layer's attention weights (layers, H, L, L) float64."""

    @abc.abstractmethod
    def record(self, ids: Array) -> tuple[Array, list[Array]]:
        """One forward's next-token logits at the last position (vocab,) float64 and each
        layer's head outputs (H, L, Ev); the first one also finds the layers of an ablation."""

    @abc.abstractmethod
    def ablated(self, ids: Array, cells: Cells) -> Array:
        """The next-token logits at the last position (B, vocab) float64 of B = len(cells)
        forwards of ``ids`` at once, forward b with the head of ``cells[b] = (layer, head,
        output)`` given that output (L, Ev)."""


def encoder_decoder_refusal(model_type: str) -> UnsupportedModelError:
    """The one refusal of an encoder-decoder model (T5, BART) that a work of one stack of
    layers meets (an ablation, the heads' kinds, a generation, ids), whichever backend or
    command meets it; named ``model`` (the command line's --model)."""
    return UnsupportedModelError(
        f"model: attnlab runs decoder-only and encoder-only models here; {model_type} is an encoder-decoder", "model"
    )


# where a text is cut to the model's positions or put in its chat template
NUMPY_ONLY = "attnlab's NumPy models (GPT-2, BERT, Llama, Qwen2, Mistral, GGUF files)"


def check_numpy_only(backend: str, name: str, truncation: bool, chat: bool) -> None:
    """Refuse ``truncation`` or ``chat`` for the model ``name`` on the transformers
    ``backend``: only attnlab's NumPy models cut a text or put it in a chat template.

    Raises:
        ArgumentError: named ``chat`` or ``truncation`` (the first asked for, in that order).
    """
    asked = [option for option, given in (("chat", chat), ("truncation", truncation)) if flag(option, given)]
    if backend == "transformers" and asked:
        raise ArgumentError(f"{asked[0]}: on {NUMPY_ONLY}; {name} runs in transformers", asked[0])


def token_ids(value: Any) -> set[int]:
    """The token ids a config value names: one id, a list of them, or none (None)."""
    return {int(v) for v in (value if isinstance(value, list) else [value]) if is_integer(v) and v >= 0}


def ordinary_ids(vocab_size: int, excluded: set[int], entries: Sequence[str | None]) -> Array:
    """The ids 0..vocab_size − 1 not in ``excluded`` whose vocabulary entry (None: unknown)
    is not reserved."""
    keep = [i for i in range(vocab_size) if i not in excluded and not _RESERVED.match(entries[i] or "")]
    return np.asarray(keep, dtype=np.int64)


def layer_weights(trace: Any) -> Array:
    """Every layer's weights (layers, H, L, L), once the trace has every layer's
    self-attention."""
    if not isinstance(trace, ModelTrace):
        raise fail("trace", "a model's trace (ModelTrace)", type(trace).__name__, TypeError)
    kinds = getattr(trace, "kinds", None) or {}
    others = sorted({kind for kind in kinds.values() if kind != "self"})
    if others:
        expected = "the self-attention of a decoder-only or encoder-only model (every entry 'self')"
        raise fail("trace", expected, f"entries of kind {', '.join(others)}")
    missing = [i for i in range(trace.num_layers) if i not in trace.layers]
    if missing or not trace.layers:
        expected = f"every layer traced (0..{trace.num_layers - 1}), as model.trace(text) gives"
        raise fail("trace", expected, f"layers {sorted(trace.layers)}; missing {missing}")
    matrices = [np.asarray(trace.layers[i].weights, dtype=np.float64) for i in range(trace.num_layers)]
    for i, weights in enumerate(matrices):
        if weights.ndim == 2:
            matrices[i] = weights = weights[None]  # (L, S) -> (1, L, S): one head
        if weights.ndim != 3 or weights.shape[-1] != weights.shape[-2]:
            raise fail("trace", "self-attention weights (H, L, L) in every layer", f"{weights.shape} in layer {i}")
        if not np.isfinite(weights).all():
            raise fail("trace", "finite weights", f"NaN or infinity in layer {i}")
    if len({w.shape for w in matrices}) != 1:
        raise fail("trace", "the same heads and tokens in every layer", str(sorted({w.shape for w in matrices})))
    return np.stack(matrices)
