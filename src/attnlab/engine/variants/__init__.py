"""The attention variants, one module each, in one registry (letters as in ``engine._problem``).

A call's variants have three forms: :class:`Rules`, the frozen object the user gives (or
that the public functions build once, by keyword, from theirs) and every layer passes on
whole; :class:`Checked`, its checked form, which the Problem holds and the engines read;
and in a trace, each variant's record (``trace.Variants``). Each variant is a
:class:`Variant` in its own module, holding its check, its band (the j − i it allows), its
score rule and gradient, its record (and its restoring from one) and its words;
``REGISTRY`` lists them in the one order of operations:

    is_causal          d <= 0                                  (causal)
    window=(l, r)      −l <= d <= r  (None on a side: unbounded) (window)
    causal_alignment   offset 0 top-left, S − L bottom-right    (causal)
    softcap c          Z ← c·tanh(Z/c)                          (softcap)
    alibi_slopes m     Z += −m·|d|                              (alibi)
    sinks s            one more key of logit s, value 0        (sinks)
    mask_mod           FlexAttention's mask function            (mask_mod)
    length_scale s     Q's row i × s_h·log n_i, before all these (length_scale)

with d = j − (i + offset). A variant from outside the package subclasses ``Variant``
(FlexAttention's score function: ``score_mod``; a bias: ``bias``; its words:
``describe``), calls ``register`` and is given through ``Rules(extra={name: value})``;
docs/design.md, "Adding a variant", lists what a new built-in one touches.
"""

from . import alibi, alignment, causal, length_scale, mask_mod, sinks, softcap, window
from ._base import ALIGNMENTS, REGISTRY, Alignment, Band, Context, MaskMod, ScoreMod, Variant, offset, register
from ._rules import NO_RULES, Checked, Rules, check
from .mask_mod import and_masks, or_masks

# the built-ins in the one order of operations, whatever order their modules were imported in
for _variant in (
    causal.CAUSAL, window.WINDOW, alignment.ALIGNMENT, softcap.SOFTCAP, alibi.ALIBI, sinks.SINKS, mask_mod.MASK_MOD,
    length_scale.LENGTH_SCALE,
):  # fmt: skip
    REGISTRY[_variant.name] = REGISTRY.pop(_variant.name)
BUILTINS = tuple(REGISTRY)  # the package's own variants' names, which every trace records

__all__ = [
    "ALIGNMENTS",
    "BUILTINS",
    "NO_RULES",
    "REGISTRY",
    "Alignment",
    "Band",
    "Checked",
    "Context",
    "MaskMod",
    "Rules",
    "ScoreMod",
    "Variant",
    "and_masks",
    "check",
    "offset",
    "or_masks",
    "register",
]
