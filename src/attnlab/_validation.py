"""The checks of attnlab's arguments, and the errors they raise (defined in :mod:`._exceptions`).

Every message reads ``<argument>: expected <what>, got <what came>``, and every error is
an :class:`AttnlabError` as well as the ``ValueError`` or ``TypeError`` a caller expects,
so that a program (the CLI among them) can tell a bad argument from a bug.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from ._exceptions import ArgumentError, ArgumentTypeError, AttnlabError, MissingDependencyError

__all__ = [
    "FLOAT_DTYPES",
    "ArgumentError",
    "ArgumentTypeError",
    "Array",
    "AttnlabError",
    "MissingDependencyError",
    "all_finite",
    "array_of",
    "broadcasts_to",
    "check_finite",
    "compute_dtype",
    "fail",
    "fits_in_memory",
    "flag",
    "float_array",
    "ids_below",
    "int_seed",
    "is_integer",
    "is_real",
    "layer_dtype",
    "non_finite_counts",
    "optional_callable",
    "output_path",
    "positive_int",
    "probability",
    "real_number",
    "same_dtype",
    "text_ids",
]

Array = np.ndarray  # the one alias for what attnlab computes and returns; inputs are numpy.typing.ArrayLike

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
SEED_LIMIT = 2**63  # seeds are ints in [0, 2**63): what a Philox key and numpy's SeedSequence take


def fail(
    name: str, expected: str, got: object, error: type[Exception] = ValueError, mentions: tuple[str, ...] = ()
) -> AttnlabError:
    """Build (not raise) the error for argument ``name``: an :class:`ArgumentError`, or an
    :class:`ArgumentTypeError` when ``error`` is ``TypeError``; ``mentions``: how ``expected``
    spells other arguments it names ("truncation=True"), so that a caller renames them too
    (:func:`~attnlab._exceptions.renamed`). Callers ``raise fail(...)``."""
    if issubclass(error, TypeError):
        return ArgumentTypeError(f"{name}: expected {expected}, got {got}", name)
    return ArgumentError(f"{name}: expected {expected}, got {got}", name, mentions)


def all_finite(x: Array) -> bool:
    """Whether every number of ``x`` is finite (True for an array of no floats). One sum
    reads x without a copy (NaN or infinite when x holds such a number); only a sum that is
    not finite (such a number, or an overflow of finite ones) is looked at number by number."""
    if x.dtype.kind != "f":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.add.reduce(x, axis=None)) or np.isfinite(x).all())


def non_finite_counts(x: Array) -> dict[str, int]:
    """How many NaN, +Inf and -Inf ``x`` holds, those it holds only ({} when
    :func:`all_finite`): the one count that the loaders' and the forward's refusals say."""
    if all_finite(x):
        return {}
    values = x[~np.isfinite(x)]
    counts = {"NaN": np.isnan(values).sum(), "+Inf": (values == np.inf).sum(), "-Inf": (values == -np.inf).sum()}
    return {kind: int(count) for kind, count in counts.items() if count}


def check_finite(
    x: Array, where: str, name: str, why: str = "the numbers overflow", axes: tuple[str, ...] = ()
) -> None:
    """Refuse ``x``, what a forward computed at ``where`` ("layer 0's queries"), when it
    holds a NaN or an infinity: of finite weights (every loader checks them), the forward
    overflowed its float (``why``, followed by the dtype), and every number after would be
    NaN. The error names ``name``, the argument the forward ran on, and with ``axes`` (a
    name for each of x's axes, "" for one not to say) the first such number's position.

    Raises:
        ArgumentError: "<name>: expected a forward with finite numbers, got NaN in <where>
            at head 1, query 0, key 0 (<why> float32)".
    """
    counts = non_finite_counts(x)
    if not counts:
        return
    kinds = " and ".join(counts)
    first = np.argwhere(~np.isfinite(x))[0] if axes else ()
    at = ", ".join(f"{axis} {int(i)}" for axis, i in zip(axes, first, strict=True) if axis)
    where += f" at {at}" if at else ""
    raise fail(name, "a forward with finite numbers", f"{kinds} in {where} ({why} {x.dtype})")


def machine_memory() -> int | None:
    """The machine's physical memory in bytes, or None where the system does not say (a
    module-level function, so that tests can lower it)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def fits_in_memory(name: str, what: str, nbytes: int, how: str) -> None:
    """Refuse, before allocating it, ``what`` of ``nbytes`` bytes (``how``: what they are
    made of) beyond this machine's physical memory: NumPy would raise a bare MemoryError,
    or the system swap for minutes first.

    Raises:
        ArgumentError: "<name>: expected <what> that fit in this machine's 125.8 GiB of
            memory, got <how>: 9.3 GiB".
    """
    memory = machine_memory()
    if memory is not None and nbytes > memory:
        raise fail(
            name, f"{what} that fit in this machine's {memory / 2**30:.1f} GiB of memory",
            f"{how}: {nbytes / 2**30:,.1f} GiB",
        )  # fmt: skip


