"""attnlab as transformers' attention backend, forward: equal to eager attention on tiny
random models of every architecture of the issue (padding on either side, the weights that
``output_attentions`` returns, cross-attention with L != S, packed sequences), and float16
and bfloat16 computed in float32 and cast back."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_zoo import ARCHS, attention_rows, batch, cast, main_output, oracle_attention  # noqa: E402

import attnlab.hf  # noqa: E402
from attnlab.hf import _backend  # noqa: E402

PADDED = [
    (name, pad) for name, arch in ARCHS.items() for pad in ("left", "right") if arch.kind not in ("vision", "speech")
]
UNPADDED = [(name, None) for name, arch in ARCHS.items() if arch.kind in ("vision", "speech")]
WEIGHT_FIELDS = ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions")


def run(model: Any, inputs: dict[str, Any], implementation: str, **extra: Any) -> Any:
    model.set_attn_implementation(implementation)
    with torch.no_grad():
        return model(**inputs, **extra)


@pytest.mark.parametrize(("name", "padding"), PADDED + UNPADDED)
def test_forward_equals_eager_on_the_non_pad_positions(name: str, padding: str | None):
    arch = ARCHS[name]
    model, data = arch.build(), batch(arch, padding)
    eager = main_output(run(model, data.inputs, "eager"))
    ours = main_output(run(model, data.inputs, attnlab.hf.NAME))
    assert ours.dtype == torch.float32
    assert (ours - eager)[data.keep].abs().max() <= 1e-5


@pytest.mark.parametrize(("name", "padding"), PADDED + UNPADDED)
def test_output_attentions_equal_eager_on_the_non_pad_rows(name: str, padding: str | None):
    arch = ARCHS[name]
    model, data = arch.build(), batch(arch, padding)
    base = model.base_model  # GPT2LMHeadModel drops output_attentions; its base model returns them
    eager = run(base, data.inputs, "eager", output_attentions=True)
    ours = run(base, data.inputs, attnlab.hf.NAME, output_attentions=True)
    compared = 0
    for field in WEIGHT_FIELDS:
        if getattr(eager, field, None) is None:
            continue
        rows = attention_rows(arch, data, field)
        for expected, got in zip(getattr(eager, field), getattr(ours, field), strict=True):
            keep = torch.ones(expected.shape[0], expected.shape[2], dtype=torch.bool) if rows is None else rows
            assert got.shape == expected.shape
            difference = (got - expected).transpose(1, 2)[keep]  # (kept rows, H, S)
            assert difference.abs().max() <= 1e-5
            compared += 1
    assert compared >= 2  # every layer's weights, of every kind of attention the model has


@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_cross_attention_runs_with_more_keys_than_queries(name: str):
    arch = ARCHS[name]
    model, data = arch.build(), batch(arch, "left" if arch.kind == "seq2seq" else None)
    shapes: list[tuple[int, int]] = []

    def spy(module: Any, query: Any, key: Any, *args: Any, **kwargs: Any) -> Any:
        shapes.append((query.shape[-2], key.shape[-2]))
        return _backend.attention_forward(module, query, key, *args, **kwargs)

    transformers.AttentionInterface.register(attnlab.hf.NAME, spy)
    try:
        eager = main_output(run(model, data.inputs, "eager"))
        ours = main_output(run(model, data.inputs, attnlab.hf.NAME))
    finally:
        attnlab.hf.register()
    assert (5, 8) in shapes or (5, 10) in shapes  # decoder queries (5) over the encoder's 8 tokens or 10 frames
    assert (ours - eager).abs().max() <= 1e-5


LLAMA_LIKE = [name for name, arch in ARCHS.items() if arch.llama_like]
PACKED_POSITIONS = [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]  # three sequences of 4, 3 and 3 tokens in one row
PIECES = ((0, 4), (4, 7), (7, 10))


@pytest.mark.parametrize("name", LLAMA_LIKE)
def test_packed_sequences_are_detected_by_the_mask_function_as_for_sdpa(name: str):
    arch = ARCHS[name]
    model = arch.build()
    ids = torch.randint(3, 97, (1, 10), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor([PACKED_POSITIONS])
    inputs = {"input_ids": ids, "position_ids": positions, "use_cache": False}  # a cache turns the detection off
    ours = main_output(run(model, inputs, attnlab.hf.NAME))
    assert (ours - main_output(run(model, inputs, "eager"))).abs().max() <= 1e-5
    if name == "gpt_oss":  # GptOssModel builds its masks without position_ids: no backend sees the packing
        return
    alone = torch.cat([main_output(run(model, {"input_ids": ids[:, a:b]}, "eager")) for a, b in PIECES], dim=1)
    assert (ours - alone).abs().max() <= 1e-5


def test_flash_attention_packed_lengths_are_honoured():
    """cu_seq_lens_q/_k beside a 2D mask of ones (so the mask function does not look for
    packing, and makes a plain causal mask): each sequence still attends to itself only,
    as flash-attention's varlen kernels do, where eager ignores the lengths."""
    model = ARCHS["llama"].build()
    ids = torch.randint(3, 97, (1, 10), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([0, 4, 7, 10], dtype=torch.int32)
    inputs = {"input_ids": ids, "attention_mask": torch.ones(1, 10, dtype=torch.long), "use_cache": False}
    inputs |= {"position_ids": torch.tensor([PACKED_POSITIONS]), "cu_seq_lens_q": lengths, "cu_seq_lens_k": lengths}
    ours = main_output(run(model, inputs, attnlab.hf.NAME))
    alone = torch.cat([main_output(run(model, {"input_ids": ids[:, a:b]}, "eager")) for a, b in PIECES], dim=1)
    assert (ours - alone).abs().max() <= 1e-5
    assert (main_output(run(model, inputs, "eager")) - alone).abs().max() > 1e-2  # the lengths did matter


class Module(torch.nn.Module):
    """A stand-in attention module: what attention_forward reads of the caller."""

    def __init__(self, is_causal: bool = True) -> None:
        super().__init__()
        self.is_causal = is_causal
        self.config = type("Config", (), {"model_type": "stand_in"})()


@pytest.mark.parametrize(("dtype", "unit_roundoff"), [(torch.float16, 2.0**-11), (torch.bfloat16, 2.0**-8)])
def test_half_precision_is_computed_in_float32_and_cast_back(dtype: torch.dtype, unit_roundoff: float):
    """The output is the float64 oracle's on the same (half) inputs, rounded once to the half
    dtype: within one rounding of it (u·|O|, u the dtype's unit roundoff), plus float32's
    error (far below). The weights come back in the half dtype too."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 6, 8, generator=generator).to(dtype) for _ in range(3))
    sinks = torch.randn(4, generator=generator).to(dtype)
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool).tril()
    options: dict[str, Any] = dict(scaling=0.3, softcap=2.0, s_aux=sinks)
    output, weights = _backend.attention_forward(Module(), q, k, v, mask, output_attentions=True, **options)
    wide = [x.double() for x in (q, k, v)]
    expected, expected_weights = oracle_attention(Module(), *wide, mask, **options | {"s_aux": sinks.double()})
    assert output.dtype == weights.dtype == dtype
    assert ((output.double() - expected).abs() <= unit_roundoff * expected.abs() + 1e-7).all()
    assert ((weights.double() - expected_weights).abs() <= unit_roundoff * expected_weights + 1e-7).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["llama", "gemma2", "t5"])
def test_a_half_precision_model_is_as_close_to_float32_as_eager_is(name: str, dtype: torch.dtype):
    """Every other layer rounds in the half dtype in both runs, so the model's outputs are
    off float32's by that rounding, for eager and attnlab alike; attnlab's attention, in
    float32, adds nothing to it: its distance to float32 eager is at most eager-in-half's
    own, with a factor 2 for the two runs' roundings falling differently."""
    arch = ARCHS[name]
    data = batch(arch, "left")
    model = arch.build(dtype)
    same_weights = arch.build(dtype).float()  # the half weights, exactly, in float32
    reference = main_output(run(same_weights, data.inputs, "eager"))[data.keep]
    eager = main_output(run(model, cast(data.inputs, dtype), "eager"))[data.keep].float()
    ours_out = main_output(run(model, cast(data.inputs, dtype), attnlab.hf.NAME))
    assert ours_out.dtype == dtype
    ours = ours_out[data.keep].float()
    assert (ours - reference).abs().max() <= 2 * (eager - reference).abs().max()


def _no_window(model: Any) -> None:
    model.config.sliding_window = None


def _no_softcap(model: Any) -> None:
    for layer in model.model.layers:
        layer.self_attn.attn_logit_softcapping = None


def _no_sinks(model: Any) -> None:
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-torch.inf)  # e^{-∞} = 0: the sink's column takes nothing


@pytest.mark.parametrize(
    ("name", "without"), [("mistral", _no_window), ("gemma2", _no_softcap), ("gpt_oss", _no_sinks)]
)
def test_the_variant_each_model_is_here_for_does_change_its_output(name: str, without: Any):
    """The window, the softcap and the sinks the matrix checks are not idle: without them,
    eager's output moves by more than the tolerance by far."""
    arch = ARCHS[name]
    model, data = arch.build(), batch(arch, "left")
    ours = main_output(run(model, data.inputs, attnlab.hf.NAME))
    without(model)
    assert (ours - main_output(run(model, data.inputs, "eager")))[data.keep].abs().max() > 1e-2
