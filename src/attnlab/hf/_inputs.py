"""What attnlab.hf.trace feeds a transformers model, and the labels of its sequences: a
text through the tokenizer (its tokens made readable as attnlab's own models make them),
a pair of texts for an encoder-decoder model, an image through the image processor (its
patches as tokens), or the model's own inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validation import Array, fail, is_integer, text_ids, unicode_text
from ..models._tokenizer import Tokenizer
from ..trace import ModelTrace, Trace
from ._torch import model_name, torch

__all__ = ["Sequence", "Sequences", "key_value_heads", "model_inputs"]


@dataclass
class Sequence:
    """One sequence a model reads: its ids (none for patches and audio frames) and labels."""

    ids: list[int]
    tokens: list[str]
    special: list[bool]
    parts: list[str]


@dataclass
class Sequences:
    """The model's inputs (a batch of 1) and the labels of its one or two sequences:
    ``source`` is the only sequence, or an encoder-decoder model's encoder's; ``target``
    its decoder's. A vision model's image (height, width, 3) uint8 and its patch grid."""

    inputs: dict[str, Any]
    source: Sequence
    target: Sequence | None = None
    image: Array | None = None
    patch_grid: tuple[int, int] | None = None

    def labels(self, kind: str, side: str) -> list[str] | None:
        """The labels of an entry's rows (``side="rows"``) or keys (``"keys"``; None: the
        rows' own): the decoder's tokens for the decoder and cross-attention, whose keys
        are the encoder's."""
        decoder = self.target if self.target is not None else self.source
        if side == "keys":
            return self.source.tokens if kind == "cross" else None
        return decoder.tokens if kind in ("decoder", "cross") else self.source.tokens

    def model_trace(
        self, model: Any, traces: dict[int, Trace], entries: int, heads: int, modules: dict[int, str],
        kinds: dict[int, str],
    ) -> ModelTrace:  # fmt: skip
        """The ModelTrace of ``traces`` over these sequences."""
        name = model_name(model)
        main = self.target if self.target is not None else self.source
        config = getattr(model, "config", None)
        return ModelTrace(
            name, main.ids, main.tokens, traces, entries, heads, main.special, main.parts, None,
            modules=modules, kinds=kinds, image=self.image, patch_grid=self.patch_grid,
            **({} if self.target is None else self._source_fields()),
            architecture=str(getattr(config, "model_type", "") or ""),
            num_key_value_heads=key_value_heads(config, heads),
        )  # fmt: skip

    def _source_fields(self) -> dict[str, Any]:
        source = self.source
        return dict(
            source_ids=source.ids, source_tokens=source.tokens, source_special=source.special, source_parts=source.parts
        )


def key_value_heads(config: Any, heads: int) -> int:
    """The key and value heads that the ``heads`` query heads share, from the config, or 0
    where it names none that divides them."""
    kv_heads = getattr(config, "num_key_value_heads", None)
    return int(kv_heads) if is_integer(kv_heads) and 0 < kv_heads <= heads and heads % kv_heads == 0 else 0


def model_inputs(model: Any, text_or_inputs: Any, tokenizer: Any) -> Sequences:
    """See :func:`attnlab.hf.trace`'s ``text_or_inputs`` and ``tokenizer``; the ids, a text's
    or given, checked against the model's vocabulary and (a decoder's or an encoder's)
    positions before any forward, as the NumPy models check them."""
    sequences = _model_inputs(model, text_or_inputs, tokenizer)
    config = model.config
    vocab, positions = getattr(config, "vocab_size", None), getattr(config, "max_position_embeddings", None)
    one_sequence = not getattr(config, "is_encoder_decoder", False)  # an encoder-decoder's positions: per stack
    limit = int(positions) if is_integer(positions) and one_sequence else None
    for sequence in (sequences.source, sequences.target):
        if sequence is not None and sequence.ids and is_integer(vocab):
            text_ids("text_or_inputs", text_or_inputs, sequence.ids, int(vocab), limit)
    return sequences


def _model_inputs(model: Any, text_or_inputs: Any, tokenizer: Any) -> Sequences:
    config = model.config
    if isinstance(text_or_inputs, Mapping):
        return _given(dict(text_or_inputs), tokenizer)
    if model.main_input_name == "pixel_values":
        return _image(config, text_or_inputs, tokenizer)
    pair = isinstance(text_or_inputs, tuple) and len(text_or_inputs) == 2
    if not isinstance(text_or_inputs, str) and not (pair and getattr(config, "is_encoder_decoder", False)):
        expected = "a text, a (source, target) pair of texts, an image or a mapping of the model's inputs"
        raise fail("text_or_inputs", expected, type(text_or_inputs).__name__, TypeError)
    if tokenizer is None:
        raise fail("tokenizer", "the model's tokenizer (or processor) to read a text", "None")
    source_text, target_text = text_or_inputs if pair else (text_or_inputs, text_or_inputs)
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor holds one
    if model.main_input_name == "input_features":
        return _audio(config, target_text, tokenizer, text_tokenizer)
    source = _text(text_tokenizer, source_text)
    inputs = {"input_ids": torch.tensor([source.ids])}
    if not getattr(config, "is_encoder_decoder", False):
        return Sequences(inputs, source)
    target = _text(text_tokenizer, target_text)
    start = config.decoder_start_token_id
    if start is not None and (not target.ids or target.ids[0] != start):  # the decoder starts from its start token
        target = _labelled(text_tokenizer, [int(start), *target.ids])
    return Sequences({**inputs, "decoder_input_ids": torch.tensor([target.ids])}, source, target)


