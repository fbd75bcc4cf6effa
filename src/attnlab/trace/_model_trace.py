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

import base64
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._json import json_text
from .._validation import ArgumentError, Array, fail
from ._display import notebook_html, shown_name
from ._model_codec import saved_fields
from ._trace import Trace

__all__ = ["KINDS", "ModelTrace"]

# "self": a decoder-only or encoder-only model's layer; an encoder-decoder model's two
# self-attentions ("encoder", over the source; "decoder", over the tokens) and its "cross"
# attention (the decoder's queries over the encoder's keys)
KINDS = ("self", "encoder", "decoder", "cross")


@dataclass
class ModelTrace:
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
        """The model by its name (:func:`~attnlab.trace._display.shown_name`: a checkpoint's
        folder, never its path), the defaults of the marks (none special, no parts), and the
        checks of what the NumPy models never give (kinds, modules, a source, an image), as a
        saved trace's."""
        if isinstance(self.model, str):
            self.model = shown_name(self.model)
        self.special = self.special or [False] * len(self.tokens)
        self.parts = self.parts or [""] * len(self.tokens)
        self.template = self.template or [False] * len(self.tokens)
        if len(self.template) != len(self.tokens):
            raise fail("template", f"{len(self.tokens)} marks, one per token", f"{len(self.template)}")
        if self.source_tokens is not None:
            self.source_special = self.source_special or [False] * len(self.source_tokens)
            self.source_parts = self.source_parts or [""] * len(self.source_tokens)
        if self.patch_grid is not None:
            self.patch_grid = (self.patch_grid[0], self.patch_grid[1])
        if self.modules or self.kinds or self.source_tokens is not None or self.image is not None or self.patch_grid:
            self._check("trace")

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
        """Which sequence the image's patches are: "source" (an encoder-decoder's, TrOCR's), "tokens", or None."""
        return None if self.patch_grid is None else "source" if self.source_tokens is not None else "tokens"

    def _repr_html_(self) -> str | None:
        """Jupyter's display: the page, as for :class:`attnlab.Trace`."""
        return notebook_html(self)

    def __getitem__(self, key: int | str) -> Trace:
        """Entry ``key``'s trace: by index (negative: from the last entry) or module path ("model.encoder…")."""
        if isinstance(key, str):
            index = next((i for i, name in self.modules.items() if name == key and i in self.layers), None)
            if index is None:
                named = [self.modules[i] for i in self.layers if i in self.modules]
                shown = ", ".join(named[:4]) + (", …" if len(named) > 4 else "")
                raise KeyError(f"module: expected a traced module's path ({shown or 'none named'}), got {key!r}")
            return self.layers[index]
        index = key + self.num_layers if isinstance(key, int) and key < 0 else key
        if index not in self.layers:
            raise KeyError(f"layer: expected a traced layer among {sorted(self.layers)}, got {key!r}")
        return self.layers[index]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, each entry's :meth:`attnlab.Trace.to_dict`, the image's bytes in base64."""
        fixed = {
            "model": self.model, "architecture": self.architecture, "num_key_value_heads": self.num_key_value_heads,
            "ids": self.ids, "tokens": self.tokens, "special": self.special,
        }  # fmt: skip
        counts = {"parts": self.parts, "num_layers": self.num_layers, "num_heads": self.num_heads, "opens": self.opens}
        named = {
            "modules": {str(i): m for i, m in self.modules.items()},
            "kinds": {str(i): k for i, k in self.kinds.items()},
        }
        source = {
            "source_ids": self.source_ids, "source_tokens": self.source_tokens,
            "source_special": self.source_special if self.source_tokens is not None else None,
            "source_parts": self.source_parts if self.source_tokens is not None else None,
        }  # fmt: skip
        image = None
        if self.image is not None:
            raw = np.ascontiguousarray(self.image, dtype=np.uint8)
            image = {"shape": list(raw.shape), "base64": base64.b64encode(raw.tobytes()).decode()}
        marks = {"template": self.template, "notes": self.notes}
        pictures = {"image": image, "patch_grid": None if self.patch_grid is None else list(self.patch_grid)}
        layers = {"layers": {str(i): t.to_dict() for i, t in self.layers.items()}}
        return {**fixed, **counts, **named, **source, **marks, **pictures, **layers}

    def to_json(self) -> str:
        return json_text(self.to_dict())

    @classmethod
    def from_dict(cls, data: Any, source: str = "trace") -> ModelTrace:
        """Inverse of :meth:`to_dict`, checked whole: each entry over the tokens its kind says, the image
        against its grid.

        Args:
            data: what :meth:`to_dict` gave (JSON-decoded): each field is read as JSON (:mod:`._model_codec`),
                each entry by :meth:`attnlab.Trace.from_dict`.
            source: the name the errors give it (a file's name).

        Raises:
            ArgumentError: naming ``source`` and the first field missing or not fitting the others.
        """
        fields = saved_fields(data, source)
        checked = {name: fields.pop(name) for name in _CHECKED if name in fields}
        made = cls(**fields)  # nothing __post_init__ checks yet
        for name, value in checked.items():  # set after: the check below sees them all at once, naming source
            setattr(made, name, value)
        made._check(source)  # an old trace too: every layer over the trace's tokens
        return made

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
        name = {"zh": "{model} 第 {i} 层（共 {n} 层）", "en": "{model}, layer {i} of {n}"}.get(lang)
        if name is None:
            raise fail("lang", "one of zh, en", repr(lang))
        module = {"zh": "{model} {module}（{kind}）", "en": "{model}, {module} ({kind})"}[lang]
        labels, source = self.labels(), self.source_labels()
        texts = []
        for i, one in self.layers.items():
            kind = self.kind(i)
            rows = source if kind == "encoder" and source is not None else labels
            keys = source if kind == "cross" else None
            title = (
                module.format(model=self.model, module=self.modules[i], kind=_KIND_WORDS[lang][kind])
                if i in self.modules
                else name.format(model=self.model, i=i, n=self.num_layers)
            )
            texts.append(replace(one, tokens=rows, key_tokens=keys).render(lang=lang, precision=precision, title=title))
        return "\n\n".join([f"({'; '.join(self.notes)})"] * bool(self.notes) + texts)

    def __repr__(self) -> str:
        source = "" if self.source_tokens is None else f", source_tokens={len(self.source_tokens)}"
        image = "" if self.patch_grid is None else f", patch_grid={self.patch_grid}"
        return (
            f"ModelTrace(model={self.model!r}, tokens={len(self.tokens)}{source}, layers={sorted(self.layers)} "
            f"of {self.num_layers}, heads={self.num_heads}{image})"
        )

    def _check(self, source: str) -> None:
        """Refuse a trace whose parts do not fit together.

        Raises:
            ArgumentError: naming ``source`` and the first field that does not fit: a kind not
                in :data:`KINDS` (or "self" beside an encoder-decoder's kinds), a module or kind
                missing for a traced entry, an entry not over the tokens its kind says, a source
                sequence whose lists differ in length, an image that is not uint8 (height,
                width, 3), or a patch grid that does not cut the image evenly or whose rows·cols
                is not the number of patch tokens.
        """
        traced = sorted(self.layers)
        for name, values in (("kinds", self.kinds), ("modules", self.modules)):
            if values and not set(traced) <= set(values):
                missing = next(i for i in traced if i not in values)
                raise ArgumentError(f"{source}: {name}: expected one for every traced entry, none for entry {missing}")
        bad = next((k for k in self.kinds.values() if k not in KINDS), None)
        if bad is not None:
            raise ArgumentError(f"{source}: kinds: expected each one of {', '.join(KINDS)}, got {bad!r}")
        if "self" in self.kinds.values() and len(set(self.kinds.values())) > 1:
            raise ArgumentError(
                f"{source}: kinds: expected either self (one sequence) or encoder, decoder and cross (two), got both"
            )
        names = list(self.modules.values())
        if not all(isinstance(m, str) and m for m in names) or len(set(names)) != len(names):
            raise ArgumentError(f"{source}: modules: expected distinct module paths (non-empty strings)")
        self._check_source(source)
        for i in traced:
            self._check_entry(i, source)
        self._check_image(source)

    def _check_source(self, source: str) -> None:
        """The source sequence: present where an entry is over it, its lists one per token."""
        two = any(k in ("encoder", "cross") for k in self.kinds.values())
        if self.source_tokens is None:
            if two:
                raise ArgumentError(
                    f"{source}: source_tokens: expected the encoder's tokens beside encoder or cross entries"
                )
            return
        tokens = self.source_tokens
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens) or not tokens:
            raise ArgumentError(f"{source}: source_tokens: expected a list of strings")
        n = len(tokens)
        ids = self.source_ids
        if ids is not None and ids != [] and not (len(ids) == n and all(type(i) is int for i in ids)):
            raise ArgumentError(f"{source}: source_ids: expected null, [] or {n} integers, one per source token")
        if len(self.source_special) != n or not all(type(x) is bool for x in self.source_special):
            raise ArgumentError(f"{source}: source_special: expected {n} booleans, one per source token")
        if len(self.source_parts) != n or not all(isinstance(x, str) for x in self.source_parts):
            raise ArgumentError(f"{source}: source_parts: expected {n} strings, one per source token")

    def _check_entry(self, i: int, source: str) -> None:
        """Entry ``i`` over the tokens its kind says: rows and keys."""
        kind, where = self.kind(i), f"{source}, layer {i}" + (f" ({self.modules[i]})" if i in self.modules else "")
        one = self.layers[i]
        rows = self.source_tokens if kind == "encoder" else self.tokens
        assert rows is not None  # _check_source: an encoder entry has its source
        sequence = "source tokens" if kind == "encoder" else "tokens"
        if one.tokens != rows:
            raise ArgumentError(f"{where}: tokens: {_first_difference(rows, one.tokens, sequence)}")
        if kind == "cross":
            keys = self.source_tokens
            assert keys is not None
            if one.key_tokens != keys:
                raise ArgumentError(f"{where}: key_tokens: {_first_difference(keys, one.key_tokens, 'source tokens')}")
        elif one.num_keys != len(rows) or one.key_tokens not in (None, rows):
            got = one.num_keys if one.key_tokens is None else f"{one.num_keys}, labelled otherwise"
            raise ArgumentError(f"{where}: expected {kind} attention's keys, the {len(rows)} {sequence}, got {got}")

    def _check_image(self, source: str) -> None:
        """The image, uint8 (height, width, 3), cut evenly by the patch grid into as many
        patches as the image's sequence has tokens that are not special."""
        image, grid = self.image, self.patch_grid
        if (image is None) != (grid is None):
            raise ArgumentError(f"{source}: image and patch_grid: expected both (a vision model's trace) or neither")
        if image is None or grid is None:
            return
        if not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3):
            got = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else type(image).__name__
            raise ArgumentError(f"{source}: image: expected uint8 pixels (height, width, 3), got {got}")
        if len(grid) != 2 or not all(type(n) is int and n > 0 for n in grid):
            raise ArgumentError(f"{source}: patch_grid: expected (rows, cols), two whole numbers > 0, got {grid!r}")
        (height, width, _), (rows, cols) = image.shape, grid
        if height % rows or width % cols:
            raise ArgumentError(
                f"{source}: patch_grid: expected rows and cols that cut the {height}×{width} image into equal "
                f"patches, got {rows}×{cols}"
            )
        on_source = self.image_sequence == "source"
        special = self.source_special if on_source else self.special
        patches = special.count(False)
        if patches != rows * cols:
            sequence = "source tokens" if on_source else "tokens"
            raise ArgumentError(
                f"{source}: patch_grid: expected {patches} patches, one per {sequence[:-1]} not marked special "
                f"([CLS] and the like), got {rows}×{cols} = {rows * cols}"
            )


# the fields that only some models give, checked together by ModelTrace._check
_CHECKED = ("modules", "kinds", "source_ids", "source_tokens", "source_special", "source_parts", "image", "patch_grid")


def _first_difference(tokens: list[str], got: list[str] | None, sequence: str = "tokens") -> str:
    """Where an entry's tokens part from the trace's: "expected …, got …" naming the first token that differs."""
    if got is None or len(got) != len(tokens):
        return f"expected the trace's {len(tokens)} {sequence}, got {'none' if got is None else len(got)}"
    i = next(i for i, (want, have) in enumerate(zip(tokens, got, strict=True)) if want != have)
    return f"expected the trace's {sequence}, got token {i} {got[i]!r} where the trace has {tokens[i]!r}"


def _marked(tokens: list[str], parts: list[str]) -> list[str]:
    """Each token, or ``token‹piece of 篮›`` for a piece that shows nothing by itself."""
    return [
        f"{token}‹piece of {part}›" if part and not token.strip() else token
        for token, part in zip(tokens, parts, strict=True)
    ]


_KIND_WORDS = {
    "en": {"self": "self-attention", "encoder": "encoder", "decoder": "decoder", "cross": "cross-attention"},
    "zh": {"self": "自注意力", "encoder": "编码器", "decoder": "解码器", "cross": "交叉注意力"},
}
