"""Tiny random transformers models, one per architecture, built here (no download): a few
layers, hidden <= 64, the weights drawn from a seeded torch generator, and the inputs each
takes, padded on either side where the architecture takes an attention mask."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers as tf

VOCAB = 97
SEED = 20261201


@dataclass(frozen=True)
class Arch:
    """One architecture: how to build its model, and what its inputs are.

    ``kind``: "causal" (input_ids, attention_mask; generates), "encoder" (input_ids,
    attention_mask), "seq2seq" (input_ids, attention_mask, decoder_input_ids: L != S),
    "speech" (whisper: input_features, decoder_input_ids), "vision" (pixel_values).
    """

    name: str
    kind: str
    config: Callable[[], Any]
    model_class: Any
    llama_like: bool = False  # decoder-only with RoPE position_ids: packed sequences apply

    def build(self, dtype: torch.dtype = torch.float32, attn: str = "eager") -> Any:
        """The model, its every parameter drawn from a generator seeded by the name (sinks too)."""
        config = self.config()
        config._attn_implementation = attn  # set before the model is built, as from_pretrained does
        torch.manual_seed(SEED)  # the initialisers draw from the default generator
        model = self.model_class(config)
        generator = torch.Generator().manual_seed(SEED + sum(map(ord, self.name)))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.dim() == 1 and ("norm" in name or "ln" in name) and name.endswith("weight"):
                    param.copy_(1 + 0.1 * torch.randn(param.shape, generator=generator))
                else:  # every other parameter, the sinks and T5's relative bias included
                    param.copy_(0.2 * torch.randn(param.shape, generator=generator))
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation("eager")
        return model.to(dtype).eval()


def _llama_like(cls: Any, **extra: Any) -> Callable[[], Any]:
    def config() -> Any:
        base = dict(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, attention_dropout=0.0,
        )  # fmt: skip
        return cls(**{**base, **extra})

    return config


ARCHS: dict[str, Arch] = {
    a.name: a
    for a in [
        Arch(
            "gpt2", "causal",
            lambda: tf.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                  attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0),
            tf.GPT2LMHeadModel,
        ),
        Arch(
            "bert", "encoder",
            lambda: tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=48, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
            tf.BertModel,
        ),
        Arch("llama", "causal", _llama_like(tf.LlamaConfig), tf.LlamaForCausalLM, llama_like=True),
        Arch("qwen2", "causal", _llama_like(tf.Qwen2Config), tf.Qwen2ForCausalLM, llama_like=True),
        Arch("mistral", "causal", _llama_like(tf.MistralConfig, sliding_window=3), tf.MistralForCausalLM,
             llama_like=True),
        Arch(
            "gemma2", "causal",
            _llama_like(tf.Gemma2Config, head_dim=8, sliding_window=3, attn_logit_softcapping=2.0,
                        final_logit_softcapping=30.0, query_pre_attn_scalar=8),
            tf.Gemma2ForCausalLM, llama_like=True,
        ),
        Arch(
            "gemma3", "causal",
            _llama_like(tf.Gemma3TextConfig, head_dim=8, sliding_window=3, query_pre_attn_scalar=8,
                        layer_types=["sliding_attention", "full_attention"]),
            tf.Gemma3ForCausalLM, llama_like=True,
        ),
        Arch("phi3", "causal", _llama_like(tf.Phi3Config, sliding_window=4, pad_token_id=0), tf.Phi3ForCausalLM,
             llama_like=True),
        Arch(
            "gpt_oss", "causal",
            _llama_like(tf.GptOssConfig, head_dim=8, sliding_window=3, num_local_experts=4, num_experts_per_tok=2,
                        layer_types=["sliding_attention", "full_attention"]),
            tf.GptOssForCausalLM, llama_like=True,
        ),
        Arch(
            "deepseek_v3", "causal",
            _llama_like(tf.DeepseekV3Config, q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=8,
                        qk_rope_head_dim=4, v_head_dim=6, n_routed_experts=4, num_experts_per_tok=2,
                        n_shared_experts=1, moe_intermediate_size=16, first_k_dense_replace=1, n_group=1,
                        topk_group=1, num_key_value_heads=4),
            tf.DeepseekV3ForCausalLM, llama_like=True,
        ),
        Arch(
            "t5", "seq2seq",
            lambda: tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4,
                                relative_attention_num_buckets=8, relative_attention_max_distance=16,
                                dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0),
            tf.T5ForConditionalGeneration,
        ),
        Arch(
            "bart", "seq2seq",
            lambda: tf.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                                  decoder_ffn_dim=48, max_position_embeddings=64, dropout=0.0,
                                  attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1,
                                  decoder_start_token_id=2, bos_token_id=0, eos_token_id=2, forced_eos_token_id=None),
            tf.BartForConditionalGeneration,
        ),
        Arch(
            "whisper", "speech",
            lambda: tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=2,
                                     decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                     encoder_ffn_dim=48, decoder_ffn_dim=48, max_source_positions=10,
                                     max_target_positions=32, dropout=0.0, attention_dropout=0.0,
                                     pad_token_id=0, decoder_start_token_id=1, bos_token_id=1, eos_token_id=2,
                                     suppress_tokens=None, begin_suppress_tokens=None),
            tf.WhisperForConditionalGeneration,
        ),
        Arch(
            "vit", "vision",
            lambda: tf.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=48, hidden_dropout_prob=0.0,
                                 attention_probs_dropout_prob=0.0),
            tf.ViTModel,
        ),
    ]
}  # fmt: skip


@dataclass(frozen=True)
class Batch:
    """A model's keyword inputs and ``keep``: (B, L) True at the positions that are not
    padding, of the sequence the outputs are compared on (the encoder's for "encoder" and
    "vision", the decoder's otherwise, whose every position is kept: only the encoder is
    padded)."""

    inputs: dict[str, Any]
    keep: torch.Tensor
    encoder_keep: torch.Tensor | None = None  # (B, S) the encoder's non-pad positions (seq2seq)


def batch(arch: Arch, padding: str | None, *, length: int = 8, decoder_length: int = 5) -> Batch:
    """Two sequences of random tokens (seeded), the second shorter by 3 and padded on the
    ``padding`` side ("left", "right" or None: no mask). Vision and speech models take no
    mask: a random image or spectrogram."""
    generator = torch.Generator().manual_seed(SEED)
    if arch.kind == "vision":
        pixels = torch.randn(2, 3, 16, 16, generator=generator)
        return Batch({"pixel_values": pixels}, torch.ones(2, 17, dtype=torch.bool))
    ids = torch.randint(3, VOCAB, (2, length), generator=generator)
    decoder_ids = torch.randint(3, VOCAB, (2, decoder_length), generator=generator)
    if arch.kind == "speech":
        features = torch.randn(2, 8, 20, generator=generator)  # (B, mel bins, 2 · max_source_positions)
        keep = torch.ones(2, decoder_length, dtype=torch.bool)
        return Batch({"input_features": features, "decoder_input_ids": decoder_ids}, keep)
    mask = torch.ones(2, length, dtype=torch.long)
    if padding == "left":
        mask[1, :3] = 0
    elif padding == "right":
        mask[1, -3:] = 0
    inputs: dict[str, Any] = {"input_ids": ids.masked_fill(mask == 0, 0)}
    if padding is not None:
        inputs["attention_mask"] = mask
    if arch.kind == "seq2seq":
        inputs["decoder_input_ids"] = decoder_ids
        return Batch(inputs, torch.ones(2, decoder_length, dtype=torch.bool), mask.bool())
    return Batch(inputs, mask.bool())


def cast(inputs: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
    """The inputs with their float tensors (pixels, spectrograms) in ``dtype``."""
    return {k: v.to(dtype) if torch.is_floating_point(v) else v for k, v in inputs.items()}


ORACLE = "attnlab_test_oracle"


def oracle_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention written out by hand in torch, in the inputs' dtype (float64 here):
    Z = softcap(scaling·Q·Kᵀ) + position_bias, masked (a bool mask's False and the causal
    rule, top left, where there is no mask and L > 1, as sdpa; a float mask added), the
    sinks as one extra column of the softmax, then dropped; O = softmax(Z)·V, (B, L, H, Ev)."""
    assert dropout == 0.0 or not module.training, "the oracle runs in eval() mode"
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)  # (B, H, S, E)
    value = value.repeat_interleave(groups, dim=1)  # (B, H, S, Ev)
    L, S = query.shape[-2], key.shape[-2]
    scores = (query @ key.transpose(-1, -2)) * (query.shape[-1] ** -0.5 if scaling is None else scaling)
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    if position_bias is not None:
        scores = scores + position_bias[..., :S]
    allowed = torch.ones(L, S, dtype=torch.bool)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if attention_mask is None and causal and L > 1:
        allowed = torch.ones(L, S, dtype=torch.bool).tril()
    elif attention_mask is not None and attention_mask.dtype == torch.bool:
        allowed = attention_mask[..., :S]
    elif attention_mask is not None:
        scores = scores + attention_mask[..., :S]
    scores = scores.masked_fill(~allowed, -torch.inf)
    if s_aux is not None:  # (H,): one more column, dropped after the softmax
        sink = s_aux.reshape(1, -1, 1, 1).to(scores.dtype).expand(scores.shape[0], -1, L, 1)
        weights = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # a row with every key masked: 0
    return (weights @ value).transpose(1, 2).contiguous(), weights


