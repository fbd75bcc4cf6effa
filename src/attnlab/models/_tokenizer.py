"""A checkpoint's tokenizer, through the ``tokenizers`` library, and its tokens as text
a person can read.

Three layouts are read: ``tokenizer.json`` (every fast tokenizer), ``vocab.txt`` (BERT's
WordPiece, with tokenizer_config.json's ``do_lower_case``), and ``vocab.json`` with
``merges.txt`` (GPT-2's byte-level BPE).
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import Array, MissingDependencyError, fail
from ._checkpoint import CheckpointError

__all__ = ["Tokenizer", "read_tokenizer"]

REPLACEMENT = "\ufffd"  # what a decoder writes for the bytes of an unfinished character
GPT2_END = "<|endoftext|>"


class Tokenizer:
    """Text to ids and back, and each id as readable text (:meth:`readable`).

    Args:
        backend: a ``tokenizers.Tokenizer`` (the checkpoint's tokenizer.json, or its
            vocabulary files read into one).
        word_piece: its decoder joins tokens with spaces that are not in the text (BERT's
            WordPiece): :meth:`readable` leaves them out.
    """

    def __init__(self, backend: Any, word_piece: bool = False) -> None:
        self.backend = backend  # a tokenizers.Tokenizer
        self._word_piece = word_piece  # its decoder joins tokens with spaces that are not in the text
        self.special_ids = frozenset(i for i, t in backend.get_added_tokens_decoder().items() if t.special)

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size())

    def encode(self, text: str, *, add_special_tokens: bool = True) -> Array:
        """The ids of ``text`` (L,), int64, with the model's special tokens ([CLS] … [SEP],
        a BOS) where its tokenizer adds them.

        Args:
            text: the text.
            add_special_tokens: add them (default); False gives the text's tokens only.

        Raises:
            ArgumentTypeError: ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise fail("text", "a string", type(text).__name__, TypeError)
        return np.asarray(self.backend.encode(text, add_special_tokens=add_special_tokens).ids, dtype=np.int64)

    def decode(self, ids: Any, *, skip_special_tokens: bool = False) -> str:
        """The text of ``ids``.

        Args:
            ids: token ids (L,).
            skip_special_tokens: leave [CLS], <|endoftext|> and the like out.
        """
        return str(self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens))

    def readable(self, ids: Any) -> list[str]:
        """Each token as the text it adds, not as its vocabulary entry: GPT-2's ``Ġ`` is a
        space and a Chinese character split over byte-level pieces is shown whole on the
        piece that completes it, its earlier pieces as ''. Special tokens keep their names.

        Args:
            ids: token ids (L,).
        """
        return self.pieces(ids)[0]

    def parts(self, ids: Any) -> list[str]:
        """For each token, the characters split over several tokens that it holds bytes
        of ('' for most tokens): both the earlier pieces of 篮 and the piece that completes
        it give '篮'.

        Args:
            ids: token ids (L,).
        """
        return self.pieces(ids)[1]

    def pieces(self, ids: Any) -> tuple[list[str], list[str]]:
        """:meth:`readable` and :meth:`parts` of ``ids`` from one decoding.

        Args:
            ids: token ids (L,).
        """
        ids = [int(i) for i in ids]
        texts, unfinished = self._decode_each(ids)
        parts = [""] * len(ids)
        for i in (i for i, open_ in enumerate(unfinished) if open_):
            ends = next((j for j in range(i + 1, len(ids)) if texts[j]), None)  # the piece that completes it
            if ends is None:
                continue  # bytes of a character that the sequence never finishes
            for n in range(i, ends + 1):
                if texts[ends][0] not in parts[n]:
                    parts[n] += texts[ends][0]
        return texts, parts

    def _decode_each(self, ids: list[int]) -> tuple[list[str], list[bool]]:
        """Each token's text (see :meth:`readable`), and whether it leaves a character unfinished.

        Token i is decoded in a window from the character boundary at or before token
        i − 1 (decoders treat a first token apart: WordPiece's ##, SentencePiece's ▁), and
        its text is what the window's complete characters gain with it. A decoder that
        replaces a whole run of unfinished bytes (ByteFallback) loses complete characters
        from the window's text; the token then shows nothing rather than a repeat."""
        texts: list[str] = []
        unfinished: list[bool] = []
        boundary = [0, 0]  # the last two tokens that begin a character; the window starts at the one before i
        for i in range(len(ids)):
            start = boundary[0] if boundary[1] == i else boundary[1]
            before = self.backend.decode(ids[start:i], skip_special_tokens=False).rstrip(REPLACEMENT)
            after = self.backend.decode(ids[start : i + 1], skip_special_tokens=False)
            unfinished.append(after.endswith(REPLACEMENT) and ids[i] not in self.special_ids)
            complete = after.rstrip(REPLACEMENT)
            text = complete[len(before) :] if complete.startswith(before) else ""
            if self._word_piece and text.startswith(" "):
                text = text[1:]  # the space the decoder put between two words
            texts.append(text)
            if not unfinished[-1]:  # a character begins at token i + 1
                boundary = [boundary[1], i + 1]
        return texts, unfinished

    def is_special(self, token_id: int) -> bool:
        """Whether ``token_id`` is a special token ([CLS], <|endoftext|>): not text.

        Args:
            token_id: one token id.
        """
        return int(token_id) in self.special_ids


