"""Reading a user's sequence for the CLI: files, standard input and text.

Every failure is an :class:`InputError` whose message names the problem in one line.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
import tokenize
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .._exceptions import InputError
from .._io import check_file, read_bounded
from .._validation import Array, is_real
from ..layers._text import embed_tokens, split_text

__all__ = [
    "InputError",
    "as_sequence",
    "embed_tokens",
    "parse_tokens",
    "read_json_or_matrix",
    "source_name",
    "split_text",
]

SUFFIXES = (".json", ".csv", ".npy")
BOM = "\ufeff"  # the byte-order mark, accepted only at the very start of a file or of standard input
MAX_VALUES = 2**26  # the most numbers an input file may hold (512 MiB as float64)
# the most bytes read from an input file or standard input (1 GiB, the checkpoints' limit on their largest files):
# room for a saved trace of MAX_SCORES scores at full precision or an .npy of MAX_VALUES float64 numbers
MAX_BYTES = 1024 * 2**20
NPY_VERSIONS = ((1, 0), (2, 0), (3, 0))  # the .npy format versions NumPy reads and writes


def _numeric_rows(rows: Any, source: str) -> Array:
    """A list of equally long rows of finite numbers as a (L, d_model) float64 array."""
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise InputError(f"{source}: expected a list of rows (a list of lists of numbers)")
    if not rows:
        raise InputError(f"{source}: the sequence is empty")
    width = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != width:
            raise InputError(f"{source}: ragged rows: row 0 has {width} values, row {i} has {len(row)}")
        for j, x in enumerate(row):
            if not is_real(x):
                raise InputError(f"{source}: row {i}, column {j}: expected a number, got {x!r}")
    try:
        matrix = np.array(rows, dtype=float).reshape(len(rows), width)
    except OverflowError:  # an integer beyond float range
        raise InputError(f"{source}: expected numbers within float range (about ±1.8e308)") from None
    return _finite(matrix, source)


def _finite(x: Array, source: str) -> Array:
    if x.ndim != 2 or 0 in x.shape:
        raise InputError(f"{source}: expected a non-empty (length, width) matrix, got shape {x.shape}")
    bad = np.argwhere(~np.isfinite(x))
    if len(bad):
        i, j = bad[0]
        raise InputError(f"{source}: row {i}, column {j}: expected a finite number, got {x[i, j]}")
    return x


def _parse_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{source}: not valid JSON ({e})") from None
    except RecursionError:
        raise InputError(f"{source}: JSON nested too deeply (a sequence is a list of rows)") from None
    except ValueError as e:  # such as an integer of more than 4300 digits
        raise InputError(f"{source}: cannot use this JSON ({e})") from None


def _read_csv(text: str, source: str) -> tuple[Array, list[str] | None]:
    """The numbers of a CSV file, and the tokens it names. A first column that is not
    numbers (below a header, if any) holds the tokens, one per row; a first row whose
    other fields are not all numbers is a header, such as "token,x0,x1", and is skipped."""
    reader = csv.reader(io.StringIO(text))
    try:
        table = [fields for fields in reader if any(field.strip() for field in fields)]
    except csv.Error as e:  # such as a field over csv.field_size_limit() (131,072 characters)
        raise InputError(f"{source}: cannot read as CSV: line {reader.line_num}: {e}") from None
    for i, fields in enumerate(table):
        for j, field in enumerate(fields):
            if BOM in field:  # a leading one is Excel's and gone already: one inside is two files joined
                raise InputError(f"{source}: row {i}, column {j}: expected no byte-order mark (U+FEFF), got {field!r}")
    named = len(table) > 1 and not all(_is_number(fields[0]) for fields in table[1:])
    first = table[0][1 if named else 0 :] if table else []
    not_finite = any(_is_float(field) and not _is_number(field) for field in first)  # nan, inf: data, refused below
    if len(table) > 1 and not not_finite and not all(map(_is_number, first)):
        table = table[1:]  # a header row (a lone row is data, so that its errors are about data)
    named = named or (len(table) == 1 and not _is_number(table[0][0]))
    names = [fields[0].strip() for fields in table] if named else None
    rows = []
    for i, fields in enumerate(table):
        row = []
        for j, field in enumerate(fields[1:] if named else fields):
            if not _is_number(field):
                what = "a finite number" if _is_float(field) else "numbers only"
                raise InputError(f"{source}: row {i}, column {j + named}: expected {what}, got {field!r}")
            row.append(float(field))
        rows.append(row)
    return _numeric_rows(rows, source), names


_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _is_float(field: str) -> bool:
    try:
        float(field)
    except ValueError:
        return False
    return True


def _is_number(field: str) -> bool:
    """A number as a spreadsheet writes one (not "nan", "inf" or "1_000", which float() takes)."""
    return _NUMBER.fullmatch(field) is not None


def read_json_or_matrix(path: str) -> Any:
    """The parsed JSON document of a .json file or standard input ('-'), the matrix of an
    .npy file, or the (matrix, tokens) of a .csv file. A file is checked before it is
    opened: a regular file (not a FIFO, which would block, nor a device such as /dev/zero,
    which never ends) of at most :data:`MAX_BYTES` bytes.

    Raises:
        InputError: naming the file (or standard input): an unknown suffix, not a regular
            file, too large, unreadable, or contents that are not a sequence or a trace.
    """
    if path == "-":
        text = sys.stdin.read(MAX_BYTES + 1)  # characters, at least as many bytes: no more than the limit's worth
        if len(text) > MAX_BYTES:
            raise InputError(f"standard input: expected at most {MAX_BYTES:,} characters, got more")
        return _parse_json(text.removeprefix(BOM), "standard input")
    file = Path(path)
    if file.suffix.lower() not in SUFFIXES:
        raise InputError(f"{path}: unknown suffix {file.suffix!r}; expected one of {', '.join(SUFFIXES)} or '-'")
    try:
        if file.suffix.lower() == ".npy":
            return _read_npy(file, path)
        text = _bounded(file, path).decode("utf-8-sig")  # Excel's "CSV UTF-8" starts with a byte-order mark
    except InputError:
        raise
    except (OSError, ValueError, EOFError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"{path}: cannot read: {reason}") from None
    return _read_csv(text, path) if file.suffix.lower() == ".csv" else _parse_json(text, path)


def _bounded(file: Path, path: str, read: bool = True) -> bytes:
    """The bytes of ``file`` (none when not ``read``), once :mod:`attnlab._io` allows it: a
    regular file (or a link to one) of at most :data:`MAX_BYTES`, checked before it is
    opened.

    Raises:
        InputError: "PATH: cannot read: expected a regular file, got a FIFO" and the like,
            naming the file as the user wrote it.
    """

    def refuse(reason: str) -> InputError:
        return InputError(f"{path}: cannot read: {reason}")

    if not read:
        check_file(file, MAX_BYTES, refuse)
        return b""
    return read_bounded(file, MAX_BYTES, refuse)


def _read_npy(file: Path, path: str) -> Array:
    """The (length, width) matrix of an .npy file of numbers, its header checked before its
    data is read, and NumPy's warnings (such as a header written by Python 2's) silenced:
    what makes a file unusable is refused in one line.

    Raises:
        InputError: not a regular file or too large, a format version NumPy does not read,
            a corrupt header, a shape with a negative size, not numbers, too many of them,
            missing data, or not a finite (length, width) matrix.
    """
    _bounded(file, path, read=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shape, dtype = _npy_header(file, path)
        if dtype.kind not in "iuf":  # objects would need unpickling: refused before any is read
            raise InputError(f"{path}: expected an array of numbers (no pickle), got dtype {dtype}")
        if any(n < 0 for n in shape):  # NumPy's header check lets these through, to fail on the data
            raise InputError(f"{path}: cannot read: its header's shape: expected sizes of at least 0, got {shape}")
        if math.prod(shape) > MAX_VALUES:
            raise InputError(f"{path}: expected at most {MAX_VALUES:,} numbers, got shape {shape}")
        matrix = np.load(file, allow_pickle=False).astype(float)
    return _finite(matrix, path)


def _npy_header(file: Path, path: str) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype an .npy file's header declares, read without its data.

    Raises:
        InputError: an .npz archive, a format version other than 1.0, 2.0 or 3.0, or a
            corrupt header.
    """
    with open(file, "rb") as f:
        if f.read(2) == b"PK":  # a zip: an .npz archive under another name
            raise InputError(f"{path}: expected one array (.npy), got an .npz archive")
        f.seek(0)
        major, minor = np.lib.format.read_magic(f)
        if (major, minor) not in NPY_VERSIONS:  # else a later version's header is read as garbage
            *first, last = (f"{a}.{b}" for a, b in NPY_VERSIONS)
            versions = f"{', '.join(first)} or {last}"
            raise InputError(
                f"{path}: cannot read: expected an .npy file of format version {versions} (what NumPy reads), "
                f"got version {major}.{minor}"
            )
        # 3.0 is 2.0 with a UTF-8 header, which differs only in a structured dtype's field names (refused anyway)
        read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        try:
            shape, _, dtype = read(f)
        except (tokenize.TokenError, SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as error:
            # NumPy evaluates the header's dict literal: a corrupt one fails in Python's tokenizer
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            message = f"not a readable .npy file, its header is corrupt ({reason})"
            raise InputError(f"{path}: cannot read: {message}") from None
    return shape, dtype


def source_name(path: str) -> str:
    return "standard input" if path == "-" else path


def as_sequence(data: Any, path: str) -> tuple[Array, list[str] | None]:
    """What :func:`read_json_or_matrix` read, as a (L, d_model) sequence and the tokens
    the file named (a CSV's first column), if any."""
    if isinstance(data, tuple):
        return data
    if isinstance(data, np.ndarray):
        return data, None
    return _numeric_rows(data, source_name(path)), None


def parse_tokens(tokens: str | None, length: int) -> list[str] | None:
    if tokens is None:
        return None
    labels = tokens.split()
    if len(labels) != length:
        raise InputError(f"--tokens: expected {length} labels (one per row), got {len(labels)}")
    return labels
