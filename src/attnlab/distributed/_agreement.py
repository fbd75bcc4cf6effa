"""The ranks' agreement: one collective before any other, so that a bad argument on one
rank is the same one-line error on every rank, never a hang.

Agreement: every call starts with one collective, :func:`agree`, before any other: each rank
checks its arguments (catching any error) and sends its error, shapes, dtypes, settings and
the sequence number of its ring call on the group; every rank then raises the same one-line
error, or none does. The sequence number is the pairing's guard: a rank that is one call
ahead (it failed alone once and called again) meets the others' earlier call, and every rank
refuses it instead of computing against another call's blocks.

The rules travel as ``engine.variants.Rules``; what the ranks compare of them is JSON, sent
as bytes in tensors (never pickled): numbers by value, arrays by a digest of their bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._exceptions import RingError
from .._validation import ArgumentError, ArgumentTypeError, AttnlabError, MissingDependencyError, fail, flag
from ..engine._problem import make_problem
from ..engine.variants import Band, Rules, offset
from ..engine.variants.softcap import check_softcap
from ..engine.variants.window import check_window
from ._ring import Ring
from ._shards import LAYOUTS, runs_of

__all__ = ["agree", "check_shards", "settings", "shared"]


def _torch_distributed() -> Any:
    try:
        import torch.distributed as dist
    except ImportError:
        raise MissingDependencyError("ring attention runs on torch.distributed: pip install 'attnlab[torch]'") from None
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError(
            "group: expected an initialised torch.distributed process group "
            "(torch.distributed.init_process_group('gloo'), or launch with torchrun), got none",
            "group",
        )
    return dist


# per process group, how many ring calls this process has made on it: the sequence number
# of the next agreement, which every rank must share (see :func:`agree`)
_CALLS: dict[int, int] = {}


def agree(
    name: str, arrays: dict[str, Any], shared: dict[str, Any], group: Any, check: Callable[[], dict[str, Any]]
) -> Ring:
    """The one agreement step before any collective: check this rank's arguments (``check``
    returns the settings it parsed; whatever it raises, of any type, is caught), then
    exchange with every rank its error, the shapes and dtypes of ``arrays``, the settings
    ``shared`` (compared by value: numbers as numbers, bools as bools, sequences item by
    item) and its call's sequence number on ``group``, so that every rank raises the same
    one-line error (naming the rank at fault) or none does: no rank is left waiting, and
    no rank computes against another rank's next call.

    Raises:
        ArgumentError: a rank's argument was bad (``ArgumentTypeError`` when its error was a
            TypeError), or the ranks disagree on the settings, dtypes or dimensions.
        RingError: a rank failed otherwise, or the ranks are at different calls (their
            counts of ring calls then meet again at the highest, so the next call pairs).
    """
    dist = _torch_distributed()
    error: dict[str, str] | None = None
    parsed: dict[str, Any] = {}
    try:
        parsed = check()
    except Exception as e:  # any error at all: said on every rank, never a rank gone ahead or left behind
        error = {"kind": _kind(e), "message": _one_line(e)}
    key = _group_key(dist, group)
    sequence = _CALLS.get(key, 0) + 1
    _CALLS[key] = sequence
    mine = {
        "call": [sequence, name], "error": error, "shapes": {k: _shape(a) for k, a in arrays.items()},
        "dtypes": {k: _dtype(a) for k, a in arrays.items()},
        "settings": {k: _by_value(v) for k, v in shared.items()}, "shown": {k: _shown(v) for k, v in shared.items()},
    }  # fmt: skip
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    every = _all_gather_json(dist, group, size, mine)
    _same_call(every, key)
    failed = [(r, m["error"]) for r, m in enumerate(every) if m["error"]]
    if failed:
        r, first = failed[0]
        message = f"{name}: rank {r} of {size}: {first['message']}"
        kind = {"value": ArgumentError, "type": ArgumentTypeError}.get(first["kind"], RingError)
        raise kind(message)
    _same_settings(name, every)
    for r, m in enumerate(every):
        if any(_beside_rows(s) != _beside_rows(every[0]["shapes"][k]) for k, s in m["shapes"].items() if s):
            raise ArgumentError(
                f"{name}: the ranks disagree on the batch, head or width dimensions: rank 0 has "
                f"{every[0]['shapes']}, rank {r} {m['shapes']}; only the sequence axis may differ"
            )
    lengths = [m["shapes"]["query"][-2] for m in every]
    total = (sum(lengths), sum(lengths))  # (L_total, S_total): the queries and keys are the same positions
    diagonal = offset(parsed.get("causal_alignment", "top_left"), total)
    band = Band.of(parsed["is_causal"], check_window(parsed.get("window")), diagonal, total)
    return Ring(
        dist, group, rank, size, lengths, runs_of(lengths, parsed["layout"]), parsed["is_causal"], parsed["scale"],
        parsed["enable_gqa"], band, diagonal,
        parsed.get("softcap"), parsed.get("alibi_slopes"), parsed.get("sinks"),
    )  # fmt: skip


def _same_call(every: list[dict[str, Any]], key: int) -> None:
    """Refuse, on every rank, an agreement whose ranks are at different ring calls (by
    sequence number and function); the counts then meet at the highest."""
    calls = [tuple(m["call"]) for m in every]
    if all(call == calls[0] for call in calls):
        return
    _CALLS[key] = max(sequence for sequence, _ in calls)
    r = next(r for r, call in enumerate(calls) if call != calls[0])
    (first, first_name), (other, other_name) = calls[0], calls[r]
    raise RingError(  # named by rank 0's call: the same message on every rank, whichever call each made
        f"{first_name}: the ranks are out of step: rank 0 is at its ring call {first} ({first_name}), rank {r} at "
        f"its call {other} ({other_name}); a rank that skipped or repeated a call would pair with another "
        "rank's next one (every rank refuses this call; the next pairs again)"
    )


def _same_settings(name: str, every: list[dict[str, Any]]) -> None:
    """Refuse, on every rank, ranks whose settings (by value) or dtypes differ."""
    for r, m in enumerate(every):
        settings = [k for k in m["settings"] if m["settings"][k] != every[0]["settings"].get(k)]
        dtypes = [k for k in m["dtypes"] if m["dtypes"][k] != every[0]["dtypes"].get(k)]
        if settings or dtypes:
            first = ", ".join([*(f"{k}={every[0]['shown'][k]}" for k in settings),
                               *(f"{k} of dtype {every[0]['dtypes'][k]}" for k in dtypes)])  # fmt: skip
            other = ", ".join([*(f"{k}={m['shown'][k]}" for k in settings),
                               *(f"{k} of dtype {m['dtypes'][k]}" for k in dtypes)])  # fmt: skip
            raise ArgumentError(f"{name}: the ranks disagree: rank 0 has {first}, rank {r} {other}")


def _beside_rows(shape: list[int]) -> list[int]:
    return [*shape[:-2], *shape[-1:]]  # every dimension but the sequence's


def _kind(error: Exception) -> str:
    """How every rank re-raises ``error``: "value" or "type" (a bad argument), or "other"."""
    if isinstance(error, ArgumentTypeError) or (isinstance(error, TypeError) and not isinstance(error, AttnlabError)):
        return "type"
    if isinstance(error, (AttnlabError, ValueError)):
        return "value"
    return "other"


def _one_line(error: Exception) -> str:
    """``error``'s message on one line; prefixed by its type when it is not attnlab's."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if isinstance(error, AttnlabError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _group_key(dist: Any, group: Any) -> int:
    """The key of ``group``'s call count: the id of its object (the default group's for
    None), not the object itself, which this module must not keep alive past
    destroy_process_group (gloo's threads would then end the interpreter at exit)."""
    return id(dist.group.WORLD if group is None else group)


