"""The five architectures, each read from a checkpoint into one network description.

GPT-2, BERT, Llama, Qwen2 and Mistral differ in where the norms sit, which norm, the
activation, how positions enter and what the head is; their attention is the same, but for
the sliding window of Mistral and of Qwen2's upper layers. Each reader below
turns a config.json and the weights into a :class:`Network`, with the weight names and the
defaults of ``transformers``' configuration classes, so :mod:`._network` runs them all with
one forward.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .._validation import Array, is_integer, is_real
from ..layers import Embedding
from ..layers._multihead_self import MultiheadSelfAttention
from ._checkpoint import CheckpointError, WeightSource, config_error
from ._network import FULL, SLIDING, Block, ModelConfig, Network
from ._ops import ACTIVATIONS, Linear, Norm, Rope, rope_frequencies

__all__ = ["ARCHITECTURES", "architecture", "end_tokens", "read_network"]


class _Reader:
    """Reads config values and weights with the checks and names of one architecture."""

    def __init__(self, config: dict[str, Any], weights: WeightSource, dtype: np.dtype, probe: str, prefixes: list[str]):
        self.config, self.weights, self.dtype = config, weights, dtype
        prefix = next((p for p in prefixes if p + probe in weights), None)
        if prefix is None:
            raise CheckpointError(
                f"{weights.directory}: the weight {prefixes[0] + probe!r} is missing: "
                f"not a {config.get('model_type')} checkpoint, or an incomplete one"
            )
        self.prefix: str = prefix

    def integer(self, *keys: str, default: int | None = None, minimum: int = 1) -> int:
        value = next((self.config[k] for k in keys if self.config.get(k) is not None), default)
        if not is_integer(value) or value < minimum:
            got = "nothing" if value is None else repr(value)
            expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise config_error(f"{keys[0]}: expected {expected}, got {got}")
        return value

    def sizes(self, block: str, first: str) -> tuple[int, int, int, int, int, int]:
        """Hugging Face's names for a model's sizes (BERT's, Llama's and its kin's):
        hidden_size D, num_attention_heads H (a divisor of D, as transformers' configurations
        refuse it, head_dim given or not), num_hidden_layers (:meth:`layers`), vocab_size,
        max_position_embeddings and intermediate_size."""
        D, H = self.integer("hidden_size"), self.integer("num_attention_heads")
        layers = self.layers("num_hidden_layers", block=block, first=first)
        vocab, max_positions = self.integer("vocab_size"), self.integer("max_position_embeddings")
        inner = self.integer("intermediate_size")
        if D % H:
            raise config_error(f"num_attention_heads: expected a divisor of hidden_size {D}, got {H}")
        return D, H, layers, vocab, max_positions, inner

    def layers(self, *keys: str, block: str, first: str) -> int:
        """The layer count, once the weights hold every layer it counts: ``block`` is a layer's
        name before its index ("h.", "layers."), ``first`` the first weight a layer reads.
        A count past the layers present (a hostile 10⁹) is the missing weight of the first
        absent layer, found from the weights' names before anything per layer is made."""
        count = self.integer(*keys)
        pattern = re.compile(re.escape(self.prefix + block) + r"(0|[1-9][0-9]*)\.")
        present = {int(m.group(1)) for name in self.weights if (m := pattern.match(name))}
        if count > len(present):
            absent = next(i for i in range(len(present) + 1) if i not in present)
            raise CheckpointError(
                f"{self.weights.directory}: the weight {f'{self.prefix}{block}{absent}.{first}'!r} is missing "
                f"(config.json: {keys[0]}: {count:,} layers; the weights hold {len(present)})"
            )
        return count

    def number(self, key: str, default: float) -> float:
        value = self.config.get(key, default)
        if not is_real(value):
            raise config_error(f"{key}: expected a number, got {value!r}")
        return float(value)

    def epsilon(self, key: str, default: float) -> float:
        """A norm's epsilon: a finite number >= 0 (NaN or a negative one would make the
        norm's root NaN for some rows)."""
        value = self.number(key, default)
        if not math.isfinite(value) or value < 0:
            raise config_error(f"{key}: expected a finite number >= 0, got {value!r}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if not isinstance(value, bool):
            raise config_error(f"{key}: expected true or false, got {value!r}")
        return value

    def activation(self, key: str, default: str) -> Callable[[Array], Array]:
        name = self.config.get(key, default)
        if not isinstance(name, str) or name not in ACTIVATIONS:
            raise config_error(f"{key}: expected one of {', '.join(ACTIVATIONS)}, got {name!r}")
        return ACTIVATIONS[name]

    def get(self, name: str, *shape: int) -> Array:
        full = self.prefix + name if not name.startswith("/") else name[1:]  # "/name": outside the base model
        if full not in self.weights:  # old BERT checkpoints name a LayerNorm's weight and bias gamma and beta
            old = full.replace(".weight", ".gamma").replace(".bias", ".beta")
            full = old if "LayerNorm" in full and old in self.weights else full
        return self.weights.get_as(full, shape, self.dtype)

    def has(self, name: str) -> bool:
        return (self.prefix + name if not name.startswith("/") else name[1:]) in self.weights

    def linear(self, name: str, n_in: int, n_out: int, bias: bool = True) -> Linear:
        """An nn.Linear, stored (out, in)."""
        return Linear.of(self.get(f"{name}.weight", n_out, n_in), self.get(f"{name}.bias", n_out) if bias else None)

    def attention(
        self, prefix: str, names: tuple[str, str, str, str], shape: tuple[int, int, int, int], scale: float,
        bias: bool = True, out_bias: bool = True,
    ) -> MultiheadSelfAttention:  # fmt: skip
        """The attention layer over four nn.Linear projections (stored (out, in)), named
        ``prefix`` + query, key, value and out name; ``shape`` (D, H, Hk, E): query D -> H·E,
        key and value D -> Hk·E, out H·E -> D."""
        D, H, Hk, E = shape
        widths = ((D, H * E, bias), (D, Hk * E, bias), (D, Hk * E, bias), (H * E, D, out_bias))
        q, k, v, o = (self.linear(prefix + name, *width) for name, width in zip(names, widths, strict=True))
        return MultiheadSelfAttention.of((q, k, v, o), heads=H, kv_heads=Hk, scale=scale)

    def norm(self, name: str, width: int, eps: float, rms: bool = False) -> Norm:
        return Norm.of(
            self.get(f"{name}.weight", width), None if rms else self.get(f"{name}.bias", width), eps, rms=rms
        )

    def eos(self) -> tuple[int, ...]:
        return end_tokens(self.config.get("eos_token_id"))

    def sliding_layers(self, model_type: str, layers: int) -> tuple[int | None, tuple[str, ...]]:
        """The sliding window w (or None) and each layer's attention, "full_attention" or
        "sliding_attention", as transformers' configurations decide them. A sliding layer's
        query at position i sees the keys at positions i − w < j <= i (the window (w − 1, 0),
        causal; transformers' ``sliding_window_causal_mask_function``).

        - Mistral: every layer, when ``sliding_window`` is not None (its ``layer_types``, which
          MistralModel ignores, are ignored).
        - Qwen2: none unless ``use_sliding_window``; then the layers that ``layer_types`` names
          sliding, or, without it, the layers i >= ``max_window_layers`` (default 28).
        - Llama: none.

        Raises:
            CheckpointError: a window that is not a positive integer, a ``max_window_layers``
                that is not an integer >= 0, ``layer_types`` that are not one of the two names
                per layer, or sliding layers without ``use_sliding_window``.
        """
        config, full = self.config, (FULL,) * layers
        if model_type == "mistral":
            if config.get("sliding_window") is None:
                return None, full
            return self.integer("sliding_window"), (SLIDING,) * layers
        if model_type != "qwen2":
            return None, full
        named = None if config.get("layer_types") is None else _layer_types(config["layer_types"], layers)
        # Qwen2Config drops the window without use_sliding_window, and then names no layer sliding
        use = self.flag("use_sliding_window", False) and config.get("sliding_window") is not None
        sliding_window = self.integer("sliding_window") if use else None
        if sliding_window is None:
            if named is not None and SLIDING in named:
                raise config_error(
                    f"layer_types: {SLIDING!r} layers need use_sliding_window true and a sliding_window; "
                    f"expected only {FULL!r}, got a sliding layer"
                )
            return None, full
        if named is None:
            first = self.integer("max_window_layers", default=28, minimum=0)  # Qwen2Config's default
            named = tuple(SLIDING if i >= first else FULL for i in range(layers))
        return sliding_window, named


def end_tokens(value: Any, source: str = "config.json") -> tuple[int, ...]:
    """An ``eos_token_id`` setting (an id, a list of them, or none) as a tuple of ids.

    Raises:
        CheckpointError: anything else (a string, a float, a negative id)."""
    ids = value if isinstance(value, list) else [] if value is None else [value]
    if not all(is_integer(i) and i >= 0 for i in ids):
        raise CheckpointError(f"{source}: eos_token_id: expected a token id or a list of them, got {str(value)[:100]}")
    return tuple(int(i) for i in ids)


def _gpt2(config: dict[str, Any], weights: WeightSource, dtype: np.dtype) -> Network:
    """GPT2LMHeadModel: learned positions, LayerNorm before each sublayer, Conv1D weights
    stored (in, out), c_attn fused (D, 3D), gelu_new, the head tied to wte."""
    r = _Reader(config, weights, dtype, "wte.weight", ["transformer.", ""])
    D, H = r.integer("n_embd", "hidden_size"), r.integer("n_head", "num_attention_heads")
    layers = r.layers("n_layer", block="h.", first="attn.c_attn.weight")
    vocab, max_positions, inner = (
        r.integer("vocab_size"),
        r.integer("n_positions", "max_position_embeddings"),
        r.integer("n_inner", default=4 * D),
    )
    if D % H:
        raise config_error(f"n_head: expected a divisor of n_embd {D}, got {H}")
    eps, act = r.epsilon("layer_norm_epsilon", 1e-5), r.activation("activation_function", "gelu_new")
    blocks = []
    for i in range(layers):
        p = f"h.{i}."
        fused_w, fused_b = r.get(p + "attn.c_attn.weight", D, 3 * D), r.get(p + "attn.c_attn.bias", 3 * D)
        q, k, v = (Linear.of(fused_w[:, j * D : (j + 1) * D].T, fused_b[j * D : (j + 1) * D]) for j in range(3))
        scale = (D // H) ** -0.5 if r.flag("scale_attn_weights", True) else 1.0
        if r.flag("scale_attn_by_inverse_layer_idx", False):
            scale /= i + 1
        blocks.append(
            Block(
                MultiheadSelfAttention.of(
                    (q, k, v, Linear.of(r.get(p + "attn.c_proj.weight", D, D).T, r.get(p + "attn.c_proj.bias", D))),
                    heads=H, kv_heads=H, scale=scale,
                ),
                r.norm(p + "ln_1", D, eps),
                r.norm(p + "ln_2", D, eps),
                up=Linear.of(r.get(p + "mlp.c_fc.weight", D, inner).T, r.get(p + "mlp.c_fc.bias", inner)),
                down=Linear.of(r.get(p + "mlp.c_proj.weight", inner, D).T, r.get(p + "mlp.c_proj.bias", D)),
                activation=act,
            )
        )  # fmt: skip
    embed = r.get("wte.weight", vocab, D)
    head = embed if r.flag("tie_word_embeddings", True) else r.get("/lm_head.weight", vocab, D)
    cfg = ModelConfig(
        "gpt2", vocab, D, layers, H, H, D // H, max_positions, True, r.eos(), config, layer_types=(FULL,) * layers
    )
    return Network(
        cfg, Embedding.of(embed), tuple(blocks), pre_norm=True,
        positions=Embedding.of(r.get("wpe.weight", max_positions, D)),
        final_norm=r.norm("ln_f", D, eps), head=Linear.of(head),  # tied: the embedding's own table
    )  # fmt: skip


_BERT_ATTENTION = ("self.query", "self.key", "self.value", "output.dense")  # a layer's query, key, value, out


def _bert(config: dict[str, Any], weights: WeightSource, dtype: np.dtype) -> Network:
    """BertModel / BertForMaskedLM: word + position + token-type embeddings and a
    LayerNorm, LayerNorm after each sublayer's residual sum, exact GELU; the MLM head
    (dense, act, LayerNorm, decoder tied to the word embeddings) when the checkpoint has it."""
    r = _Reader(config, weights, dtype, "embeddings.word_embeddings.weight", ["bert.", ""])
    D, H, layers, vocab, max_positions, inner = r.sizes(block="encoder.layer.", first="attention.self.query.weight")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise config_error(f"position_embedding_type: expected 'absolute', got {config['position_embedding_type']!r}")
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise config_error("is_decoder: attnlab runs BERT as an encoder; expected false, got true")
    eps, act = r.epsilon("layer_norm_eps", 1e-12), r.activation("hidden_act", "gelu")
    blocks = []
    for i in range(layers):
        p = f"encoder.layer.{i}."
        blocks.append(
            Block(
                r.attention(p + "attention.", _BERT_ATTENTION, (D, H, H, D // H), (D // H) ** -0.5),
                r.norm(p + "attention.output.LayerNorm", D, eps),
                r.norm(p + "output.LayerNorm", D, eps),
                up=r.linear(p + "intermediate.dense", D, inner),
                down=r.linear(p + "output.dense", inner, D),
                activation=act,
            )
        )
    embed = r.get("embeddings.word_embeddings.weight", vocab, D)
    transform, head = None, None
    if r.has("/cls.predictions.transform.dense.weight"):
        transform = (
            r.linear("/cls.predictions.transform.dense", D, D),
            act,
            r.norm("/cls.predictions.transform.LayerNorm", D, eps),
        )
        tied = r.flag("tie_word_embeddings", True) or not r.has("/cls.predictions.decoder.weight")
        decoder = embed if tied else r.get("/cls.predictions.decoder.weight", vocab, D)
        bias_name = "/cls.predictions.bias" if r.has("/cls.predictions.bias") else "/cls.predictions.decoder.bias"
        head = Linear.of(decoder, r.get(bias_name, vocab))
    cfg = ModelConfig(
        "bert", vocab, D, layers, H, H, D // H, max_positions, False, (), config, layer_types=(FULL,) * layers
    )
    types = r.get("embeddings.token_type_embeddings.weight", r.integer("type_vocab_size", default=2), D)
    return Network(
        cfg, Embedding.of(embed), tuple(blocks), pre_norm=False,
        positions=Embedding.of(r.get("embeddings.position_embeddings.weight", max_positions, D)),
        token_types=Embedding.of(types), embed_norm=r.norm("embeddings.LayerNorm", D, eps), head_transform=transform,
        head=head,
    )  # fmt: skip


def _llama(config: dict[str, Any], weights: WeightSource, dtype: np.dtype) -> Network:
    """LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM: RMSNorm before each
    sublayer, RoPE on q and k, grouped-query attention, SwiGLU; Qwen2 has biases on q, k
    and v; Mistral none, and a sliding window in every layer (:meth:`_Reader.sliding_layers`)."""
    model_type = architecture(config)
    qwen2, mistral = model_type == "qwen2", model_type == "mistral"
    r = _Reader(config, weights, dtype, "embed_tokens.weight", ["model.", ""])
    D, H, layers, vocab, max_positions, inner = r.sizes(block="layers.", first="self_attn.q_proj.weight")
    Hk = r.integer("num_key_value_heads", default=H)
    E = r.integer("head_dim", default=D // H)
    if H % Hk:
        raise config_error(f"num_key_value_heads: expected a divisor of num_attention_heads {H}, got {Hk}")
    if E % 2:  # RoPE rotates pairs of coordinates
        raise config_error(f"head_dim: expected an even number (RoPE rotates pairs), got {E}")
    sliding_window, layer_types = r.sliding_layers(model_type, layers)
    eps, act = r.epsilon("rms_norm_eps", 1e-6), r.activation("hidden_act", "silu")
    if qwen2 or mistral:  # their transformers classes have no bias flags: Qwen2's q, k and v have biases
        qkv_bias, out_bias, mlp_bias = qwen2, False, False
    else:
        qkv_bias = out_bias = r.flag("attention_bias", False)
        mlp_bias = r.flag("mlp_bias", False)
    blocks = []
    for i in range(layers):
        p = f"layers.{i}."
        blocks.append(
            Block(
                r.attention(
                    p + "self_attn.",
                    ("q_proj", "k_proj", "v_proj", "o_proj"),
                    (D, H, Hk, E),
                    E**-0.5,
                    qkv_bias,
                    out_bias,
                ),
                r.norm(p + "input_layernorm", D, eps, rms=True),
                r.norm(p + "post_attention_layernorm", D, eps, rms=True),
                up=r.linear(p + "mlp.up_proj", D, inner, mlp_bias),
                down=r.linear(p + "mlp.down_proj", inner, D, mlp_bias),
                activation=act,
                gate=r.linear(p + "mlp.gate_proj", D, inner, mlp_bias),
                sliding_window=sliding_window if layer_types[i] == SLIDING else None,
            )
        )
    embed = r.get("embed_tokens.weight", vocab, D)
    head = embed if r.flag("tie_word_embeddings", False) else r.get("/lm_head.weight", vocab, D)
    cfg = ModelConfig(
        model_type, vocab, D, layers, H, Hk, E, max_positions, True, r.eos(), config, sliding_window=sliding_window,
        layer_types=layer_types,
    )  # fmt: skip
    return Network(
        cfg, Embedding.of(embed), tuple(blocks), pre_norm=True, rope=Rope(rope_frequencies(config, E)),
        final_norm=r.norm("norm", D, eps, rms=True), head=Linear.of(head),
    )  # fmt: skip


def _layer_types(value: Any, layers: int) -> tuple[str, ...]:
    """config.json's ``layer_types``, once it names each layer's attention with one of the
    two names (or "attention", transformers' old name of "full_attention")."""
    names = [FULL if name == "attention" else name for name in value] if isinstance(value, list) else []
    if len(names) != layers or not all(isinstance(name, str) and name in (FULL, SLIDING) for name in names):
        raise config_error(f"layer_types: expected a list of {layers} {FULL!r} or {SLIDING!r}, got {str(value)[:200]}")
    return tuple(str(name) for name in names)


ARCHITECTURES: dict[str, Callable[[dict[str, Any], WeightSource, np.dtype], Network]] = {
    "gpt2": _gpt2,
    "bert": _bert,
    "llama": _llama,
    "qwen2": _llama,
    "mistral": _llama,
}


def architecture(config: dict[str, Any]) -> str:
    """config.json's ``model_type``, once it is one attnlab runs in NumPy (a key of
    :data:`ARCHITECTURES`); a CheckpointError naming them otherwise."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in ARCHITECTURES:
        raise config_error(f"model_type: expected one of {', '.join(ARCHITECTURES)}, got {model_type!r}")
    return model_type


def read_network(config: dict[str, Any], weights: WeightSource, dtype: np.dtype) -> Network:
    """The network a checkpoint describes, its weights as ``dtype``."""
    return ARCHITECTURES[architecture(config)](config, weights, dtype)
