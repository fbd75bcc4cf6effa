"""What the live page asks of a model, and its answer: the page of a typed text (with a
second text, generated tokens, rollout and flow, ablated heads, the heads' kinds), opening
on the layer, head and query the reader had where they still exist.

One :class:`Session` holds one model, loaded once: the seed's layer (no model), an
:class:`attnlab.models.Model`, or a transformers model on attnlab's backend (attnlab.hf).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .._exceptions import renamed
from .._validation import ArgumentError, ArgumentTypeError, Array, AttnlabError, fail, is_integer
from ..layers._self_attention import SelfAttention
from ..layers._text import embed_tokens, split_text
from ..runner import Runner
from ..trace import GenerationTrace, ModelTrace
from ..trace._codec import json_ready
from ..trace._trace import Trace
from ..viz._page import PageShape, check_page_size, opening, render_page
from ..viz._views import Views, check_flows_size, check_views_size, views_size

__all__ = ["MAX_GENERATE", "MAX_TEXT", "Request", "RowRequest", "Session"]

MAX_TEXT = 20_000  # characters of a typed text; its tokens are capped by the page's own limits (viz.PAGE_LIMITS)
MAX_GENERATE = 64  # new tokens a request may ask for: each is a forward while the reader waits
MAX_ABLATED = 64  # heads ablated in one request
_SEED = 42  # the seed layer's weights, as `attnlab view` draws them by default


@dataclass(frozen=True)
class Request:
    """One redraw: ``text``; ``second``, a text to compare under the same head; ``generate``
    new tokens after ``text``; ``rollout`` and flow; the (layer, head) pairs to ``ablate``;
    the ``layer``, ``head`` and ``query`` the reader chose (kept where the new trace has them;
    None: the new trace's own, such as builtin:coref's pronoun)."""

    text: str
    second: str | None = None
    generate: int = 0
    rollout: bool = False
    ablate: tuple[tuple[int, int], ...] = ()
    layer: int | None = None
    head: int | None = None
    query: int | None = None

    @classmethod
    def from_json(cls, data: Any) -> Request:
        """A request from the page's JSON object, each field checked: ``second`` null or ""
        and ``ablate`` null or [] are none, any other value of another type refused.

        Raises:
            ArgumentError, ArgumentTypeError: a field missing, of another type or out of range,
                named as the page names it.
        """
        if not isinstance(data, dict):
            raise fail("request", "a JSON object", type(data).__name__, TypeError)
        text, second = data.get("text"), data.get("second")
        second = None if second == "" else second
        for name, value in (("text", text), ("second text", second)):
            if value is not None and not isinstance(value, str):
                raise fail(name, "a string", type(value).__name__, TypeError)
            if value is not None and len(value) > MAX_TEXT:
                raise fail(name, f"at most {MAX_TEXT:,} characters", f"{len(value):,}")
        if text is None:
            raise fail("text", "a string", "nothing", TypeError)
        numbers = {name: data.get(name) for name in ("generate", "layer", "head", "query")}
        for name, value in numbers.items():
            if value is not None and not (is_integer(value) and value >= 0):
                raise fail(name, "a whole number ≥ 0", repr(value))
        generate = numbers["generate"] or 0
        if generate > MAX_GENERATE:
            raise fail("generate", f"at most {MAX_GENERATE} new tokens", generate)
        pairs = data.get("ablate")
        pairs = [] if pairs is None else pairs
        if not isinstance(pairs, list) or not all(_is_pair(pair) for pair in pairs) or len(pairs) > MAX_ABLATED:
            raise fail("ablate", f"a list of at most {MAX_ABLATED} [layer, head] pairs", repr(pairs)[:80], TypeError)
        rollout = data.get("rollout", False)
        if not isinstance(rollout, bool):
            raise fail("rollout", "true or false", repr(rollout), TypeError)
        return cls(
            text, second, generate, rollout, tuple(dict.fromkeys((int(layer), int(head)) for layer, head in pairs)),
            numbers["layer"], numbers["head"], numbers["query"],
        )  # fmt: skip


@dataclass(frozen=True)
class RowRequest:
    """A clicked query's whole row: the weights of query ``query`` of head ``head`` in layer
    ``layer`` over every key of ``text``, computed for that one row (``POST /api/row``)."""

    text: str
    layer: int
    head: int
    query: int

    @classmethod
    def from_json(cls, data: Any) -> RowRequest:
        """A row request from the page's JSON object: ``text`` a string, ``layer``, ``head``
        and ``query`` whole numbers ≥ 0.

        Raises:
            ArgumentError, ArgumentTypeError: a field missing, of another type or out of range, named.
        """
        if not isinstance(data, dict):
            raise fail("request", "a JSON object", type(data).__name__, TypeError)
        text = data.get("text")
        if not isinstance(text, str):
            raise fail("text", "a string", type(text).__name__ if text is not None else "nothing", TypeError)
        if len(text) > MAX_TEXT:
            raise fail("text", f"at most {MAX_TEXT:,} characters", f"{len(text):,}")
        cell: list[int] = []
        for name in ("layer", "head", "query"):
            value = data.get(name)
            if not (is_integer(value) and value >= 0):
                raise fail(name, "a whole number ≥ 0", repr(value))
            cell.append(int(value))
        return cls(text, *cell)


def _is_pair(pair: Any) -> bool:
    return isinstance(pair, list) and len(pair) == 2 and all(is_integer(x) and x >= 0 for x in pair)


class _Model(Protocol):
    """A model as the live page runs it: its name, its layers and heads, a text's count of
    tokens (no forward), a text's trace (its page's size checked first), a generation, the
    heads an ablation may name and an ablation (each stopping where ``check`` raises)."""

    name: str
    layers: int | None  # None: the seed's one layer
    positions: int | None  # the most tokens it takes; None: no limit of its own
    heads: int | None  # each layer's; None: the seed's (its one layer is not ablated), or not in the config

    def length(self, text: str, name: str) -> int: ...
    def trace(self, text: str, name: str, check: Callable[[], object]) -> Trace | ModelTrace: ...
    def generate(self, text: str, count: int, check: Callable[[], object]) -> tuple[ModelTrace, GenerationTrace]: ...
    def check_ablated(self, heads: tuple[tuple[int, int], ...]) -> None: ...
    def ablate(self, text: str, heads: list[tuple[int, int]], check: Callable[[], object]) -> dict[str, Any]: ...


class Session:
    """The live page's model, loaded once, and the answer to each :class:`Request`.

    Args:
        model: None (the seed's :class:`attnlab.SelfAttention` on the typed tokens, one-hot,
            random weights of seed 42, as ``attnlab view --text`` draws them), an
            :class:`attnlab.models.Model`, a transformers model (with ``tokenizer``), or
            :func:`attnlab.load_model`'s.
        tokenizer: a transformers model's tokenizer; None for the others.

    Raises:
        ArgumentTypeError: a model of none of these kinds.
    """

    def __init__(self, model: Any = None, tokenizer: Any = None) -> None:
        self.model: _Model = _wrapped(model, tokenizer)

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def flow_limit(self) -> int | None:
        """The most tokens whose flow the page computes (its model's layers'
        ``flow_length_limit``); None for the seed's layer, which has no rollout."""
        from ..analysis._rollout import flow_length_limit

        return None if self.model.layers is None else flow_length_limit(self.model.layers)

    @property
    def stated_flow_limit(self) -> int | None:
        """The flow limit the page states beside its box: None where no text the model takes
        passes it (builtin:coref's 64 positions, under its 110) or there is no rollout."""
        limit, positions = self.flow_limit, self.model.positions
        return None if limit is None or (positions is not None and positions <= limit) else limit

    def answer(self, request: Request, check: Callable[[], object] = lambda: None) -> dict[str, Any]:
        """The page of ``request`` as HTML text (``"page"``), the view it opens on
        (``"opens"``: the page's layer position, head and query; ``"own"``: the view the trace
        opens on by itself, such as builtin:coref's pronoun), the generated text
        (``"generated"``, or None), the ablated heads' effects (``"ablation"``: the metric
        and, per ablated head, its value) and the notes the page shows (``"notes"``: flow
        left out of a text over ``flow_limit`` tokens, as ``attnlab view --rollout`` leaves
        it out; the rollout, cheap, is there at any length).

        Before the model runs, what would be refused after is refused: heads to ablate that
        the model does not have (a transformers model's: after its trace, before the
        ablation), views (rollout and flow, the generated tokens' rows, the
        two texts' weights) over the page's MAX_VIEWS_BYTES, from the texts' counts of
        tokens. ``check`` is called before each stage (the trace, the second text's,
        rollout, flow and each of its positions, the ablation, the heads' kinds, the page),
        and inside the traces' forwards (before each layer), the generation (before each new
        token) and the ablation (before each head): the live server's raises to stop a
        request that its page replaced or left, or when the server is stopping.

        Args:
            request: the redraw asked for.
            check: called between stages; what it raises ends the work.

        Raises:
            AttnlabError: a text the model cannot take (too long for its positions or for
                the page, empty), a view this model does not offer or too large for the
                page, heads it does not have, named by its field.
            Exception: whatever ``check`` raises.
        """
        if request.second is not None and request.generate:
            raise fail("second text", "none while generating (the prompt is one text)", "a second text")
        check()
        self._refuse_early(request)
        generation = None
        if request.generate:
            trace: Trace | ModelTrace
            trace, generation = self.model.generate(request.text, request.generate, check)
        else:
            trace = self.model.trace(request.text, "text", check)
        check()
        second = None if request.second is None else self.model.trace(request.second, "second text", check)
        if second is not None and not (isinstance(trace, ModelTrace) and isinstance(second, ModelTrace)):
            raise fail("second text", "a model to compare two texts through (serve --model)", "the seed's layer")
        rolled, flowed, notes = _rollout_and_flow(trace, request.rollout, check)
        check()
        if request.ablate and isinstance(trace, ModelTrace):  # a transformers model's modules: known from its trace
            _check_ablated(request.ablate, trace.num_layers or None, trace.num_heads or None, True, self.name)
        ablation = None if not request.ablate else self.model.ablate(request.text, list(request.ablate), check)
        check()
        views = Views(second, generation, rolled, flowed, ablation, _kinds(trace))
        opens = _opens(trace, request)
        generated = None if generation is None else generation.text
        check()
        page = render_page(trace, opens, views)
        return {
            "page": page, "opens": opens, "own": opening(trace), "generated": generated, "ablation": ablation,
            "notes": notes,
        }  # fmt: skip

    def row(self, request: RowRequest, check: Callable[[], object] = lambda: None) -> dict[str, Any]:
        """The whole row of a clicked query (:meth:`attnlab.runner.Runner.row`): ``{"layer",
        "head", "query", "weights"}``, ``weights`` the S keys' weights (null where not a
        number), computed for that one row, never the (L, L) weights; ``check`` as
        :meth:`answer` calls it (before each layer).

        Raises:
            AttnlabError: the seed's layer (its page holds every weight), a text the model
                cannot take, a layer, head or query it does not have, named.
            Exception: whatever ``check`` raises.
        """
        if not isinstance(self.model, _RunnerModel):
            raise fail("row", "a model's layers (serve --model)", "the seed's layer, whose page holds every row")
        check()
        runner = self.model.runner
        weights = _named("text", lambda: runner.row(request.text, request.layer, request.head, request.query, check))
        cell = {"layer": request.layer, "head": request.head, "query": request.query}
        return {**cell, "weights": json_ready(weights.tolist())}

    def _refuse_early(self, request: Request) -> None:
        """Refuse, before the model runs, heads to ablate that it does not have and views
        too large for the page, from the texts' counts of tokens (a tokenizer's work, no
        forward)."""
        model = self.model
        if request.ablate:
            model.check_ablated(request.ablate)
        if model.layers is None or model.heads is None or self.flow_limit is None:
            return
        length = model.length(request.text, "text")
        second = None if request.second is None else model.length(request.second, "second text")
        total = length + request.generate  # the page's tokens: the prompt's and the most it may generate
        flows = 0 if not request.rollout else 1 if total > self.flow_limit else 2
        hint = "use fewer tokens" + (" or generated tokens" if request.generate else "")
        parts = views_size(model.layers, model.heads, length, flows=flows, generate=request.generate, second=second)
        name = "views" if request.generate or second is not None else "rollout"
        check_views_size(parts, name, total, model.layers, hint)