def _by_value(x: Any) -> Any:
    """``x`` as JSON that compares by value: a bool tagged as one (True is not 1), a NumPy
    number as Python's (np.float64(0.25) is 0.25, 2 is 2.0), a sequence item by item;
    anything else by its type and repr."""
    if isinstance(x, (bool, np.bool_)):
        return {"bool": bool(x)}
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        value = float(x)
        return value if math.isfinite(value) else {"float": repr(value)}  # nan as nan: equal on every rank
    if x is None or isinstance(x, str):
        return None if x is None else str(x)
    if isinstance(x, (list, tuple)):
        return [_by_value(item) for item in x]
    return {"other": _shown(x)}


def _shown(x: Any) -> str:
    """``x`` as a disagreement's message shows it: its repr (np.True_ shows its type)."""
    try:
        return repr(x)
    except Exception:  # a repr that fails is still a value to show
        return type(x).__name__


def _dtype(x: Any) -> str:
    """``x``'s dtype as NumPy names it (a torch tensor's too), or its type's name."""
    dtype = getattr(x, "dtype", None)
    return type(x).__name__ if dtype is None else str(dtype).removeprefix("torch.")


def _shape(x: Any) -> list[int] | None:
    """The shape of ``x`` as an array, or None when it is not one (a ragged list)."""
    try:
        return [int(n) for n in np.shape(x)]
    except Exception:  # whatever np.shape raises: the check has said what is wrong
        return None


