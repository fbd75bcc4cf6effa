"""attnlab as transformers' attention backend, generation: greedy ``generate`` with the KV
cache (a decode step is one query over the cache, not causal) gives eager's tokens, one
for one, with left padding too."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_zoo import ARCHS, batch  # noqa: E402

import attnlab.hf  # noqa: E402

SLOW = {"gpt_oss"}  # its eager experts take seconds
CASES = [
    pytest.param(name, pad, marks=[pytest.mark.slow] if name in SLOW else [])
    for name, arch in ARCHS.items()
    if arch.kind in ("causal", "seq2seq", "speech")
    for pad in (("left",) if arch.kind == "causal" else ("left", None) if arch.kind == "seq2seq" else (None,))
]


@pytest.mark.parametrize(("name", "padding"), CASES)
def test_greedy_generation_gives_eager_tokens(name: str, padding: str | None):
    arch = ARCHS[name]
    model, data = arch.build(), batch(arch, padding)
    inputs = {k: v for k, v in data.inputs.items() if k != "decoder_input_ids"}  # generate starts the decoder
    tokens = {}
    for implementation in ("eager", attnlab.hf.NAME):
        model.set_attn_implementation(implementation)
        tokens[implementation] = model.generate(
            **inputs, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0, use_cache=True
        )
    assert tokens["eager"].shape[-1] >= 6
    assert torch.equal(tokens[attnlab.hf.NAME], tokens["eager"])