def _rollout_and_flow(
    trace: Trace | ModelTrace, wanted: bool, check: Callable[[], object]
) -> tuple[Array | None, Array | None, list[str]]:
    """The rollout and flow of ``trace`` when ``wanted``, and the page's notes: flow only up
    to ``flow_length_limit`` tokens, as ``attnlab view --rollout`` computes it (its
    max-flows take minutes past them), a note saying so; ``check`` called before each and
    inside flow."""
    if not wanted:
        return None, None, []
    if not isinstance(trace, ModelTrace):
        raise fail("rollout", "a model's layers (serve --model)", "the seed's one layer")
    from ..analysis import flow, rollout  # imported when a page asks, not with attnlab
    from ..analysis._rollout import flow_length_limit

    length, limit = len(trace.tokens), flow_length_limit(trace.num_layers)
    check_flows_size(trace.num_layers, length, 1 if length > limit else 2, "rollout")
    check()
    rolled = rollout(trace)
    if length > limit:
        return rolled, None, [f"flow is shown up to {limit} tokens (this text has {length})"]
    return rolled, flow(trace, check=check), []


def _opens(trace: Trace | ModelTrace, request: Request) -> dict[str, int]:
    """The view the new page opens on: the reader's layer, head and query, each kept while
    the ones before it still exist in the new trace (a shorter text loses the query)."""
    wanted = (request.layer, request.head, request.query)
    for kept in (3, 2, 1, 0):
        try:
            return opening(trace, *wanted[:kept])
        except ArgumentError:
            continue
    return opening(trace)  # pragma: no cover - the trace's own view always exists