def _text(tokenizer: Any, text: str) -> Sequence:
    ids = [int(i) for i in tokenizer(unicode_text("text_or_inputs", text))["input_ids"]]
    if not ids:
        raise fail(
            "text_or_inputs", "a text of at least one token (an empty tokenizer makes none of any text)", repr(text)
        )
    return _labelled(tokenizer, ids)


def _labelled(tokenizer: Any, ids: list[int]) -> Sequence:
    """ids with readable tokens: a fast tokenizer's through attnlab's :class:`Tokenizer`
    (byte-level pieces shown as characters), another's as its vocabulary entries."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        tokens = [str(t) for t in tokenizer.convert_ids_to_tokens(ids)]
        special = [i in set(getattr(tokenizer, "all_special_ids", [])) for i in ids]
        return Sequence(ids, tokens, special, [""] * len(ids))
    readable = Tokenizer(backend, word_piece=type(backend.model).__name__ == "WordPiece")
    tokens, parts = readable.pieces(ids)
    return Sequence(ids, tokens, [readable.is_special(i) for i in ids], parts)


def _positions(count: int, name: str) -> Sequence:
    return Sequence([], [f"{name} {i}" for i in range(count)], [False] * count, [""] * count)


def _given(inputs: dict[str, Any], tokenizer: Any) -> Sequences:
    """The model's own inputs: labelled by the tokenizer where they are ids."""
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] != 1:
            raise fail("text_or_inputs", "one sequence (a batch of 1) to trace", f"{name} of batch {value.shape[0]}")
    text_tokenizer = getattr(tokenizer, "tokenizer", tokenizer)

    def sequence(key: str) -> Sequence | None:
        if key not in inputs:
            return None
        ids = [int(i) for i in inputs[key][0]]
        return _labelled(text_tokenizer, ids) if tokenizer is not None else Sequence(ids, list(map(str, ids)), [], [])

    source = sequence("input_ids")
    target = sequence("decoder_input_ids")
    if source is None:
        features = next(v for v in inputs.values() if isinstance(v, torch.Tensor))
        source = _positions(int(features.shape[-2 if features.ndim == 3 else -1]), "frame")
    return Sequences(inputs, source, target)


def _audio(config: Any, text: str, processor: Any, tokenizer: Any) -> Sequences:
    """A speech model (Whisper) given a text: the decoder reads it, the encoder hears the
    processor's features of silence, and its positions are labelled so."""
    extractor = getattr(processor, "feature_extractor", None)
    if extractor is None:
        raise fail("tokenizer", "the model's processor (AutoProcessor: a tokenizer and a feature extractor)", "none")
    silence = np.zeros(int(extractor.sampling_rate * extractor.chunk_length), np.float32)
    features = extractor(silence, sampling_rate=extractor.sampling_rate, return_tensors="pt")["input_features"]
    target = _text(tokenizer, text)
    frames = int(config.max_source_positions)
    inputs = {"input_features": features, "decoder_input_ids": torch.tensor([target.ids])}
    return Sequences(inputs, _positions(frames, "silence"), target)


def _image(config: Any, image: Any, processor: Any) -> Sequences:
    """A vision model (ViT) given an image: [CLS] then the patches row by row."""
    processor = getattr(processor, "image_processor", processor)
    if processor is None or not hasattr(processor, "image_mean"):
        raise fail("tokenizer", "the model's image processor (AutoImageProcessor) to read an image", repr(processor))
    pixels = processor(image, return_tensors="pt")["pixel_values"]  # (1, 3, height, width)
    mean, std = (np.asarray(x, np.float32).reshape(3, 1, 1) for x in (processor.image_mean, processor.image_std))
    seen = pixels[0].numpy() * std + mean  # the picture as the model saw it, in [0, 1]
    picture = np.clip(np.round(seen.transpose(1, 2, 0) * 255), 0, 255).astype(np.uint8)  # (3, h, w) -> (h, w, 3)
    patch = int(config.patch_size)
    rows, cols = (int(n) // patch for n in picture.shape[:2])
    picture = picture[: rows * patch, : cols * patch]  # the pixels the patches cover
    tokens = ["[CLS]"] + [f"patch {r},{c}" for r in range(rows) for c in range(cols)]
    count = len(tokens)
    source = Sequence([], tokens, [True] + [False] * (count - 1), [""] * count)
    return Sequences({"pixel_values": pixels}, source, image=picture, patch_grid=(rows, cols))
