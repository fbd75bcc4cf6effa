"""The public names, written out: what users import from where they always have. A name
that moves, disappears or appears without this list changing is a failure."""

from __future__ import annotations

import importlib
import warnings

import pytest

PUBLIC = {
    "attnlab": [
        "ArgumentError", "ArgumentTypeError", "Attention", "AttnlabError", "Gradients", "MissingDependencyError",
        "MissingFontWarning", "MultiheadAttention", "Rules", "SelfAttention", "Trace", "__version__", "attention",
        "distributed", "functional", "interop", "load_model", "models", "nn", "plot", "reference",
        "scaled_dot_product_attention", "scaled_dot_product_attention_backward", "serve", "show", "softmax", "view",
        "view_ablation",
    ],
    "attnlab.functional": [
        "Attention", "Gradients", "attention", "scaled_dot_product_attention", "scaled_dot_product_attention_backward",
        "softmax",
    ],
    "attnlab.reference": ["AttentionSteps", "SelfAttention", "matmul", "softmax", "transpose"],
    "attnlab.interop": ["from_torch", "to_torch"],
    "attnlab.models": [
        "CheckpointError", "GenerationTrace", "Model", "ModelConfig", "ModelOutput", "ModelStatistics", "ModelTrace",
        "SUPPORTED", "Tokenizer", "load",
    ],
    "attnlab.nn": [
        "AdamW", "Embedding", "LayerNorm", "Linear", "Module", "MultiheadSelfAttention", "Parameter", "RNN",
        "TransformerBlock", "clip_grad_norm", "cross_entropy", "gelu", "train",
    ],
    "attnlab.distributed": ["LAYOUTS", "RingError", "ring_attention", "ring_attention_backward", "shard", "unshard"],
    "attnlab.hf": [
        "NAME", "UnsupportedModelError", "attention_forward", "check_model", "register", "trace", "trace_generation",
    ],
    "attnlab.live": [
        "DEFAULT_TEXT", "MAX_BODY", "MAX_GENERATE", "MAX_TEXT", "LiveServer", "Request", "Session", "serve",
    ],
    "attnlab.runner": ["BACKENDS", "HEADS", "Checkpoint", "Runner", "load_model", "open_checkpoint"],
    "attnlab.analysis": [
        "FLOW_SCALE", "MODES", "Ablation", "Eviction", "HeadTypes", "ablate", "evict", "flow", "head_types",
        "residual_attention", "rollout",
    ],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_public_module_exports_exactly_its_names(module):
    imported = importlib.import_module(module)
    assert sorted(imported.__all__) == sorted(PUBLIC[module])
    for name in imported.__all__:
        assert getattr(imported, name) is not None, f"{module}.{name}"


def test_the_same_objects_under_both_names():
    import attnlab as al

    assert al.attention is al.functional.attention
    assert al.models.ModelTrace is importlib.import_module("attnlab.trace").ModelTrace
    assert al.MultiheadAttention is importlib.import_module("attnlab.layers").MultiheadAttention
    assert al.serve is importlib.import_module("attnlab.live").serve  # imported when first used
    assert al.load_model is importlib.import_module("attnlab.runner").load_model


def test_import_attnlab_leaves_the_transformers_backend_unregistered():
    """attnlab.hf registers itself with transformers when imported, and only then."""
    import subprocess
    import sys

    code = "import sys, attnlab; print('attnlab.hf' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_a_renamed_name_is_a_deprecated_alias_of_the_new_one():
    from attnlab import nn

    with pytest.warns(DeprecationWarning, match="MultiheadSelfAttention"):
        old = nn.SelfAttention
    assert old is nn.MultiheadSelfAttention
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nn.MultiheadSelfAttention is not None  # the new name does not warn


EXCEPTIONS = {
    "attnlab": ["ArgumentError", "ArgumentTypeError", "AttnlabError", "MissingDependencyError", "MissingFontWarning"],
    "attnlab.models": ["CheckpointError"],
    "attnlab.hf": ["UnsupportedModelError"],
    "attnlab.distributed": ["RingError"],
}


def test_every_exception_and_warning_is_defined_once_in_the_exceptions_module():
    """Each public error or warning is the very class attnlab._exceptions defines, shown
    under the module users import it from; every class _exceptions defines is exported
    somewhere (InputError, the CLI's own, apart), and every error is an AttnlabError."""
    exceptions = importlib.import_module("attnlab._exceptions")
    defined = {name for name in exceptions.__all__ if isinstance(getattr(exceptions, name), type)}
    exported = set()
    for module, names in EXCEPTIONS.items():
        for name in names:
            public = getattr(importlib.import_module(module), name)
            assert public is getattr(exceptions, name), f"{module}.{name}"
            assert public.__module__ == module, f"{module}.{name}"
            exported.add(name)
    assert defined == exported | {"InputError"}
    assert importlib.import_module("attnlab.cli._inputs").InputError is exceptions.InputError
    errors = [getattr(exceptions, name) for name in defined if not issubclass(getattr(exceptions, name), Warning)]
    assert all(issubclass(error, exceptions.AttnlabError) for error in errors)
