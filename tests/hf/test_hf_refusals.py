"""attnlab as transformers' attention backend, refusals: a model whose attention does not go
through transformers' attention interface, and a keyword attnlab cannot honour, are refused
with UnsupportedModelError naming the model type (and the module or the keyword), never run
to a silently different result; the keywords that do not change attention pass."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from hf_zoo import ARCHS, SEED, main_output  # noqa: E402

import attnlab  # noqa: E402
import attnlab.hf  # noqa: E402
from attnlab.hf import UnsupportedModelError, _backend, check_model  # noqa: E402


class Fake(torch.nn.Module):
    """A stand-in attention module of a model type named "fake_model"."""

    def __init__(self) -> None:
        super().__init__()
        self.is_causal = True
        self.config = type("Config", (), {"model_type": "fake_model"})()


def qkv(batch: int = 1, length: int = 6) -> list[Any]:
    generator = torch.Generator().manual_seed(SEED)
    return [torch.randn(batch, 2, length, 4, generator=generator) for _ in range(3)]  # (B, H, L, E)


def test_the_error_is_attnlab_s_and_a_value_error():
    assert issubclass(UnsupportedModelError, attnlab.AttnlabError)
    assert issubclass(UnsupportedModelError, ValueError)


def test_falcon_computes_its_own_attention_and_is_refused():
    config = transformers.FalconConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1, num_attention_heads=4)
    with pytest.raises(
        UnsupportedModelError,
        match=r"^falcon: FalconAttention computes attention in its own code \(at transformer\.h\.0\.self_attention\)",
    ):
        check_model(transformers.FalconForCausalLM(config))


def test_a_model_with_no_attention_through_the_interface_is_refused():
    config = transformers.MambaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=1)
    with pytest.raises(UnsupportedModelError, match=r"^mamba: no module of this model goes through"):
        check_model(transformers.MambaForCausalLM(config))


def test_a_torch_multihead_attention_inside_is_refused():
    model = ARCHS["bert"].build()
    model.add_module("pooler_attention", torch.nn.MultiheadAttention(32, 4))
    with pytest.raises(
        UnsupportedModelError,
        match=r"^bert: MultiheadAttention computes attention in its own code \(at pooler_attention\)",
    ):
        check_model(model)


@pytest.mark.parametrize("name", list(ARCHS))
def test_every_architecture_of_the_matrix_is_accepted(name: str):
    check_model(ARCHS[name].build())  # T5, BART and Whisper too, though their is_backend_compatible() is False


def test_is_backend_compatible_is_not_the_test():
    assert not ARCHS["t5"].model_class.is_backend_compatible()  # and yet T5's attention goes through the interface


def test_a_keyword_attnlab_cannot_honour_is_refused_by_name():
    q, k, v = qkv()
    with pytest.raises(UnsupportedModelError, match=r"^fake_model: .*cannot honour the keyword\(s\) indices, topk"):
        _backend.attention_forward(Fake(), q, k, v, None, indices=torch.zeros(1), topk=4)


def test_an_unknown_keyword_left_none_changes_nothing_and_passes():
    q, k, v = qkv()
    output, _ = _backend.attention_forward(Fake(), q, k, v, None, indices=None)
    assert output.shape == (1, 6, 2, 4)


def test_per_token_sinks_are_refused():
    q, k, v = qkv()
    with pytest.raises(UnsupportedModelError, match=r"^fake_model: .*s_aux of shape \(1, 2, 6, 1\)"):
        _backend.attention_forward(Fake(), q, k, v, None, s_aux=torch.zeros(1, 2, 6, 1))
    with pytest.raises(UnsupportedModelError, match=r"^fake_model: .*keyword\(s\) sinks"):  # inkling2's spelling
        _backend.attention_forward(Fake(), q, k, v, None, sinks=torch.zeros(1, 2, 6, 1))


@pytest.mark.parametrize(
    ("batch", "lengths_q", "lengths_k"),
    [(2, [0, 3, 6], [0, 3, 6]), (1, [0, 3, 6], [0, 2, 6]), (1, [0, 3, 5], [0, 3, 5]), (1, [0, 6], None)],
)
def test_packed_lengths_of_another_form_are_refused(batch: int, lengths_q: list[int], lengths_k: list[int] | None):
    q, k, v = qkv(batch)
    lengths = {
        "cu_seq_lens_q": torch.tensor(lengths_q),
        "cu_seq_lens_k": None if lengths_k is None else torch.tensor(lengths_k),
    }
    with pytest.raises(UnsupportedModelError, match=r"^fake_model: .*cu_seq_lens_q/cu_seq_lens_k"):
        _backend.attention_forward(Fake(), q, k, v, None, **lengths)


def test_flash_attention_s_deterministic_changes_nothing():
    q, k, v = qkv()
    plain, _ = _backend.attention_forward(Fake(), q, k, v, None)
    assert torch.equal(_backend.attention_forward(Fake(), q, k, v, None, deterministic=True)[0], plain)


def test_modernbert_which_passes_deterministic_to_every_backend_runs():
    config = transformers.ModernBertConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, local_attention=4, global_attn_every_n_layers=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(SEED)
    model = transformers.ModernBertModel(config).eval()
    ids = torch.randint(3, 97, (2, 8), generator=torch.Generator().manual_seed(SEED))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, -3:] = 0
    outputs = {}
    for implementation in ("eager", attnlab.hf.NAME):
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            outputs[implementation] = main_output(model(input_ids=ids, attention_mask=mask))
    keep = mask.bool()
    check_model(model)
    assert (outputs[attnlab.hf.NAME] - outputs["eager"])[keep].abs().max() <= 1e-5


REFUSED = ("falcon", "bloom", "mpt", "gpt_neo", "deberta", "mamba", "resnet")
ACCEPTED = ("llama", "mistral", "t5", "bart", "whisper", "vit", "gpt_oss")


def _verdicts(every: int) -> dict[str, str]:
    """check_model's verdict on every ``every``-th base model class of transformers' auto mapping
    (by model type, sorted) and on the named ones, each built from its default configuration on the
    meta device (no memory); a default configuration that does not build, or a missing extra (timm,
    natten), is left out. Any error but UnsupportedModelError fails."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    verdicts: dict[str, str] = {}
    chosen = sorted(MODEL_MAPPING_NAMES)[::every]
    for model_type in sorted({*chosen, *REFUSED, *ACCEPTED}):
        class_name = MODEL_MAPPING_NAMES[model_type]
        name = class_name[0] if isinstance(class_name, (list, tuple)) else class_name
        try:
            with torch.device("meta"):
                model = getattr(transformers, name)(CONFIG_MAPPING[model_type]())
        except Exception:
            continue
        try:
            check_model(model)
            verdicts[model_type] = "accepted"
        except UnsupportedModelError as error:
            assert str(error).startswith(f"{model.config.model_type}: ")
            verdicts[model_type] = "refused"
    assert all(verdicts[t] == "refused" for t in REFUSED)
    assert all(verdicts[t] == "accepted" for t in ACCEPTED)
    return verdicts


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")  # on the meta device
def test_check_model_gives_a_verdict_on_a_tenth_of_the_model_types_transformers_builds():
    """Every tenth model type (about 50) and the named ones; the whole sweep is the exhaustive test below."""
    assert len(_verdicts(10)) > 40


