"""A checkpoint's tokenizer, through the ``tokenizers`` library, and its tokens as text
a person can read.

Three layouts are read: ``tokenizer.json`` (every fast tokenizer), ``vocab.txt`` (BERT's
WordPiece, with tokenizer_config.json's ``do_lower_case``), and ``vocab.json`` with
``merges.txt`` (GPT-2's byte-level BPE). tokenizer_config.json's settings are honoured as
``transformers`` honours them (:func:`_apply_settings`): a tokenizer.json's padding and
truncation are off unless asked for, ``add_bos_token``/``add_eos_token`` given there
rewrite the special tokens around a text, ``do_lower_case`` sets a BERT normalizer's
lowercasing, ``model_max_length`` is the longest text the checkpoint takes and
``chat_template`` its chat format.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

from .._io import check_file, exists, read_bounded
from .._validation import Array, MissingDependencyError, fail, is_integer, is_real, unicode_text
from ._checkpoint import MAX_JSON, MAX_TOKENIZER, CheckpointError

__all__ = ["Tokenizer", "read_tokenizer"]

REPLACEMENT = "\ufffd"  # what a decoder writes for the bytes of an unfinished character
GPT2_END = "<|endoftext|>"


class Tokenizer:
    """Text to ids and back, and each id as readable text (:meth:`readable`).

    Args:
        backend: a ``tokenizers.Tokenizer`` (the checkpoint's tokenizer.json, or its
            vocabulary files read into one), without padding or truncation.
        word_piece: its decoder joins tokens with spaces that are not in the text (BERT's
            WordPiece): :meth:`readable` leaves them out.
        chat_template: the checkpoint's Jinja chat template, or None (not a chat model).
        bos_token: the text of its begin token, as a chat template names it, or None.
        eos_token: the text of its end token, or None.
        model_max_length: the most tokens the checkpoint's tokenizer says its model
            takes, or None (no limit of its own).
    """

    def __init__(
        self, backend: Any, word_piece: bool = False, *, chat_template: str | None = None,
        bos_token: str | None = None, eos_token: str | None = None, model_max_length: int | None = None,
    ) -> None:  # fmt: skip
        self.backend = backend  # a tokenizers.Tokenizer
        self._word_piece = word_piece  # its decoder joins tokens with spaces that are not in the text
        self.special_ids = frozenset(i for i, t in backend.get_added_tokens_decoder().items() if t.special)
        self.chat_template = chat_template
        self.bos_token, self.eos_token = bos_token, eos_token
        self.model_max_length = model_max_length

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size())

    def encode(self, text: str, *, add_special_tokens: bool = True, max_length: int | None = None) -> Array:
        """The ids of ``text`` (L,), int64, with the model's special tokens ([CLS] … [SEP],
        a BOS) where its tokenizer adds them: ``transformers``' ``tokenizer(text)["input_ids"]``.

        Args:
            text: the text.
            add_special_tokens: add them (default); False gives the text's tokens only.
            max_length: None (default): every token; else at most this many, the text's
                last tokens cut and the special tokens kept (``truncation=True`` in transformers).

        Raises:
            ArgumentTypeError: ``text`` is not a string.
            ArgumentError: ``max_length`` below the special tokens' count.
        """
        if not isinstance(text, str):
            raise fail("text", "a string", type(text).__name__, TypeError)
        unicode_text("text", text)
        encoding = self.backend.encode(text, add_special_tokens=False)
        if max_length is not None:
            added = self.backend.num_special_tokens_to_add(False) if add_special_tokens else 0
            if not is_integer(max_length) or max_length < max(added, 1):
                least = max(added, 1)
                raise fail("max_length", f"an integer >= {least}, room for the special tokens", repr(max_length))
            encoding.truncate(int(max_length) - added)
        encoding = self.backend.post_process(encoding, add_special_tokens=add_special_tokens)
        return np.asarray(encoding.ids, dtype=np.int64)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Each token of ``text`` (without special tokens) as its (start, end) characters in it.

        Args:
            text: the text.
        """
        return [(int(a), int(b)) for a, b in self.backend.encode(text, add_special_tokens=False).offsets]

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
    if not any(exists(path) for path in files.values()):
        return None
    for path in files.values():  # no FIFO, device or huge file reaches the tokenizers library
        if exists(path):
            check_file(path, MAX_TOKENIZER)
    settings = _json(directory / "tokenizer_config.json")
    flags = {name: _flag(directory, settings, name, default) for name, default in _FLAGS.items()}
    strip = settings.get("strip_accents")
    if strip is not None and not isinstance(strip, bool):
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: strip_accents: expected true, false or null, got {strip!r}"
        )
    try:
        import tokenizers
        from tokenizers import implementations
    except ImportError:
        characters = _character_vocabulary(files["vocab.txt"])
        defaults = flags["tokenize_chinese_chars"] and strip is None
        if characters is None or not defaults:
            raise MissingDependencyError(
                "a model's tokenizer needs tokenizers: pip install 'attnlab[models]'"
            ) from None
        return Tokenizer(_CharacterBackend(characters, flags["do_lower_case"]))
    try:
        if exists(files["tokenizer.json"]):
            text = read_bounded(files["tokenizer.json"], MAX_TOKENIZER).decode("utf-8")
            backend = tokenizers.Tokenizer.from_str(text)
            word_piece = type(backend.model).__name__ == "WordPiece"
        elif exists(files["vocab.txt"]):
            built = implementations.BertWordPieceTokenizer(
                str(files["vocab.txt"]),
                lowercase=flags["do_lower_case"],
                handle_chinese_chars=flags["tokenize_chinese_chars"],
                strip_accents=strip,
            )
            backend, word_piece = tokenizers.Tokenizer.from_str(built.to_str()), True
        elif exists(files["vocab.json"]) and exists(files["merges.txt"]):
            bpe = implementations.ByteLevelBPETokenizer(
                str(files["vocab.json"]),
                str(files["merges.txt"]),
                add_prefix_space=flags["add_prefix_space"],
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
    if exists(files["vocab.json"]) and backend.token_to_id(GPT2_END) is not None:
        special.append(GPT2_END)  # what transformers' GPT2Tokenizer makes its bos, eos and unk
    if special:
        backend.add_special_tokens(special)
    return _apply_settings(directory, backend, word_piece, settings)


def _apply_settings(directory: Path, backend: Any, word_piece: bool, settings: dict[str, Any]) -> Tokenizer:
    """The tokenizer with tokenizer_config.json's settings, as ``transformers`` (5.x) applies them.

    - A tokenizer.json's ``padding`` and ``truncation`` are off: transformers turns both
      off unless a call asks for them (all-MiniLM-L6-v2's would pad every text to 128).
    - A BERT tokenizer (``tokenizer_class`` BertTokenizer) normalizes as ``do_lower_case``,
      ``tokenize_chinese_chars`` and ``strip_accents`` say, and puts [CLS] … [SEP] around a
      text, whatever its tokenizer.json says (transformers' BertTokenizer rebuilds both).
    - ``add_bos_token``/``add_eos_token`` must say what the tokenizer does: transformers
      follows a tokenizer.json's post-processor and ignores them, so a folder where they
      disagree is refused rather than read one way or the other.
    - ``model_max_length`` (absent, or transformers' "very large" 10³⁰: no limit),
      ``bos_token``/``eos_token`` (a text or an added token's ``content``) and
      ``chat_template`` (chat_template.jinja beside it first, as transformers saves it).

    Raises:
        CheckpointError: settings of the wrong type, or that contradict each other or the
            vocabulary.
    """
    backend.no_padding()
    backend.no_truncation()
    bos, eos = (_token_text(directory, settings, name) for name in ("bos_token", "eos_token"))
    if word_piece and settings.get("tokenizer_class") in ("BertTokenizer", "BertTokenizerFast"):
        _bert_settings(directory, backend, settings)
    for name, token in (("add_bos_token", bos), ("add_eos_token", eos)):
        _check_added(directory, backend, settings, name, token)
    return Tokenizer(
        backend, word_piece, chat_template=_chat_template(directory, settings), bos_token=bos, eos_token=eos,
        model_max_length=_max_length(directory, settings.get("model_max_length")),
    )  # fmt: skip


def _bert_settings(directory: Path, backend: Any, settings: dict[str, Any]) -> None:
    """BertTokenizer's normalizer and [CLS] … [SEP], from the settings (transformers' defaults)."""
    from tokenizers import normalizers, processors

    flags = {"do_lower_case": True, "tokenize_chinese_chars": True}
    for name, default in flags.items():
        flags[name] = settings.get(name, default)
        if not isinstance(flags[name], bool):
            raise CheckpointError(
                f"{directory}: tokenizer_config.json: {name}: expected true or false, got {flags[name]!r}"
            )
    strip = settings.get("strip_accents")
    if strip is not None and not isinstance(strip, bool):
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: strip_accents: expected true, false or null, got {strip!r}"
        )
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=flags["tokenize_chinese_chars"], strip_accents=strip,
        lowercase=flags["do_lower_case"],
    )  # fmt: skip
    cls, sep = (_token_text(directory, settings, n) or d for n, d in (("cls_token", "[CLS]"), ("sep_token", "[SEP]")))
    ids = {t: backend.token_to_id(t) for t in (cls, sep)}
    missing = next((t for t, i in ids.items() if i is None), None)
    if missing is not None:
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: expected {missing!r} in the vocabulary; it is not there"
        )
    backend.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1", special_tokens=list(ids.items())
    )


