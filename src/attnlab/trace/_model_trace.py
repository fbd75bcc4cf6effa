"""A model's trace: every step of attention in the traced entries of one forward, one
:class:`attnlab.Trace` per attention module, with the tokens as the model's tokenizer reads
them: a decoder-only or encoder-only model's layers, an encoder-decoder model's encoder,
decoder and cross attention over its two sequences, a vision transformer's patches.

**Two sequences.** ``tokens``/``ids`` are the only sequence of a decoder-only or
encoder-only model, or the decoder's (the target) of an encoder-decoder model, whose
encoder's input (the source) is ``source_tokens``/``source_ids``. By kind, an entry is
over: "self" and "decoder", the tokens (S = L); "encoder", the source tokens; "cross",
the tokens on its rows (the decoder's queries) and the source tokens on its keys (its
:attr:`Trace.key_tokens`).

**An image.** A vision transformer's ``image`` is the picture as the model saw it, uint8
(height, width, 3), cut into ``patch_grid`` (rows, cols) patches of (height / rows,
width / cols) pixels. Its patches are the tokens of the sequence the image goes into (the
source when there is one, as in TrOCR, else the tokens) that are not marked special, in
order, row by row; every other token, [CLS], a distillation token, register tokens, is
marked special (``special``/``source_special``) and drawn apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._json import json_text
from .._validation import Array, fail
from ._display import notebook_html, shown_name
from ._model_checks import KINDS, check_model_trace, image_sequence, model_trace_from_dict
from ._trace import Trace

__all__ = ["KINDS", "ModelTrace"]


@dataclass
class _Fields:
    """The fields of a :class:`ModelTrace` (documented there), filled in and checked when made."""

    model: str
    ids: list[int]
    tokens: list[str]
    layers: dict[int, Trace] = field(repr=False)
    num_layers: int = 0
    num_heads: int = 0
    special: list[bool] = field(default_factory=list)  # [CLS], <|endoftext|>: not text
    parts: list[str] = field(default_factory=list)  # the characters split over several tokens each holds
    opens: dict[str, int] | None = None
    modules: dict[int, str] = field(default_factory=dict)
    kinds: dict[int, str] = field(default_factory=dict)
    source_ids: list[int] | None = None
    source_tokens: list[str] | None = None
    source_special: list[bool] = field(default_factory=list)
    source_parts: list[str] = field(default_factory=list)
    image: Array | None = field(default=None, repr=False)
    patch_grid: tuple[int, int] | None = None
    template: list[bool] = field(default_factory=list)  # put there by a chat template, not the user's words
    notes: list[str] = field(default_factory=list)  # what was done to the text or read: a cut, a quantization
    architecture: str = ""  # config.json's model_type ("llama"), "" where unknown
    num_key_value_heads: int = 0  # key and value heads (grouped-query attention), 0 where unknown

    def __post_init__(self) -> None:
        _fill_and_check(self)


class ModelTrace(_Fields):
    """Every step of attention in the traced entries (attention modules) of one forward.

    ``layers[i]`` is entry i's :class:`attnlab.Trace`, in the model's order: its inputs (L, D) (after the norm
    where the norm comes first), per head Q (H, L, E) after RoPE, K and V (H, S, E) (a key/value head repeated
    for each of its query heads), scores, weights (H, L, S), outputs and the output after the out projection
    (L, D). Two sequences (an encoder-decoder's) and an image (a ViT's): see the module's docstring.

    Args:
        model: the checkpoint's name; a path is kept as its folder's or file's name
            (``/models/gpt2`` is ``gpt2``), so that no page or JSON holds the machine's folders.
        ids: the L token ids ([] when the model reads no ids: an image's patches).
        tokens: the L tokens as text (:meth:`Tokenizer.readable`).
        layers: the traced entries' :class:`attnlab.Trace`, by index.
        num_layers: the model's entries (traced or not): its layers, or its attention modules.
        num_heads: heads per entry.
        special: per token, whether it is a special token ([CLS]).
        parts: per token, the characters split over several tokens that it holds bytes of.
        opens: the view its page opens on, {"layer", "head", "query"} (builtin:coref's answering head), or None.
        modules: each entry's module path ("model.decoder.layers.0.encoder_attn"), by index; empty: "layer i".
        kinds: each entry's kind, one of :data:`KINDS`, by index; empty: every entry "self".
        source_ids: the encoder's S token ids (None or []: none, such as audio frames).
        source_tokens: the encoder's S tokens as text, or None (one sequence).
        source_special: per source token, whether it is special.
        source_parts: per source token, the characters split over several tokens it holds bytes of.
        image: the picture the model saw, uint8 (height, width, 3), or None.
        patch_grid: (rows, cols) of its patches, or None.
        template: per token, whether a chat template put it there (not the user's words).
        notes: what the page and the text should say of how the tokens or weights came
            ("cut to its first 512 of 600 tokens", "Q4_1, dequantized to float32").
        architecture: the model's architecture, its config's ``model_type`` ("llama"), or "".
        num_key_value_heads: the key and value heads each entry's queries share (fewer than
            ``num_heads`` under grouped-query attention), or 0 where unknown.

    Raises:
        ArgumentError: kinds, modules, a source sequence, an image or a patch grid that do not fit the entries.
    """

    @property
    def weights(self) -> Array:
        """The traced entries' weights, (layers, H, L, S), in order (entries of one shape)."""
        return np.stack([self.layers[i].weights for i in sorted(self.layers)])

    def kind(self, index: int) -> str:
        """Entry ``index``'s kind.

        Args:
            index: the entry's index (a key of ``layers``).
        """
        return self.kinds.get(index, "self")

    def name(self, index: int) -> str:
        """Entry ``index``'s module path, or "layer i" when the trace names none.

        Args:
            index: the entry's index (a key of ``layers``).
        """
        return self.modules.get(index, f"layer {index}")

    @property
    def image_sequence(self) -> str | None:
        """Which sequence the image's patches are: "source", "tokens", or None without an image."""
        return image_sequence(self)

    def _repr_html_(self) -> str | None:
        """Jupyter's display: the page, as for :class:`attnlab.Trace`."""
        return notebook_html(self)

    def __getitem__(self, key: int | str) -> Trace:
        """Entry ``key``'s trace: by index (negative: from the last entry) or module path ("model.encoder…")."""
        return _entry(self, key)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, each entry's :meth:`attnlab.Trace.to_dict`, the image's bytes in base64."""
        return _to_dict(self)

    def to_json(self) -> str:
        return json_text(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str = "trace") -> ModelTrace:
        """Inverse of :meth:`to_dict`, checked: each entry, over the tokens its kind says; the image's grid.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded).
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and what is missing or does not fit.
        """
        return model_trace_from_dict(cls, data, source)

    def labels(self) -> list[str]:
        """The tokens as text and page label them: a piece that shows nothing (of 篮) reads ``‹piece of 篮›``."""
        return _marked(self.tokens, self.parts)

    def source_labels(self) -> list[str] | None:
        """The source tokens labelled as :meth:`labels` labels the tokens, or None."""
        return None if self.source_tokens is None else _marked(self.source_tokens, self.source_parts)

    def render(self, *, lang: str = "zh", precision: int = 4) -> str:
        """Each entry's text (:meth:`attnlab.Trace.render`) under its name, labelled by :meth:`labels`.

        Args:
            lang: the labels' language, ``"zh"`` or ``"en"``.
            precision: decimals of every number, 0..17.

        Raises:
            ArgumentError: ``lang`` or ``precision`` out of range.
        """
        return _render(self, lang, precision)

    def __repr__(self) -> str:
        return _repr(self)


def _fill_and_check(trace: _Fields) -> None:
    """The model by its name (:func:`~attnlab.trace._display.shown_name`: a checkpoint's
    folder, never its path), the defaults of the marks (none special, no parts), and the
    checks of what the NumPy models never give (kinds, modules, a source, an image), as a
    saved trace's."""
    if isinstance(trace.model, str):
        trace.model = shown_name(trace.model)
    trace.special = trace.special or [False] * len(trace.tokens)
    trace.parts = trace.parts or [""] * len(trace.tokens)
    trace.template = trace.template or [False] * len(trace.tokens)
    if len(trace.template) != len(trace.tokens):
        raise fail("template", f"{len(trace.tokens)} marks, one per token", f"{len(trace.template)}")
    if trace.source_tokens is not None:
        trace.source_special = trace.source_special or [False] * len(trace.source_tokens)
        trace.source_parts = trace.source_parts or [""] * len(trace.source_tokens)
    if trace.patch_grid is not None:
        trace.patch_grid = (trace.patch_grid[0], trace.patch_grid[1])
    if trace.modules or trace.kinds or trace.source_tokens is not None or trace.image is not None or trace.patch_grid:
        check_model_trace(trace, "trace")


def _entry(trace: ModelTrace, key: int | str) -> Trace:
    """See :meth:`ModelTrace.__getitem__`."""
    if isinstance(key, str):
        index = next((i for i, name in trace.modules.items() if name == key and i in trace.layers), None)
        if index is None:
            named = [trace.modules[i] for i in trace.layers if i in trace.modules]
            shown = ", ".join(named[:4]) + (", …" if len(named) > 4 else "")
            raise KeyError(f"module: expected a traced module's path ({shown or 'none named'}), got {key!r}")
        return trace.layers[index]
    index = key + trace.num_layers if isinstance(key, int) and key < 0 else key
    if index not in trace.layers:
        raise KeyError(f"layer: expected a traced layer among {sorted(trace.layers)}, got {key!r}")
    return trace.layers[index]


def _repr(trace: ModelTrace) -> str:
    """See :meth:`ModelTrace.__repr__`."""
    source = "" if trace.source_tokens is None else f", source_tokens={len(trace.source_tokens)}"
    image = "" if trace.patch_grid is None else f", patch_grid={trace.patch_grid}"
    return (
        f"ModelTrace(model={trace.model!r}, tokens={len(trace.tokens)}{source}, layers={sorted(trace.layers)} "
        f"of {trace.num_layers}, heads={trace.num_heads}{image})"
    )


def _marked(tokens: list[str], parts: list[str]) -> list[str]:
    """Each token, or ``token‹piece of 篮›`` for a piece that shows nothing by itself."""
    return [
        f"{token}‹piece of {part}›" if part and not token.strip() else token
        for token, part in zip(tokens, parts, strict=True)
    ]


def _to_dict(trace: ModelTrace) -> dict[str, Any]:
    """See :meth:`ModelTrace.to_dict`."""
    import base64

    fixed = {
        "model": trace.model, "architecture": trace.architecture, "num_key_value_heads": trace.num_key_value_heads,
        "ids": trace.ids, "tokens": trace.tokens, "special": trace.special,
    }  # fmt: skip
    counts = {"parts": trace.parts, "num_layers": trace.num_layers, "num_heads": trace.num_heads, "opens": trace.opens}
    named = {
        "modules": {str(i): m for i, m in trace.modules.items()},
        "kinds": {str(i): k for i, k in trace.kinds.items()},
    }
    source = {
        "source_ids": trace.source_ids, "source_tokens": trace.source_tokens,
        "source_special": trace.source_special if trace.source_tokens is not None else None,
        "source_parts": trace.source_parts if trace.source_tokens is not None else None,
    }  # fmt: skip
    image = None
    if trace.image is not None:
        raw = np.ascontiguousarray(trace.image, dtype=np.uint8)
        image = {"shape": list(raw.shape), "base64": base64.b64encode(raw.tobytes()).decode()}
    marks = {"template": trace.template, "notes": trace.notes}
    pictures = {"image": image, "patch_grid": None if trace.patch_grid is None else list(trace.patch_grid)}
    layers = {"layers": {str(i): t.to_dict() for i, t in trace.layers.items()}}
    return {**fixed, **counts, **named, **source, **marks, **pictures, **layers}


def _render(trace: ModelTrace, lang: str, precision: int) -> str:
    """See :meth:`ModelTrace.render`."""
    name = {"zh": "{model} 第 {i} 层（共 {n} 层）", "en": "{model}, layer {i} of {n}"}.get(lang)
    if name is None:
        raise fail("lang", "one of zh, en", repr(lang))
    module = {"zh": "{model} {module}（{kind}）", "en": "{model}, {module} ({kind})"}[lang]
    labels, source = trace.labels(), trace.source_labels()
    texts = []
    for i, one in trace.layers.items():
        kind = trace.kind(i)
        rows = source if kind == "encoder" and source is not None else labels
        keys = source if kind == "cross" else None
        title = (
            module.format(model=trace.model, module=trace.modules[i], kind=_KIND_WORDS[lang][kind])
            if i in trace.modules
            else name.format(model=trace.model, i=i, n=trace.num_layers)
        )
        texts.append(replace(one, tokens=rows, key_tokens=keys).render(lang=lang, precision=precision, title=title))
    return "\n\n".join([f"({'; '.join(trace.notes)})"] * bool(trace.notes) + texts)


_KIND_WORDS = {
    "en": {"self": "self-attention", "encoder": "encoder", "decoder": "decoder", "cross": "cross-attention"},
    "zh": {"self": "自注意力", "encoder": "编码器", "decoder": "解码器", "cross": "交叉注意力"},
}