@pytest.mark.exhaustive
@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors:UserWarning")
def test_check_model_gives_a_verdict_on_every_model_type_transformers_builds():
    assert len(_verdicts(1)) > 400


@pytest.mark.parametrize(("value", "kind"), [(float("nan"), "NaN"), (float("-inf"), "-Inf")])
def test_a_model_with_a_non_finite_parameter_is_refused_naming_it(value, kind):
    """Every attnlab.hf entry (trace, trace_generation, analysis) goes through check_model."""
    from attnlab.analysis import head_types
    from checkpoints import tiny_model

    model = tiny_model("bert")
    inputs = {"input_ids": torch.tensor([[1, 2, 3]])}
    attnlab.hf.trace(model, inputs)  # found finite: a change in place after it is still seen
    with torch.no_grad():
        model.bert.encoder.layer[1].attention.self.key.weight[2, 3] = value  # (32, 32)
    expected = (
        "model: expected parameters that are finite numbers, got bert's "
        f"'bert.encoder.layer.1.attention.self.key.weight' with 1 {kind} of its 1,024 numbers"
    )
    with pytest.raises(attnlab.ArgumentError) as caught:
        attnlab.hf.trace(model, inputs)
    assert str(caught.value) == expected
    with pytest.raises(attnlab.ArgumentError) as caught:
        head_types(model, [1, 2, 3], repeat=0)
    assert str(caught.value) == expected
