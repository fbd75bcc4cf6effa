"""Hand-built model traces, as attnlab.hf.trace records them, for the trace and page tests:
an encoder-decoder model's (encoder, decoder and cross attention over two sequences) and
a vision transformer's (an image cut into patches, [CLS] and a register token apart).
Each entry is :func:`attnlab.trace.build_trace` over random Q, K and V from a seeded
Generator; no model is needed."""

from __future__ import annotations

import numpy as np

from attnlab.trace import ModelTrace, build_trace

SOURCE = ["le", "chat", "dort", ".", "</s>"]  # the encoder's tokens: S = 5
TARGET = ["<s>", "the", "cat", "sleeps"]  # the decoder's: L = 4
HEADS, WIDTH = 2, 4

ENTRIES = (  # (module path, kind), in the model's order
    ("model.encoder.layers.0.self_attn", "encoder"),
    ("model.encoder.layers.1.self_attn", "encoder"),
    ("model.decoder.layers.0.self_attn", "decoder"),
    ("model.decoder.layers.0.encoder_attn", "cross"),
    ("model.decoder.layers.1.self_attn", "decoder"),
    ("model.decoder.layers.1.encoder_attn", "cross"),
)


def entry(rng: np.random.Generator, rows: list[str], keys: list[str] | None, *, causal: bool = False):
    """One entry: ``rows`` queries over ``keys`` (None: the rows themselves), HEADS heads of WIDTH."""
    L, S = len(rows), len(keys or rows)
    inputs = rng.normal(size=(L, 8))
    Q = rng.normal(size=(HEADS, L, WIDTH))  # (H, L, E)
    K, V = rng.normal(size=(HEADS, S, WIDTH)), rng.normal(size=(HEADS, S, WIDTH))  # (H, S, E)
    return build_trace(inputs, Q, K, V, scale=None, is_causal=causal, tokens=rows, key_tokens=keys)


def encoder_decoder(seed: int = 0) -> ModelTrace:
    """A two-layer encoder and a two-layer decoder: six entries."""
    rng = np.random.default_rng(seed)
    layers = {}
    for i, (_, kind) in enumerate(ENTRIES):
        if kind == "encoder":
            layers[i] = entry(rng, SOURCE, None)
        elif kind == "decoder":
            layers[i] = entry(rng, TARGET, None, causal=True)
        else:
            layers[i] = entry(rng, TARGET, SOURCE)
    return ModelTrace(
        "tiny-bart", [0, 11, 12, 13], TARGET, layers, len(ENTRIES), HEADS, special=[True, False, False, False],
        modules=dict(enumerate(name for name, _ in ENTRIES)), kinds=dict(enumerate(kind for _, kind in ENTRIES)),
        source_ids=[21, 22, 23, 24, 2], source_tokens=SOURCE, source_special=[False, False, False, False, True],
    )  # fmt: skip


GRID = (7, 7)  # patch rows, cols
PATCH = 16  # pixels a side
VIT_TOKENS = ["[CLS]", "[REG]"] + [f"({r},{c})" for r in range(GRID[0]) for c in range(GRID[1])]


def picture() -> np.ndarray:
    """A 112 × 112 picture, uint8 (height, width, 3): a sky, a sun, a house and grass."""
    y, x = np.mgrid[0:112, 0:112]  # (height, width) each
    image = np.zeros((112, 112, 3), dtype=np.uint8)
    image[..., 0], image[..., 1] = 90 + y // 2, 150 + y // 3
    image[..., 2] = 235
    sun = (x - 84) ** 2 + (y - 24) ** 2 < 13**2
    image[sun] = (250, 210, 40)
    image[(y >= 56) & (y < 92) & (x >= 18) & (x < 60)] = (190, 40, 40)  # the house
    roof = (y >= 36) & (y < 56) & (np.abs(x - 39) < (y - 34))
    image[roof] = (110, 60, 30)
    image[y >= 92] = (60, 150, 60)
    return image


def vit(seed: int = 0) -> ModelTrace:
    """A vision transformer's trace of two layers: [CLS], a register token and 7 × 7
    patches; head 0 attends from each patch to its neighbours (−|p_i − p_j|² / σ²), head 1
    at random."""
    rng = np.random.default_rng(seed)
    rows, cols = np.divmod(np.arange(GRID[0] * GRID[1]), GRID[1])
    where = np.concatenate([[[3.0, 3.0], [0.0, 0.0]], np.stack([rows, cols], axis=1)])  # (L, 2): [CLS], [REG] placed
    L = len(VIT_TOKENS)
    layers = {}
    for layer, sigma in enumerate((1.0, 2.0)):
        # q_i·k_j = (2 p_i·p_j − |p_j|²)/σ², the softmax over j of −|p_i − p_j|²/σ²
        near_q = np.concatenate([2 * where, -np.ones((L, 1)), np.zeros((L, 1))], axis=1) / sigma**2  # (L, 4)
        near_k = np.concatenate([where, (where**2).sum(axis=1, keepdims=True), np.zeros((L, 1))], axis=1)  # (L, 4)
        Q = np.stack([near_q, rng.normal(size=(L, 4))])  # (H, L, E)
        K = np.stack([near_k, rng.normal(size=(L, 4))])
        V = rng.normal(size=(HEADS, L, WIDTH))
        layers[layer] = build_trace(rng.normal(size=(L, 8)), Q, K, V, scale=1.0, is_causal=False, tokens=VIT_TOKENS)
    special = [True, True] + [False] * (L - 2)
    return ModelTrace(
        "tiny-vit", [], VIT_TOKENS, layers, 2, HEADS, special=special,
        modules={0: "vit.encoder.layer.0.attention.attention", 1: "vit.encoder.layer.1.attention.attention"},
        kinds={0: "self", 1: "self"}, image=picture(), patch_grid=GRID,
    )  # fmt: skip


def image_to_text(seed: int = 0) -> ModelTrace:
    """A TrOCR-shaped trace: a ViT encoder over the picture's patches ([CLS] and [REG]
    apart), a text decoder over TARGET, and its cross-attention over the patches."""
    rng = np.random.default_rng(seed)
    layers = {
        0: entry(rng, VIT_TOKENS, None),
        1: entry(rng, TARGET, None, causal=True),
        2: entry(rng, TARGET, VIT_TOKENS),
    }
    return ModelTrace(
        "tiny-trocr", [0, 11, 12, 13], TARGET, layers, 3, HEADS, special=[True, False, False, False],
        modules=dict(enumerate(["encoder.layer.0.attention", "decoder.layers.0.self_attn", "decoder.layers.0.cross"])),
        kinds={0: "encoder", 1: "decoder", 2: "cross"}, source_tokens=VIT_TOKENS,
        source_special=[True, True] + [False] * 49, image=picture(), patch_grid=GRID,
    )  # fmt: skip
