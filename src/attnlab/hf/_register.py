"""attnlab under the name "attnlab" in transformers' two registries: the attention
function and, beside it, the mask function (without one transformers would hand the
function ``attention_mask=None`` and the padding would be lost); and the check that a
model's attention goes through them."""

from __future__ import annotations

import contextlib
import contextvars
import dis
import inspect
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from .._validation import fail
from ..models._checkpoint import non_finite
from ._backend import UnsupportedModelError, attention_forward
from ._torch import model_type, to_numpy, torch, transformers

__all__ = ["NAME", "check_model", "on_attnlab", "output_hook", "register"]

NAME = "attnlab"

# analysis.ablate's hook on each attention call's output (module, output (B, L, H, Ev)) ->
# the output that goes on, set only in the context (thread) whose forwards it ablates: the
# registered function stays the same for the whole process, and another thread's calls
# never see the hook.
output_hook: contextvars.ContextVar[Callable[[Any, Any], Any] | None] = contextvars.ContextVar(
    "attnlab_hf_output_hook", default=None
)


def attnlab_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    """The function registered as "attnlab": :func:`attention_forward`, its output handed
    to this context's :data:`output_hook` where one is set."""
    output, weights = attention_forward(module, query, key, value, attention_mask, **kwargs)  # (B, L, H, Ev)
    hook = output_hook.get()
    return (output if hook is None else hook(module, output)), weights


# The names an attention module's code reads when it looks its attention function up in
# transformers' registry (the one path attn_implementation="attnlab" reaches) ...
_ROUTES = frozenset({"ALL_ATTENTION_FUNCTIONS", "AttentionInterface"})
# ... and those it reads when it computes the attention itself: a kernel, or a softmax (any
# name with it in: nn.Softmax, DeBERTa's XSoftmax) beside a product (the operator @ reads as "@").
_KERNELS = ("scaled_dot_product_attention", "flash_attn", "flex_attention", "attention_forward")
_PRODUCTS = ("matmul", "bmm", "einsum", "@")


def register() -> None:
    """Register attnlab's attention function and sdpa's mask function (bool, True =
    attend, or None where ``is_causal`` says it) as ``attn_implementation="attnlab"``.
    Importing ``attnlab.hf`` calls it; calling it again changes nothing.

    Raises:
        MissingDependencyError: torch or transformers is not installed (``attnlab[hf]``).
    """
    from transformers.masking_utils import sdpa_mask

    transformers.AttentionInterface.register(NAME, attnlab_attention)
    transformers.AttentionMaskInterface.register(NAME, sdpa_mask)


@contextlib.contextmanager
def on_attnlab(model: Any) -> Iterator[None]:
    """The model on attnlab's backend, in eval mode and without gradients; its attention
    implementation and mode restored after (hf.trace's recording, analysis.ablate's runs)."""
    implementation, training = model.config._attn_implementation, model.training
    try:
        if implementation != NAME:
            model.set_attn_implementation(NAME)
        model.eval()
        with torch.no_grad():
            yield
    finally:
        if implementation != NAME:
            model.set_attn_implementation(implementation)
        model.train(training)