def _all_gather_json(dist: Any, group: Any, size: int, value: Any) -> list[Any]:
    """Every rank's ``value`` (JSON-able), in rank order: as bytes in tensors, not pickle."""
    import torch

    data = np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
    lengths = [torch.zeros(1, dtype=torch.int64) for _ in range(size)]
    dist.all_gather(lengths, torch.tensor([len(data)]), group=group)
    longest = max(int(n) for n in lengths)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.from_numpy(data.copy())
    gathered = [torch.zeros(longest, dtype=torch.uint8) for _ in range(size)]
    dist.all_gather(gathered, padded, group=group)
    return [json.loads(bytes(g.numpy()[: int(n)])) for g, n in zip(gathered, lengths, strict=True)]


def check_shards(query: Any, key: Any, value: Any, rules: Rules, scale: Any, enable_gqa: Any) -> None:
    """This rank's own arguments: what an attention call over them checks (the rules among
    them: causal, window, alignment, softcap, ALiBi and sinks; :func:`settings` has refused
    a mask function), and one length."""
    make_problem(query, key, value, None, 0.0, scale, enable_gqa, None, rules)  # raises what it finds
    if np.shape(query)[-2] < 1:
        raise fail("query", "a shard of at least one row on every rank", f"shape {np.shape(query)}")
    if np.shape(key)[-2] != np.shape(query)[-2]:
        raise fail("key", f"the query shard's {np.shape(query)[-2]} rows (the same positions)", f"{np.shape(key)[-2]}")


def settings(rules: Rules, attn_mask: Any, scale: Any, enable_gqa: Any, layout: Any) -> dict[str, Any]:
    """The arguments every rank must agree on, checked (the shapes of ALiBi's slopes and
    the sinks by :func:`check_shards`); the variants it cannot do refused: a mask, a mask
    function, and variants registered from outside the package."""
    if layout not in LAYOUTS:
        raise fail("layout", f"one of {', '.join(LAYOUTS)}", repr(layout))
    is_causal, enable_gqa = flag("is_causal", rules.is_causal), flag("enable_gqa", enable_gqa)
    given = rules.values()
    if attn_mask is not None:
        kind = f"dtype {np.asarray(attn_mask).dtype}" if _shape(attn_mask) is not None else "a mask"
        raise fail("attn_mask", "None (ring attention takes no mask over the whole sequence: use is_causal or window)",
                   f"an attn_mask of {kind}")  # fmt: skip
    if given["mask_mod"] is not None:
        raise fail("mask_mod", "None (ring attention takes no mask function: its ranks cannot check they share one)",
                   f"a {type(given['mask_mod']).__name__}")  # fmt: skip
    if rules.extra:
        raise fail("rules", "the variants with a keyword of ring_attention only (the ranks cannot check they "
                   "share another)", f"{', '.join(rules.extra)}")  # fmt: skip
    check_window(given["window"])  # raises what is wrong with it
    offset(given["causal_alignment"], (1, 1))
    parsed = {name: given[name] for name in ("window", "causal_alignment", "alibi_slopes", "sinks")}
    parsed["window"] = None if given["window"] is None else tuple(given["window"])
    parsed["softcap"] = check_softcap(given["softcap"])
    return {"is_causal": is_causal, "scale": scale, "enable_gqa": enable_gqa, "layout": layout, **parsed}


def shared(rules: Rules) -> dict[str, Any]:
    """What the ranks compare of the rules besides ``is_causal`` (as the repr of each): the
    window as a tuple, arrays (ALiBi's slopes, the sinks) by their dtype, shape and a digest
    of their bytes."""
    given = rules.values()
    compared = {name: given[name] for name in ("causal_alignment", "softcap")}
    window = given["window"]
    compared["window"] = tuple(window) if isinstance(window, (list, tuple)) else window
    for name in ("alibi_slopes", "sinks"):
        compared[name] = None if given[name] is None else _fingerprint(given[name])
    return compared


def _fingerprint(x: Any) -> str:
    """An array's dtype, shape and a digest of its bytes (its repr shortens big arrays)."""
    try:
        array = np.ascontiguousarray(x)
    except (ValueError, TypeError):
        return repr(x)
    if array.dtype.kind not in "biuf":  # no bytes to compare: the check says what is wrong with it
        return f"{type(x).__name__} of dtype {array.dtype}"
    return f"{array.dtype}{list(array.shape)}:{hashlib.sha256(array.tobytes()).hexdigest()[:16]}"
