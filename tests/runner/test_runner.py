"""The one runner: a refusal is the same error whichever backend or analysis meets it."""

from __future__ import annotations

import pytest

from attnlab import analysis
from attnlab.hf import UnsupportedModelError


def _bart() -> object:
    T = pytest.importorskip("transformers")
    config = T.BartConfig(
        vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
    )  # fmt: skip
    return T.BartForConditionalGeneration(config).eval()


def test_an_encoder_decoder_is_refused_alike_by_ablate_head_types() -> None:
    model = _bart()
    message = r"^bart: attnlab runs decoder-only and encoder-only models here; this one is an encoder-decoder$"
    with pytest.raises(UnsupportedModelError, match=message):
        analysis.ablate(model, [1, 2, 3], heads="all")
    with pytest.raises(UnsupportedModelError, match=message):
        analysis.head_types(model, [1, 2, 3])