def read_tokenizer(directory: Path) -> Tokenizer | None:
    """The tokenizer in ``directory``, or None when it has none."""
    files = {name: directory / name for name in ("tokenizer.json", "vocab.txt", "vocab.json", "merges.txt")}
    if not any(path.is_file() for path in files.values()):
        return None
    settings = _json(directory / "tokenizer_config.json")
    try:
        import tokenizers
        from tokenizers import implementations
    except ImportError:
        characters = _character_vocabulary(files["vocab.txt"])
        defaults = settings.get("tokenize_chinese_chars", True) is True and settings.get("strip_accents") is None
        if characters is None or not defaults:
            raise MissingDependencyError(
                "a model's tokenizer needs tokenizers: pip install 'attnlab[models]'"
            ) from None
        return Tokenizer(_CharacterBackend(characters, bool(settings.get("do_lower_case", True))))
    try:
        if files["tokenizer.json"].is_file():
            backend = tokenizers.Tokenizer.from_file(str(files["tokenizer.json"]))
            word_piece = type(backend.model).__name__ == "WordPiece"
        elif files["vocab.txt"].is_file():
            strip = settings.get("strip_accents")
            built = implementations.BertWordPieceTokenizer(
                str(files["vocab.txt"]),
                lowercase=bool(settings.get("do_lower_case", True)),
                handle_chinese_chars=bool(settings.get("tokenize_chinese_chars", True)),
                strip_accents=strip if isinstance(strip, bool) else None,
            )
            backend, word_piece = tokenizers.Tokenizer.from_str(built.to_str()), True
        elif files["vocab.json"].is_file() and files["merges.txt"].is_file():
            bpe = implementations.ByteLevelBPETokenizer(
                str(files["vocab.json"]),
                str(files["merges.txt"]),
                add_prefix_space=bool(settings.get("add_prefix_space", False)),
            )
            backend, word_piece = tokenizers.Tokenizer.from_str(bpe.to_str()), False
        else:
            raise CheckpointError(f"{directory}: vocab.json without merges.txt (or the reverse); expected both")
    except Exception as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"{directory}: the tokenizer cannot be read: {error}") from None
    _check_unknown_token(directory, backend)
    added = settings.get("added_tokens_decoder") or {}
    if not isinstance(added, dict) or not all(isinstance(t, dict) for t in added.values()):
        raise CheckpointError(f"{directory}: tokenizer_config.json: added_tokens_decoder: expected an object of tokens")
    bad_id = next((repr(i) for i in added if not (isinstance(i, str) and i.isdecimal())), None)
    if bad_id is not None:  # the tokenizer would give the token an id of its own choosing
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: added_tokens_decoder: expected ids that are integers >= 0, "
            f"got {bad_id}"
        )
    special = [t.get("content") for t in added.values() if t.get("special")]
    empty = next((repr(c) for c in special if not isinstance(c, str) or not c), None)
    if empty is not None:  # str(None) would become a token "None" with an id past the vocabulary
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: added_tokens_decoder: expected each special token's content "
            f"to be a non-empty string, got {empty}"
        )
    if files["vocab.json"].is_file() and backend.token_to_id(GPT2_END) is not None:
        special.append(GPT2_END)  # what transformers' GPT2Tokenizer makes its bos, eos and unk
    if special:
        backend.add_special_tokens(special)
    return Tokenizer(backend, word_piece)