def _kinds(trace: Trace | ModelTrace) -> dict[str, Any] | None:
    """The head types of a model's trace of every layer (its text's scores; no induction),
    for the model view's outlines; None where they do not apply (one layer, cross-attention)."""
    from ..analysis import head_types

    if not isinstance(trace, ModelTrace):
        return None
    try:
        return head_types(trace).to_dict()
    except AttnlabError:
        return None


def _wrapped(model: Any, tokenizer: Any) -> _Model:
    """None: the seed's layer; else the model's runner (:func:`attnlab.runner.as_runner`),
    as the page asks of it."""
    from ..runner._open import as_runner

    if model is None:
        if tokenizer is not None:
            raise fail("tokenizer", "None without a model", type(tokenizer).__name__, TypeError)
        return _SeedLayer()
    expected = "None, an attnlab.models.Model or a transformers model"
    return _RunnerModel(as_runner(model, tokenizer, "model", expected))


class _SeedLayer:
    """The seed's layer on the typed tokens: one-hot over the distinct tokens, d_k their
    count up to 64, as ``attnlab view --text`` runs it."""

    name = "the article's SelfAttention (random weights, seed 42)"
    layers: int | None = None
    positions: int | None = None
    heads: int | None = None

    def length(self, text: str, name: str) -> int:
        return len(self._words(text, name))

    def _words(self, text: str, name: str) -> list[str]:
        try:
            return split_text(text)
        except ArgumentError:
            raise fail(name, "a text of at least one token", repr(text)) from None

    def trace(self, text: str, name: str, check: Callable[[], object]) -> Trace:
        words = self._words(text, name)
        width = len(set(words))
        d_k = min(width, 64)
        check_page_size(PageShape(len(words), 1, 1, (d_k, d_k), model=False), name)
        trace = SelfAttention(width, d_k, seed=_SEED).trace(embed_tokens(words, "onehot", width, _SEED), tokens=words)
        trace.random_seed = _SEED
        return trace

    def generate(self, text: str, count: int, check: Callable[[], object]) -> tuple[ModelTrace, GenerationTrace]:
        raise fail("generate", "a model that generates (serve --model of a causal model)", "the seed's layer")

    def check_ablated(self, heads: tuple[tuple[int, int], ...]) -> None:
        raise fail("ablate", "a model with a head to the vocabulary (serve --model)", "the seed's layer")

    def ablate(self, text: str, heads: list[tuple[int, int]], check: Callable[[], object]) -> dict[str, Any]:
        raise fail("ablate", "a model with a head to the vocabulary (serve --model)", "the seed's layer")


