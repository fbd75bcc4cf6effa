"""A page that carries a model and runs it: ``attnlab view --in-browser``, ``attnlab.view(model,
text=…, in_browser=True)``.

One self-contained HTML file (assets/inpage.html) holds a BERT encoder's weights, its WordPiece
tokenizer and the page's script (assets/js/inpage_*.js): the reader types a sentence, and the page
tokenizes it, runs the forward (every layer, every head), and draws attnlab's page of that trace in a
frame (assets/page.html, filled with the trace as :func:`~._page_data.page_data` writes it). A slider
multiplies every layer's scale (1/√d_k) in the forward; a click on a head ablates it (its output
zero). Nothing is fetched: it opens from file:// and in Jupyter.

The weights are stored as base64 of little-endian float32 when they take at most
PAGE_LIMITS["exact"] bytes (builtin:coref), else float16 (all-MiniLM-L6-v2: 45 MB); the page computes
in float64 from the stored values, as attnlab's NumPy forward does on them (tests/viz/test_inpage.py).
A model the page cannot run (not BERT, or a tokenizer other than BERT's WordPiece) or one whose page
passes PAGE_LIMITS["page"] is refused with the reason.
"""

from __future__ import annotations

import base64
import json
import math
import re
from importlib.resources import files
from typing import Any

import numpy as np

from .._json import json_text
from .._validation import fail
from ..trace._display import display_text, shown_name
from ._html import escaped
from ._page_data import check_lang, page_data
from ._page_size import PAGE_LIMITS

__all__ = ["DATA_SLOT", "check_model_type", "in_browser_page", "model_spec", "stored_weights"]

DATA_SLOT = "__ATTNLAB_INPAGE_TRACE__"  # in the frame's page: where the page's script puts the trace's JSON
INPAGE_SCRIPTS = ("core", "i18n", "decoding", "inpage_tokenizer", "inpage_model", "inpage_main")
ACTIVATIONS = ("gelu", "gelu_new")  # the feed-forward activations js/inpage_model.js runs
ASKED_ABOUT = {"coref": ["他", "她"]}  # a task's tokens that ask its question (models._model.ASKED_ABOUT's)


def _numpy_model(model: Any) -> Any:
    """The attnlab.models.Model under ``model`` (itself, or a NumPy runner's), or a refusal."""
    inner = model if hasattr(model, "network") else getattr(model, "model", None)
    if not hasattr(inner, "network") or not hasattr(inner, "tokenizer"):
        name = getattr(model, "name", type(model).__name__)
        raise fail("model", "a model attnlab runs in NumPy (backend 'numpy') for the page to run", repr(name))
    return inner


def _refusal(name: str, why: str) -> Exception:
    return fail("model", "a BERT encoder with a WordPiece tokenizer whose page fits (builtin:coref, all-MiniLM-L6-v2)",
                f"{name}: {why}")  # fmt: skip


def check_model_type(name: str, model_type: str | None, causal: bool) -> None:
    """Refuse a model the page cannot run, from its config alone (before its weights load): one
    whose ``model_type`` is not "bert" (None: a GGUF file's decoder), named ``name``; ``causal``: it
    is a decoder (said in the refusal).

    Raises:
        ArgumentError: named ``model``, with the model's name and kind.
    """
    if model_type != "bert":
        kind = "a GGUF file's causal decoder" if model_type is None else (
            f"{'a causal model' if causal else 'a model'} of type {model_type!r}")  # fmt: skip
        raise _refusal(name, f"{kind}; the page runs BERT encoders only")


def stored_weights(model: Any) -> dict[str, np.ndarray]:
    """The weights the page carries, by the names assets/js/inpage_model.js reads, as float64 arrays:
    word (vocab, D), position (P, D), type (D: token type 0's), embed_norm.weight/bias, and per
    layer l: l.q/k/v/o.weight (out, in) and .bias, l.attention_norm, l.up, l.down, l.mlp_norm."""
    network = model.network
    out = {
        "word": network.embed.weight.value, "position": network.positions.weight.value,
        "type": network.token_types.weight.value[0],
        "embed_norm.weight": network.embed_norm.weight.value, "embed_norm.bias": network.embed_norm.bias.value,
    }  # fmt: skip
    for i, block in enumerate(network.blocks):
        parts = {"q": block.attn.query, "k": block.attn.key, "v": block.attn.value, "o": block.attn.out,
                 "up": block.up, "down": block.down, "attention_norm": block.attention_norm,
                 "mlp_norm": block.mlp_norm}  # fmt: skip
        for name, part in parts.items():
            out[f"{i}.{name}.weight"], out[f"{i}.{name}.bias"] = part.weight.value, part.bias.value
    return {name: np.asarray(x, dtype=np.float64) for name, x in out.items()}