def register_oracle() -> None:
    """The oracle under its own name, with sdpa's mask function (as attnlab's)."""
    from transformers.masking_utils import sdpa_mask

    tf.AttentionInterface.register(ORACLE, oracle_attention)
    tf.AttentionMaskInterface.register(ORACLE, sdpa_mask)


def main_output(output: Any) -> torch.Tensor:
    """The logits of a model with a head, else the last hidden state."""
    return output.logits if getattr(output, "logits", None) is not None else output.last_hidden_state


def attention_rows(arch: Arch, data: Batch, field: str) -> torch.Tensor | None:
    """(B, L) the query rows of ``field``'s weights to compare: the non-pad queries of the
    padded sequence (the encoder's for an encoder-decoder's encoder), every row otherwise."""
    if field == "encoder_attentions":
        return data.encoder_keep  # None for Whisper's encoder: no padding
    return data.keep if field == "attentions" else None


def gradient_difference(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> float:
    """max over the parameters of max |g − g_ref| / max |g_ref|. A gradient that is zero in
    exact arithmetic (a key projection's bias: the softmax does not change when every score of
    a row moves together) is rounding noise on both sides, so its difference is measured on
    the scale of the model's largest gradient instead. NaN if either side has a NaN."""
    assert reference.keys() == other.keys()
    largest = max(g.abs().max().item() for g in reference.values())
    worst = 0.0
    for name, g in reference.items():
        scale = g.abs().max().item()
        scale = largest if scale < 1e-10 * largest else scale
        difference = (other[name] - g).abs().max().item() / scale
        worst = difference if math.isnan(difference) else max(worst, difference)  # max() would drop a NaN
        if math.isnan(worst):
            return worst
    return worst