class _RunnerModel:
    """A model through its runner, either backend: each error about its text named by the
    page's field, and each page's size checked from the config before the forward (where
    the config has the sizes) and from the trace after."""

    def __init__(self, runner: Runner) -> None:
        self.runner, self.name = runner, runner.name
        self.layers, self.heads, self.positions = runner.layers, runner.heads, runner.positions

    def length(self, text: str, name: str) -> int:
        """The tokens of ``text``, special ones included (refused: too long for the model)."""
        return int(_named(name, lambda: self.runner.length(text)))

    def trace(self, text: str, name: str, check: Callable[[], object]) -> ModelTrace:
        self._check_page(self.length(text, name), name)
        trace = _named(name, lambda: self.runner.trace(text, check=check))
        check_page_size(trace, name)
        return trace

    def generate(self, text: str, count: int, check: Callable[[], object]) -> tuple[ModelTrace, GenerationTrace]:
        self._check_page(self.length(text, "text") + count, "generate")

        def generated() -> tuple[ModelTrace, GenerationTrace]:  # a model that does not generate: named "generate"
            return _named("generate", lambda: self.runner.generate(text, count, check), ("max_new_tokens", "model"))

        full, generation = _named("text", generated)
        check_page_size(full, "generate")
        return full, generation

    def _check_page(self, length: int, name: str) -> None:
        """Refuse, before the model runs, a page of ``length`` tokens too large for a browser."""
        shape = self.runner.page_shape(length)
        if shape is not None:
            check_page_size(shape, name)

    def check_ablated(self, heads: tuple[tuple[int, int], ...]) -> None:
        """Its head to the vocabulary and (attnlab's models) its layers and heads; a
        transformers model's layers (attention modules, in the order a forward calls them:
        a vision tower's too) are checked against its trace."""
        known = self.runner.backend == "numpy"
        layers, count = (self.layers, self.heads) if known else (None, None)
        _check_ablated(heads, layers, count, self.runner.has_head, self.name)

    def ablate(self, text: str, heads: list[tuple[int, int]], check: Callable[[], object]) -> dict[str, Any]:
        from ..analysis import ablate

        return _named("ablate", lambda: ablate(self.runner, text, heads=heads, check=check).to_dict(), ("heads",))