def is_real(x: Any) -> TypeGuard[float]:
    """A Python or NumPy real number that is not a bool (the one such check; typed as float,
    which a NumPy number stands in for, as ``is_integer``'s)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def is_integer(x: Any) -> TypeGuard[int]:
    """A Python or NumPy integer that is not a bool (the one integer check; typed as int,
    which a NumPy integer stands in for wherever attnlab takes one)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def real_number(name: str, x: Any, *, minimum: float | None = None) -> float:
    """``x`` as a finite float (not a bool), at least ``minimum`` when given."""
    if not is_real(x):
        raise fail(name, "a real number", repr(x), TypeError)
    try:
        value = float(x)
    except OverflowError:  # an int beyond float range
        raise fail(name, "a number within float range", f"an integer of {len(str(abs(int(x))))} digits") from None
    if not np.isfinite(value):
        raise fail(name, "a finite number", repr(x))
    if minimum is not None and value < minimum:
        raise fail(name, f"a number >= {minimum}", repr(x))
    return value


def optional_callable(name: str, x: Any) -> None:
    """Refuse ``x`` unless it is None or callable (a ``check`` that a long computation calls
    between its steps: the live page's, to stop a request its page left)."""
    if x is not None and not callable(x):
        raise fail(name, "a function or None", type(x).__name__, TypeError)


def flag(name: str, x: Any) -> bool:
    """A real bool (Python's or NumPy's); ``"False"``, 0 or None are refused, as torch does."""
    if not isinstance(x, (bool, np.bool_)):
        raise fail(name, "True or False", repr(x), TypeError)
    return bool(x)


def positive_int(name: str, n: Any) -> int:
    """An integer >= 1 (not a bool)."""
    if not is_integer(n):
        raise fail(name, "an integer >= 1", repr(n), TypeError)
    if n < 1:
        raise fail(name, "an integer >= 1", repr(n))
    return int(n)


def int_seed(name: str, n: Any) -> int:
    """A seed: an integer in [0, 2**63)."""
    if not is_integer(n):
        raise fail(name, "an integer in [0, 2**63)", repr(n), TypeError)
    if not 0 <= n < SEED_LIMIT:
        raise fail(name, "an integer in [0, 2**63)", repr(n))
    return int(n)


def probability(name: str, p: Any) -> float:
    """A dropout probability in [0, 1)."""
    if not is_real(p):
        raise fail(name, "a number in [0, 1)", repr(p), TypeError)
    if not 0 <= p < 1:
        raise fail(name, "a number in [0, 1)", repr(p))
    return float(p)


def ids_below(name: str, ids: np.ndarray, count: int) -> np.ndarray:
    """``ids``, an integer array, once every id is in 0..count − 1 (token ids, token types)."""
    if ids.min() < 0 or ids.max() >= count:
        raise fail(name, f"ids in 0..{count - 1}", f"{ids.min()}..{ids.max()}")
    return ids


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: in no UTF-8 text