def check_model(model: Any) -> None:
    """Refuse a model with an attention module that computes its attention in its own
    code rather than through transformers' attention interface (Falcon's, Gemma 4's audio
    tower, a ``torch.nn.MultiheadAttention``), or with no module that goes through it
    (a convolutional or state-space model): ``attn_implementation="attnlab"`` would
    silently not run there. Refuse a model with a parameter that is not finite (NaN,
    ±Inf): every output would be NaN, without a word.

    A module goes through the interface when its class's code (its bases' in the model's
    own module included) reads ``ALL_ATTENTION_FUNCTIONS``; one computes its own when its
    class is named for attention and its code calls sdpa, flash or flex attention, or a
    softmax beside a matrix product, instead. Attention that is no softmax of scores
    (linear and delta-rule layers, deformable attention) is nothing attnlab could run: a
    hybrid model's softmax layers run on attnlab, those as they would on any backend.
    ``is_backend_compatible()`` is not the test: it is False for T5, BART and Whisper,
    whose attention does go through the interface.

    Args:
        model: a transformers ``PreTrainedModel`` (or any ``torch.nn.Module`` with a ``config``).

    Raises:
        ArgumentTypeError: ``model`` is not a torch module.
        ArgumentError: a parameter holding a NaN or an infinity, named (the first, in the
            model's order), with how many numbers.
        UnsupportedModelError: naming the model type and, where there are, the classes that
            compute their own attention (and the first module of each).
    """
    if not isinstance(model, torch.nn.Module):
        raise fail("model", "a transformers model (a torch.nn.Module)", type(model).__name__, TypeError)
    label = model_type(model)
    own: dict[str, str] = {}  # class name: the first module path of that class
    routed = False
    for path, module in model.named_modules():
        kind = _kind(type(module))
        if kind == "own":
            own.setdefault(type(module).__name__, path or "(the model)")
        routed = routed or kind == "routed"
    if own:
        names = sorted(own)
        raise UnsupportedModelError(
            f"{label}: {', '.join(names)} {'computes' if len(names) == 1 else 'compute'} attention in its own "
            f"code (at {', '.join(own[name] for name in names)}), not through transformers' attention interface, "
            "so attnlab cannot run it (attn_implementation='attnlab' would be ignored there); "
            "use attn_implementation='eager' or 'sdpa'"
        )
    if not routed:
        raise UnsupportedModelError(
            f"{label}: no module of this model goes through transformers' attention interface, so "
            "attn_implementation='attnlab' would change nothing"
        )
    _check_finite(model, label)


# The models whose parameters were all found finite, with each parameter's memory and version
# counter then (torch counts a tensor's in-place changes): a model is read again only once a
# parameter has been replaced or changed in place, not on each call (reading MiniLM's 22.7 M
# numbers takes about as long as tracing a sentence).
_FINITE: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], ...]] = weakref.WeakKeyDictionary()


def _check_finite(model: Any, label: str) -> None:
    """Refuse a parameter that holds a NaN or an infinity, naming it (see :func:`check_model`)."""
    parameters = list(model.named_parameters())
    state = tuple((parameter.data_ptr(), parameter._version) for _, parameter in parameters)
    if _FINITE.get(model) == state:
        return
    for name, parameter in parameters:
        found = None if parameter.is_meta else non_finite(to_numpy(parameter))  # meta: no numbers (not loaded)
        if found is not None:
            raise fail("model", "parameters that are finite numbers", f"{label}'s {name!r} with {found}")
    _FINITE[model] = state


_KINDS: dict[type, str | None] = {}  # each class's kind, read once


def _kind(cls: type) -> str | None:
    """The kind of a module's class (see _read_kind), read once."""
    if cls not in _KINDS:
        _KINDS[cls] = _read_kind(cls)
    return _KINDS[cls]


def _read_kind(cls: type) -> str | None:
    """How a module's class attends: "routed" (its code looks its attention function up
    in transformers' registry), "own" (named for attention, its code calls a kernel, or a
    softmax and a matrix product, itself) or None (no attention of its own). The code is
    the class's own and its bases' up to transformers' and torch's own classes
    (``PreTrainedModel`` names the registry for every model)."""
    if issubclass(cls, torch.nn.MultiheadAttention):
        return "own"
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(("torch", "builtins")) or (
            klass.__module__.startswith("transformers.") and not klass.__module__.startswith("transformers.models.")
        ):
            continue
        for member in vars(klass).values():
            code = getattr(inspect.unwrap(member), "__code__", None) if callable(member) else None
            if code is not None:
                names |= _names(code)
    if names & _ROUTES:
        return "routed"
    named_for_attention = any(word in cls.__name__.lower() for word in ("attention", "attn"))
    lowered = [name.lower() for name in names]
    kernel = any(word in name for name in lowered for word in _KERNELS)
    softmax = any("softmax" in name for name in lowered) and any(name in _PRODUCTS for name in lowered)
    return "own" if named_for_attention and (kernel or softmax) else None


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names a function's code reads, and "@" where it multiplies
    matrices, its nested functions' too."""
    names = set(code.co_names)
    if any(_is_matmul(op) for op in dis.get_instructions(code)):
        names.add("@")
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _is_matmul(op: dis.Instruction) -> bool:
    """An ``a @ b`` (or ``@=``): BINARY_OP "@" from Python 3.11, its own opcodes before."""
    if op.opname == "BINARY_OP":
        return op.argrepr in ("@", "@=")
    return op.opname in ("BINARY_MATRIX_MULTIPLY", "INPLACE_MATRIX_MULTIPLY")