def _check_ablated(
    heads: tuple[tuple[int, int], ...], layers: int | None, count: int | None, has_head: bool, name: str
) -> None:
    """Refuse, before any forward, an ablation of a model without a head to the vocabulary
    (``has_head``), or a (layer, head) pair outside its ``layers`` and ``count`` heads a
    layer (None: not known, left to ablate)."""
    if not has_head:
        raise fail("ablate", "a model with a head to the vocabulary (serve --model of one)", f"{name}, which has none")
    if layers is None or count is None:
        return
    outside = next(((layer, head) for layer, head in heads if not (layer < layers and head < count)), None)
    if outside is not None:
        expected = f"[layer, head] pairs with layer in 0..{layers - 1} and head in 0..{count - 1}"
        raise fail("ablate", expected, repr(list(outside)))


def _named(name: str, work: Any, arguments: tuple[str, ...] = ("text_or_ids", "text_or_inputs", "text")) -> Any:
    """``work()``, its errors about its ``arguments`` (its text) named as the page's field ``name``."""
    try:
        return work()
    except AttnlabError as error:
        message = renamed(error, dict.fromkeys(arguments, name))
        if message is None:
            raise
        kind = ArgumentTypeError if isinstance(error, TypeError) else ArgumentError
        raise kind(message, name) from None