def unicode_text(name: str, text: str) -> str:
    """``text``, once it holds no lone surrogate (half of a UTF-16 pair, such as Python makes
    of bytes that are not UTF-8 in a command's arguments): no UTF-8 text has one, and a
    tokenizer would raise its own error."""
    surrogate = _LONE_SURROGATE.search(text)
    if surrogate is not None:
        raise fail(name, "a text of Unicode characters", f"a lone surrogate at position {surrogate.start()}")
    return text


def text_ids(name: str, text: Any, ids: Any, vocab_size: int, positions: int | None) -> np.ndarray:
    """``ids`` as int64 (L,), once they are token ids of a model with ``vocab_size`` ids and
    ``positions`` positions (None: no limit); ``text`` is what the caller passed, a text the
    ids were tokenized from or the ids themselves, for the messages."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise fail(name, "a text or token ids (L,)", f"{ids.dtype} of shape {ids.shape}", TypeError)
    if len(ids) == 0:
        raise fail(name, "a text of at least one token", repr(text))
    ids_below(name, ids, vocab_size)
    if positions is not None and len(ids) > positions:
        raise fail(name, f"at most {positions} tokens, the model's positions", len(ids))
    return ids.astype(np.int64)


def array_of(name: str, x: Any) -> np.ndarray:
    """``np.asarray(x)``, with a ragged or non-numeric nesting reported as ``name``'s error,
    and a torch tensor that requires grad refused as torch's ``Tensor.numpy()`` refuses it
    (attnlab computes outside autograd: the caller detaches it, knowingly)."""
    if getattr(x, "requires_grad", False) is True:
        raise fail(name, "an array, or a tensor without requires_grad (pass tensor.detach(), as torch's "
                   "Tensor.numpy() asks)", f"a {type(x).__name__} with requires_grad=True", TypeError)  # fmt: skip
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise fail(name, "an array (equally long rows)", f"{type(x).__name__} ({e})", TypeError) from None


def float_array(name: str, x: Any, *, min_ndim: int = 2) -> np.ndarray:
    """``x`` as a floating ndarray of at least ``min_ndim`` dimensions (no copy if it is one)."""
    if not isinstance(x, np.ndarray):
        x = array_of(name, x)
    if x.dtype not in FLOAT_DTYPES:
        raise fail(name, "a float16, float32 or float64 array", f"dtype {x.dtype}", TypeError)
    if x.ndim < min_ndim:
        raise fail(name, f"an array with at least {min_ndim} dimensions", f"shape {x.shape}")
    return x


def layer_dtype(dtype: Any) -> np.dtype:
    """A layer's parameter dtype: float32 or float64."""
    try:
        result = np.dtype(dtype)
    except TypeError:
        raise fail("dtype", "float32 or float64", repr(dtype), TypeError) from None
    if result not in (np.float32, np.float64):
        raise fail("dtype", "float32 or float64", result, TypeError)
    return result


def same_dtype(**arrays: np.ndarray) -> np.dtype:
    """The one dtype that all ``arrays`` share; TypeError naming them all otherwise."""
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) != 1:
        names = ", ".join(arrays)
        got = ", ".join(f"{k}={a.dtype}" for k, a in arrays.items())
        raise fail(names, "one dtype for all of them", got, TypeError)
    return dtypes.pop()


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32; float32 and float64 as they are."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def output_path(path: Any, suffixes: tuple[str, ...], name: str = "path") -> Path:
    """``path`` as a Path, once it ends in one of ``suffixes`` and its folder exists:
    checked before any long work, so that the work is not lost."""
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise fail(name, f"a file ending in {', '.join(suffixes)}", repr(str(path)))
    if not path.parent.is_dir():
        raise fail(name, "a file in a folder that exists", repr(str(path)))
    return path


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False
