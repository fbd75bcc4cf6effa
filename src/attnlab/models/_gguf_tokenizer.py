"""A GGUF file's tokenizer: the ``tokenizers.Tokenizer`` its metadata describes
(``tokenizer.ggml.*``: the vocabulary, merges, token types, the pre-tokenizer's name, the
begin and end tokens) and the settings attnlab's :class:`~._tokenizer.Tokenizer` takes
(its chat template, bos and eos texts), as transformers' GGUF converter builds them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._exceptions import MissingDependencyError
from ._checkpoint import CheckpointError

__all__ = ["SPLITS", "gguf_tokenizer"]


# The pre-tokenizer splits that tokenizer.ggml.pre names, for the vocabularies of the
# architectures read here (Llama 3's and Qwen2's); any other name splits as GPT-2 does,
# as transformers does for them.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx"), _LLAMA3_SPLIT),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez"), _QWEN2_SPLIT),
}
_CONTROL, _USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values


def gguf_tokenizer(meta: dict[str, Any], path: Path) -> tuple[Any, dict[str, Any]]:
    """The ``tokenizers.Tokenizer`` the metadata describes (``tokenizer.ggml.model``: gpt2,
    a byte-level BPE, or llama, SentencePiece's BPE with byte fallback), its control tokens
    special, and its settings: chat_template, bos_token and eos_token as strings.

    Args:
        meta: the file's metadata, key → value.
        path: the file, as the errors name it.

    Raises:
        CheckpointError: no vocabulary, token types or scores that are not one for each
            token, another tokenizer model, merges that do not fit it, or a BOS to add
            (tokenizer.ggml.add_bos_token) whose id is not in the vocabulary.
        MissingDependencyError: the tokenizers package is not installed.
    """
    try:
        import tokenizers
    except ImportError:
        raise MissingDependencyError("a GGUF's tokenizer needs tokenizers: pip install 'attnlab[models]'") from None
    kind, tokens = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise CheckpointError(f"{path}: metadata tokenizer.ggml.tokens: expected a list of strings")
    for key in ("token_type", "scores"):  # one per token, read by its index: a shorter list would drop some
        given = meta.get(f"tokenizer.ggml.{key}")
        if given is not None and (not isinstance(given, list) or len(given) != len(tokens)):
            got = f"{len(given):,}" if isinstance(given, list) else f"a {type(given).__name__}"
            raise CheckpointError(
                f"{path}: metadata tokenizer.ggml.{key}: expected a list of one for each of the {len(tokens):,} "
                f"tokens of tokenizer.ggml.tokens, got {got}"
            )
    types = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    try:
        if kind == "gpt2":
            backend = _byte_level(tokenizers, tokens, meta, path)
            alphabet = set(_byte_alphabet().values())
            control = [t for t, k in zip(tokens, types, strict=False) if k == _CONTROL and set(t) <= alphabet]
        elif kind == "llama":
            backend = _sentencepiece(tokenizers, tokens, meta, path)
            control = [t for t, k in zip(tokens, types, strict=False) if k == _CONTROL]
        else:
            raise CheckpointError(f"{path}: metadata tokenizer.ggml.model: expected gpt2 or llama, got {kind!r}")
    except Exception as error:  # tokenizers' own errors: merges that do not fit the vocabulary
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"{path}: the tokenizer cannot be built from its metadata: {error}") from None
    backend.add_special_tokens([tokenizers.AddedToken(t, normalized=False, special=True) for t in control])
    vocab = backend.get_vocab()
    user = [t for t, k in zip(tokens, types, strict=False) if k == _USER_DEFINED and t in vocab]
    backend.add_tokens([tokenizers.AddedToken(t, normalized=False, special=False) for t in user])
    settings = _special_tokens(meta, tokens, kind == "llama")
    bos, bos_id = settings["bos_token"], meta.get("tokenizer.ggml.bos_token_id")
    add_bos = settings.pop("add_bos_token")
    if add_bos and bos is None and bos_id is not None:  # the BOS each text starts with would be dropped
        raise CheckpointError(
            f"{path}: metadata tokenizer.ggml.bos_token_id: expected a token id in 0..{len(tokens) - 1} "
            f"(tokenizer.ggml.add_bos_token is true), got {bos_id!r}"
        )
    if add_bos and bos is not None:
        backend.post_processor = tokenizers.processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1", special_tokens=[(bos, tokens.index(bos))]
        )
    return backend, settings


def _special_tokens(meta: dict[str, Any], tokens: list[str], sentencepiece: bool) -> dict[str, Any]:
    """The bos and eos tokens as strings, whether a BOS starts each text (llama.cpp's default
    for a SentencePiece vocabulary: yes), and the chat template."""

    def token(key: str) -> str | None:
        index = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[index] if isinstance(index, int) and 0 <= index < len(tokens) else None

    template = meta.get("tokenizer.chat_template")
    return {
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", sentencepiece)),
        "chat_template": template if isinstance(template, str) else None,
    }


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's spelling of bytes as printable characters: the printable Latin-1 bytes as
    themselves, the others as the characters from U+0100 on, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = (b for b in range(256) if b not in printable)
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(others)}}


def _merges(meta: dict[str, Any], path: Path) -> list[tuple[str, str]]:
    merges = meta.get("tokenizer.ggml.merges") or []
    pairs = [tuple(m.split(" ", 1)) for m in merges if isinstance(m, str)]
    if len(pairs) != len(merges) or any(len(p) != 2 for p in pairs):
        bad = next(m for m in merges if not isinstance(m, str) or " " not in m)
        raise CheckpointError(
            f"{path}: metadata tokenizer.ggml.merges: expected strings of two tokens split by a space, "
            f"got {repr(bad)[:80]}"
        )
    return [(a, b) for a, b in pairs]


def _byte_level(tokenizers: Any, tokens: list[str], meta: dict[str, Any], path: Path) -> Any:
    """GPT-2's byte-level BPE: tokens spelled in the byte alphabet (a token spelled
    otherwise is respelled), the text split by the regex that tokenizer.ggml.pre names."""
    spelling = _byte_alphabet()
    alphabet = set(spelling.values())
    vocab = {
        t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i for i, t in enumerate(tokens)
    }
    model = tokenizers.models.BPE(vocab, _merges(meta, path), continuing_subword_prefix="", end_of_word_suffix="")
    backend = tokenizers.Tokenizer(model)
    split = SPLITS.get(str(meta.get("tokenizer.ggml.pre")))
    pre = tokenizers.pre_tokenizers
    if split is None:
        backend.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    else:
        backend.pre_tokenizer = pre.Sequence(
            [
                pre.Split(tokenizers.Regex(split), behavior="isolated"),
                pre.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    backend.decoder = tokenizers.decoders.ByteLevel()
    return backend


def _sentencepiece(tokenizers: Any, tokens: list[str], meta: dict[str, Any], path: Path) -> Any:
    """SentencePiece's BPE (Llama 2, Mistral): ▁ for a space and one before the text, bytes
    <0xNN> for what the vocabulary lacks; its merges from the file, or, where the file has
    none, every split of a token into two tokens, ranked by the token's score."""
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _merges(meta, path) if meta.get("tokenizer.ggml.merges") else _merges_from_scores(tokens, meta)
    unknown = meta.get("tokenizer.ggml.unknown_token_id")
    unk = tokens[unknown] if isinstance(unknown, int) and 0 <= unknown < len(tokens) else None
    backend = tokenizers.Tokenizer(
        tokenizers.models.BPE(vocab, merges, unk_token=unk, fuse_unk=True, byte_fallback=True)
    )
    prepend = "first" if meta.get("tokenizer.ggml.add_space_prefix", True) else "never"
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend, split=False)
    decoders = tokenizers.decoders
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    backend.decoder = decoders.Sequence([*steps, decoders.Strip(content=" ", left=1)] if prepend == "first" else steps)
    return backend


def _merges_from_scores(tokens: list[str], meta: dict[str, Any]) -> list[tuple[str, str]]:
    """A SentencePiece vocabulary's merges: each token's splits into two tokens of the
    vocabulary, the tokens of higher score merged first."""
    scores = meta.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
    vocab = {t: i for i, t in enumerate(tokens)}
    found = []
    for token, score in zip(tokens, scores, strict=False):
        pairs = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in vocab and token[i:] in vocab]
        pairs.sort(key=lambda p: (vocab[p[0]], vocab[p[1]]))
        found += [(score, a, b) for a, b in pairs]
    found.sort(key=lambda m: (m[0], len(m[1]), len(m[2])), reverse=True)
    return [(a, b) for _, a, b in found]