# tokenizer_config.json's switches for the vocab.txt and vocab.json layouts, and their defaults
_FLAGS = {"do_lower_case": True, "tokenize_chinese_chars": True, "add_prefix_space": False}


def _flag(directory: Path, settings: dict[str, Any], name: str, default: bool) -> bool:
    """tokenizer_config.json's switch ``name``, true or false (``"false"``, a string, is no
    false: refused, never read as true), or ``default`` where it is absent or null."""
    value = settings.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CheckpointError(f"{directory}: tokenizer_config.json: {name}: expected true or false, got {value!r}")
    return value


def _check_added(directory: Path, backend: Any, settings: dict[str, Any], name: str, token: str | None) -> None:
    """Refuse ``add_bos_token``/``add_eos_token`` (``name``) of the wrong type, or saying
    other than what the tokenizer does around a text."""
    if name not in settings:
        return
    value = settings[name]
    if not isinstance(value, bool):
        raise CheckpointError(f"{directory}: tokenizer_config.json: {name}: expected true or false, got {value!r}")
    which = name[4:7]  # bos or eos
    if value and token is None:
        raise CheckpointError(f"{directory}: tokenizer_config.json: {name} is true but no {which}_token is named")
    token_id = None if token is None else backend.token_to_id(token)
    if value and token_id is None:
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: {name} is true but {which}_token {token!r} is not in the vocabulary"
        )
    ids = backend.encode("a", add_special_tokens=True).ids
    does = token_id is not None and bool(ids) and ids[0 if which == "bos" else -1] == token_id
    if does != value:
        raise CheckpointError(
            f"{directory}: tokenizer_config.json says {name} {str(value).lower()}, but the tokenizer "
            f"{'does not add' if value else 'adds'} {token!r}: settings that contradict each other"
        )