def _check_unknown_token(directory: Path, backend: Any) -> None:
    """Refuse a WordPiece vocabulary without its unknown token ([UNK]): tokenizers would
    raise a bare ``Exception`` at the first word it cannot split."""
    model = backend.model
    if type(model).__name__ != "WordPiece":
        return
    unknown = getattr(model, "unk_token", None)
    if not isinstance(unknown, str) or backend.token_to_id(unknown) is None:
        raise CheckpointError(
            f"{directory}: the WordPiece vocabulary: expected its unknown token {unknown!r} among its tokens, "
            "got a vocabulary without it"
        )


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: expected a JSON object, got unreadable JSON ({error})") from None
    return data if isinstance(data, dict) else {}


def _character_vocabulary(path: Path) -> list[str] | None:
    """A vocab.txt of [SPECIAL] tokens and single characters (the built-in models'), or None."""
    if not path.is_file():
        return None
    vocab = path.read_text(encoding="utf-8").rstrip("\n").split("\n")  # lines, as BERT reads them: \n only
    single = all(len(t) == 1 or (t.startswith("[") and t.endswith("]")) for t in vocab)
    return vocab if single and "[UNK]" in vocab and "[CLS]" in vocab and "[SEP]" in vocab else None


class _Token:
    special = True


class _Encoding:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class _CharacterBackend:
    """BERT's tokenization over a vocabulary of single characters, without the tokenizers
    package (so that built-in models run after a plain ``pip install attnlab``): control and
    format characters and U+FFFD dropped, whitespace made spaces, special tokens ([MASK])
    kept whole, lower case and accents stripped, every CJK character and punctuation mark a
    token; any other run of characters is one word, its id if it is one vocabulary
    character, else [UNK] (WordPiece finds no pieces of it: the vocabulary has none)."""

    def __init__(self, vocab: list[str], lowercase: bool) -> None:
        self.vocab, self.lowercase = vocab, lowercase
        self.index = {t: i for i, t in enumerate(vocab)}
        self.specials = {i for i, t in enumerate(vocab) if len(t) > 1}

    def encode(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        ids: list[int] = []
        pattern = "(" + "|".join(re.escape(self.vocab[i]) for i in sorted(self.specials)) + ")"
        for n, part in enumerate(re.split(pattern, text) if self.specials else [text]):
            ids += [self.index[part]] if n % 2 else self._words(part)
        if add_special_tokens:
            ids = [self.index["[CLS]"], *ids, self.index["[SEP]"]]
        return _Encoding(ids)

    def _words(self, text: str) -> list[int]:
        text = "".join(" " if _is_space(c) else c for c in text if not _is_dropped(c))  # BERT's clean_text
        if self.lowercase:
            text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if unicodedata.category(c) != "Mn")
        words: list[str] = []
        for chunk in text.split(" "):
            word = ""
            for c in chunk:
                if _is_cjk(c) or _is_punctuation(c):
                    words += [word, c] if word else [c]
                    word = ""
                else:
                    word += c
            if word:
                words.append(word)
        unk = self.index["[UNK]"]
        return [self.index.get(w, unk) if len(w) == 1 else unk for w in words]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(self.vocab[i] for i in ids if not (skip_special_tokens and i in self.specials))

    def get_added_tokens_decoder(self) -> dict[int, _Token]:
        return {i: _Token() for i in self.specials}

    def get_vocab_size(self) -> int:
        return len(self.vocab)

    def id_to_token(self, i: int) -> str:
        return self.vocab[i]


def _is_space(c: str) -> bool:
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def _is_dropped(c: str) -> bool:
    """What BERT's clean_text deletes: NUL, U+FFFD and control or format characters."""
    return c in ("\x00", "\ufffd") or (c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf"))


def _is_cjk(c: str) -> bool:
    """BERT's "Chinese character" ranges."""
    o = ord(c)
    ranges = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
              (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))  # fmt: skip
    return any(lo <= o <= hi for lo, hi in ranges)


def _is_punctuation(c: str) -> bool:
    """BERT's punctuation: ASCII symbols and Unicode P* categories."""
    o = ord(c)
    return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or unicodedata.category(c).startswith("P")
