"""Head ablation and activation patching: the effect on the next-token prediction of
replacing one head's output at a time, on attnlab's NumPy models and on transformers
models through attnlab's backend."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .._progress import progress_bar
from .._validation import Array, fail, flag, is_integer, optional_callable
from ..runner._open import as_runner
from ._ablation import Ablation

__all__ = ["MODES", "ablate"]

MODES = ("zero", "mean")  # what a head's output becomes (ablate --mode); "patch" is patch_text's
# forwards run side by side as one batch: at most this many tokens in all (and 64 forwards)
_BATCH_TOKENS = 4096


def ablate(
    model: Any, text: Any, *, heads: Any, mode: str = "zero", target: Any = None, patch_text: Any = None,
    tokenizer: Any = None, progress: bool = False, check: Callable[[], object] | None = None,
) -> Ablation:  # fmt: skip
    """For each chosen (layer, head), run the model on ``text`` with that head's output
    replaced, and measure the change in the next-token prediction at the last position.

    The replacement, in every position: zero (``mode="zero"``); the head's mean output over
    the text's positions, O_h ← mean_i O_h[i] (``mode="mean"``); or, with ``patch_text``,
    its output on that text, position by position (activation patching: the texts must have
    as many tokens). The effect, with a ``target`` token: Δ = log p_ablated(target) − log
    p(target); without: KL(p ‖ p_ablated) = Σ_v p_v·(log p_v − log p_ablated,v), p the
    unablated next-token distribution, in float64. On a NumPy model the output (B, H, L, Ev)
    is replaced where the engine returns it, before the out projection; on a transformers
    model (loaded with any attention implementation), the function registered as
    attn_implementation="attnlab" is wrapped while the forwards run, and its output
    (B, L, H, Ev) replaced there (so, while it runs, that registration is the wrapper for the
    whole process: run one ablation at a time). The forwards run several at a time, as one batch
    (with a ``check``, one at a time).

    Args:
        model: an :class:`attnlab.models.Model` (or :func:`attnlab.load_model`'s), or a
            transformers model with a language-modelling head (``…ForCausalLM``,
            ``…ForMaskedLM``) whose attention goes through transformers' attention
            interface, decoder-only or encoder-only.
        text: a text (tokenized with the model's tokenizer, special tokens added) or token
            ids (L,).
        heads: "all", or the (layer, head) pairs to ablate; a transformers model's layers
            are its attention modules in the order a forward runs them.
        mode: "zero" or "mean"; with ``patch_text``, "zero" (its default: patching replaces
            the output with the other text's).
        target: a string that is one token (or a token id) whose log-probability is
            measured; None: the KL divergence.
        patch_text: another text (or ids) of as many tokens, whose head outputs are patched in.
        tokenizer: a transformers model's tokenizer (to read texts and the target); a
            NumPy model has its own.
        progress: show a progress bar on stderr, heads done of all, with an estimate.
        check: None, or a function called before each forward: the unablated text's (and
            patch text's), then each ablated head's, one head a forward; what it raises ends
            the ablation (``attnlab serve``'s, to stop a request its page left).

    Returns:
        :class:`Ablation`: the (layers, heads) effect (NaN where not ablated), the unablated
        log-probability, the labels; ``to_dict()`` for a page, ``render()`` as a table.

    Raises:
        ArgumentError: heads out of range, a target that is not one token, a text of no
            token or too long for the model's positions, a patch text of another length,
            an unknown mode, a model without a head to the vocabulary.
        ArgumentTypeError: a model of neither kind, heads that are not (layer, head) pairs,
            a ``progress`` that is not a bool, a ``check`` that is not callable.
        UnsupportedModelError: a transformers model whose attention attnlab cannot run,
            or an encoder-decoder model.
        Exception: whatever ``check`` raises.
    """
    runner = as_runner(model, tokenizer, "model", "an attnlab.models.Model or a transformers model")
    runner.check_one_stack()
    runner.check_head()
    show_progress = flag("progress", progress)
    optional_callable("check", check)
    checked = check if check is not None else _nothing
    if mode not in MODES:
        raise fail("mode", " or ".join(map(repr, MODES)), repr(mode))
    if patch_text is not None and mode != "zero":
        raise fail("mode", "'zero' (the default) with patch_text, which replaces each head's output", repr(mode))
    ids = runner.ids(text, "text")
    patch_ids = None if patch_text is None else runner.ids(patch_text, "patch_text")
    if patch_ids is not None and len(patch_ids) != len(ids):
        expected = f"{len(ids)} tokens, as many as text (patching replaces a head's output position by position)"
        raise fail("patch_text", expected, f"{len(patch_ids)} tokens")
    if target is not None and not isinstance(target, str) and not is_integer(target):  # True, 3.0: not text either
        raise fail("target", "a string that is one token, or a token id", repr(target), TypeError)
    target_id, target_text = (None, None) if target is None else runner.target(target)
    known = runner.num_layers > 0  # attnlab's models: from the config, so heads are checked before any forward
    cells = _cells(heads, runner.num_layers, runner.num_heads) if known else None
    checked()
    logits, outputs = runner.record(ids)
    if cells is None:  # a transformers model: its attention calls, and so its heads, known from the first forward
        cells = _cells(heads, runner.num_layers, runner.num_heads)
    if patch_ids is not None:
        checked()
        outputs = runner.record(patch_ids)[1]
    base = _log_softmax(logits)  # (vocab,)
    replacement = {
        (layer, head): _replacement(outputs[layer][head], "patch" if patch_ids is not None else mode)
        for layer, head in cells
    }
    effect = np.full((runner.num_layers, runner.num_heads), np.nan)
    per_batch = 1 if check is not None else max(1, min(64, _BATCH_TOKENS // len(ids)))  # a check: between heads
    with progress_bar(len(cells), "ablate", "head", enabled=show_progress) as bar:
        for start in range(0, len(cells), per_batch):
            checked()
            chunk = cells[start : start + per_batch]
            ablated = _log_softmax(runner.ablated(ids, [(*cell, replacement[cell]) for cell in chunk]))  # (B, vocab)
            for (layer, head), row in zip(chunk, ablated, strict=True):
                effect[layer, head] = _effect(base, row, target_id)
            bar.update(len(chunk))
    top = int(np.argmax(base))
    return Ablation(
        effect=effect, metric="kl" if target_id is None else "logprob",
        base_logprob=float(base[top if target_id is None else target_id]),
        predicted=runner.tokens(np.array([top]))[0], target=target_text, target_id=target_id,
        mode="patch" if patch_ids is not None else mode, tokens=runner.tokens(ids),
        patch_tokens=None if patch_ids is None else runner.tokens(patch_ids), layer_labels=list(runner.layer_labels),
        model=runner.name,
    )  # fmt: skip


def _nothing() -> None:
    """The check of an ablation given none."""


def _cells(heads: Any, layers: int, count: int) -> list[tuple[int, int]]:
    """``heads`` as distinct (layer, head) pairs, in the order given; "all": every one."""
    if isinstance(heads, str) and heads == "all":
        return [(layer, head) for layer in range(layers) for head in range(count)]
    expected = "'all' or a list of (layer, head) pairs"
    pairs = list(heads) if isinstance(heads, Iterable) and not isinstance(heads, (str, bytes)) else None
    if pairs is None or not all(_is_pair(pair) for pair in pairs):
        raise fail("heads", expected, repr(heads), TypeError)
    cells = [(int(layer), int(head)) for layer, head in pairs]
    outside = [cell for cell in cells if not (0 <= cell[0] < layers and 0 <= cell[1] < count)]
    if not cells or outside or len(set(cells)) != len(cells):
        ranges = f"distinct (layer, head) pairs, layer in 0..{layers - 1} and head in 0..{count - 1}"
        raise fail("heads", ranges, repr(outside[0]) if outside else repr(heads))
    return cells


def _is_pair(pair: Any) -> bool:
    return isinstance(pair, (tuple, list)) and len(pair) == 2 and all(map(is_integer, pair))


def _replacement(output: Array, mode: str) -> Array:
    """What replaces a head's output (L, Ev): zeros, its mean over positions, or (patching)
    the other text's output as it is."""
    if mode == "zero":
        return np.zeros_like(output)
    if mode == "mean":
        return np.broadcast_to(output.mean(axis=0, keepdims=True), output.shape)  # (1, Ev) -> (L, Ev)
    return output


def _log_softmax(logits: Array) -> Array:
    """log softmax over the last axis, in float64."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _effect(base: Array, ablated: Array, target: int | None) -> float:
    """log p_ablated(target) − log p(target), or KL(p ‖ p_ablated) without a target."""
    if target is not None:
        return float(ablated[target] - base[target])
    return float(np.sum(np.exp(base) * (base - ablated)))