def _token_text(directory: Path, settings: dict[str, Any], name: str) -> str | None:
    """A named special token's text: a string, or an added token's ``content``."""
    value = settings.get(name)
    if isinstance(value, dict):
        value = value.get("content")
    if value is not None and not (isinstance(value, str) and value):
        raise CheckpointError(f"{directory}: tokenizer_config.json: {name}: expected a token's text, got {value!r}")
    return value


def _max_length(directory: Path, value: Any) -> int | None:
    """``model_max_length``: None for none, or transformers' stand-in for none (≥ 10²⁹)."""
    if value is None or (is_real(value) and value >= 1e29):
        return None
    if not is_integer(value) or value < 1:
        raise CheckpointError(
            f"{directory}: tokenizer_config.json: model_max_length: expected a positive integer, got {value!r}"
        )
    return int(value)


def _chat_template(directory: Path, settings: dict[str, Any]) -> str | None:
    """The chat template: chat_template.jinja, else tokenizer_config.json's ``chat_template``
    (a text, or a list of named ones whose "default" is the one; transformers' order)."""
    jinja = directory / "chat_template.jinja"
    if exists(jinja):
        try:
            return read_bounded(jinja, MAX_JSON).decode("utf-8")
        except UnicodeDecodeError as error:
            raise CheckpointError(f"{jinja}: expected UTF-8 text, got {error}") from None
    value = settings.get("chat_template")
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    if value is not None and not isinstance(value, str):
        got = repr(value)[:100]
        raise CheckpointError(f"{directory}: tokenizer_config.json: chat_template: expected a text, got {got}")
    return value


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
    if not exists(path):
        return {}
    raw = read_bounded(path, MAX_JSON)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: expected a JSON object, got unreadable JSON ({error})") from None
    return data if isinstance(data, dict) else {}


def _character_vocabulary(path: Path) -> list[str] | None:
    """A vocab.txt of [SPECIAL] tokens and single characters (the built-in models'), or None."""
    if not exists(path):
        return None
    try:
        # lines, as BERT reads them: \n only
        vocab = read_bounded(path, MAX_TOKENIZER).decode("utf-8").rstrip("\n").split("\n")
    except UnicodeDecodeError as error:
        raise CheckpointError(f"{path}: expected UTF-8 text, got {error}") from None
    single = all(len(t) == 1 or (t.startswith("[") and t.endswith("]")) for t in vocab)
    return vocab if single and "[UNK]" in vocab and "[CLS]" in vocab and "[SEP]" in vocab else None


class _Token:
    special = True


class _Encoding:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def truncate(self, max_length: int) -> None:
        del self.ids[max_length:]


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
        return self.post_process(_Encoding(ids), add_special_tokens=add_special_tokens)

    def num_special_tokens_to_add(self, is_pair: bool) -> int:
        return 2  # [CLS] and [SEP]

    def post_process(self, encoding: _Encoding, add_special_tokens: bool = True) -> _Encoding:
        if add_special_tokens:
            return _Encoding([self.index["[CLS]"], *encoding.ids, self.index["[SEP]"]])
        return encoding

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