def _tokenizer_spec(model: Any) -> dict[str, Any]:
    """What assets/js/inpage_tokenizer.js needs of a tokenizers BERT WordPiece tokenizer, or a refusal."""
    backend: Any = getattr(model.tokenizer, "backend", None)
    if not hasattr(backend, "to_str"):
        raise _refusal(model.name, "no tokenizer the page can run (it runs a tokenizer.json's BERT WordPiece)")
    spec = json.loads(backend.to_str())
    normalizer, pre, wordpiece = spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}, spec["model"]
    kinds = (normalizer.get("type"), pre.get("type"), wordpiece.get("type"))
    if kinds != ("BertNormalizer", "BertPreTokenizer", "WordPiece"):
        raise _refusal(model.name, f"its tokenizer is {'/'.join(map(str, kinds))}, not BERT's WordPiece")
    vocab = [""] * backend.get_vocab_size()
    for token, i in backend.get_vocab().items():
        vocab[i] = token
    lowercase = bool(normalizer.get("lowercase", True))
    strip = normalizer.get("strip_accents")
    specials = [[t.content, i] for i, t in backend.get_added_tokens_decoder().items() if t.special]
    return {
        "vocab": vocab, "shown": [display_text(t) for t in vocab], "unk": vocab.index(wordpiece["unk_token"]),
        "prefix": wordpiece.get("continuing_subword_prefix", "##"),
        "max_chars": int(wordpiece.get("max_input_chars_per_word", 100)), "lowercase": lowercase,
        "strip_accents": lowercase if strip is None else bool(strip),
        "chinese": bool(normalizer.get("handle_chinese_chars", True)),
        "clean": bool(normalizer.get("clean_text", True)),
        "cls": vocab.index("[CLS]"), "sep": vocab.index("[SEP]"), "specials": specials,
    }  # fmt: skip


def _base64(x: np.ndarray, dtype: str) -> str:
    """``x`` as base64 of little-endian ``dtype`` ("float32" or "float16"), row major."""
    return base64.b64encode(np.ascontiguousarray(x, dtype="<f4" if dtype == "float32" else "<f2").tobytes()).decode()


def model_spec(model: Any) -> dict[str, Any]:
    """The model as the page carries it: {"config", "tokenizer", "weights": {name: {"dtype",
    "shape", "data"}}}, float32 when the weights take at most PAGE_LIMITS["exact"] bytes so,
    else float16.

    Raises:
        ArgumentError: a model other than a BERT encoder with a BERT WordPiece tokenizer, or one
            whose weights in float16 pass PAGE_LIMITS["page"] (named, with its size).
    """
    model = _numpy_model(model)
    config = model.config
    check_model_type(model.name, config.model_type, config.causal)
    weights = stored_weights(model)
    numbers = sum(x.size for x in weights.values())
    dtype = "float32" if 4 * numbers <= PAGE_LIMITS["exact"] else "float16"
    page = math.ceil(numbers * (4 if dtype == "float32" else 2) / 3) * 4  # the base64 characters
    if page > PAGE_LIMITS["page"]:
        raise _refusal(
            model.name, f"its {numbers / 1e6:.1f} M weights take {page / 1e6:.0f} MB in 16 bits, past the page's "
            f"{PAGE_LIMITS['page'] / 1e6:g} MB",
        )  # fmt: skip
    raw = config.raw
    activation = str(raw.get("hidden_act", "gelu"))
    if activation not in ACTIVATIONS:
        raise _refusal(model.name, f"its activation {activation!r}: the page runs {' and '.join(ACTIVATIONS)}")
    block = raw.get("attnlab") if isinstance(raw.get("attnlab"), dict) else {}
    answer = block.get("answer_head") if isinstance(block.get("answer_head"), dict) else None
    return {
        "config": {
            "name": display_text(shown_name(model.name)), "hidden": config.hidden_size,
            "heads": config.num_attention_heads, "layers": config.num_hidden_layers,
            "eps": float(model.network.embed_norm.eps),
            "activation": activation, "max_positions": config.max_position_embeddings,
            "answer": answer, "asks": ASKED_ABOUT.get(str(block.get("task")), []),
        },
        "tokenizer": _tokenizer_spec(model),
        "weights": {
            name: {"dtype": dtype, "shape": list(x.shape), "data": _base64(x, dtype)} for name, x in weights.items()
        },
    }  # fmt: skip


def in_browser_page(model: Any, text: str, frame: str, *, lang: str = "en") -> str:
    """The HTML text of the page that runs ``model`` (see the module's docstring), opening on
    ``text``: assets/inpage.html with the model, ``frame`` (page.html filled but for its data, whose
    slot reads DATA_SLOT), the skeleton of the trace's page data (its layers' names and rules; the
    numbers the page computes) and the script (assets/js/, INPAGE_SCRIPTS), in ``lang`` ("en" or "zh").

    Raises:
        ArgumentError: what :func:`model_spec` refuses, a ``lang`` other than "en" or "zh", a
            ``text`` the model refuses (see :meth:`attnlab.models.Model.trace`).
    """
    check_lang(lang)
    spec = model_spec(model)  # first: a model the page cannot run is refused before any work
    inner = _numpy_model(model)
    skeleton = page_data(inner.trace(text, truncation=True), None, lang)
    layers: list[dict[str, object]] = skeleton["layers"]  # type: ignore[assignment]  # page_data's list
    for layer in layers:
        for key in ("q", "k", "v", "scores"):
            layer[key] = None  # the page computes them
    assets = files("attnlab.viz") / "assets"
    script = "".join((assets / "js" / f"{name}.js").read_text(encoding="utf-8") for name in INPAGE_SCRIPTS)
    filling = {
        "__ATTNLAB_MODEL__": escaped(json_text(spec)), "__ATTNLAB_FRAME__": escaped(json.dumps(frame)),
        "__ATTNLAB_SKELETON__": escaped(json_text({"page": skeleton, "text": text, "lang": lang})),
        "__ATTNLAB_INPAGE_SCRIPT__": script,
    }  # fmt: skip
    page = (assets / "inpage.html").read_text(encoding="utf-8")
    slots = re.compile("|".join(map(re.escape, filling)))
    return slots.sub(lambda slot: filling[slot[0]], page)  # one pass: nothing filled in is searched again
