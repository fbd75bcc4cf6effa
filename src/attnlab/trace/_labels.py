"""A trace's text in two languages: the labels :meth:`Trace.render` writes, by language."""

from __future__ import annotations

__all__ = ["LABELS", "LANGUAGES"]

LABELS = {
    "zh": {
        "title": "自注意力演示",
        "length": "输入序列长度",
        "width": "输入维度",
        "shape": "{name} 的形状",
        "scores": "原始注意力分数",
        "scaled": "缩放后的注意力分数",
        "scale": "缩放系数",
        "weights": "注意力权重（Softmax 后）",
        "output": "自注意力输出",
        "row": "第 {i} 行{tok}",
        "token_output": "词 {i}{tok} 的输出",
        "head": "注意力头",
        "head_output": "注意力头 {h} 的输出（out_proj 之前）",
        "layer_output": "层输出（拼接各头后经 out_proj）",
        "keys": "键",
        "keys_length": "键序列长度",
        "rules": "注意力规则",
        "masked": "-inf：被屏蔽的键（权重为 0）",
    },
    "en": {
        "title": "Self-attention demo",
        "length": "Input length",
        "width": "Input dimension",
        "shape": "shape of {name}",
        "scores": "Raw attention scores",
        "scaled": "Scaled attention scores",
        "scale": "scale",
        "weights": "Attention weights (after softmax)",
        "output": "Self-attention output",
        "row": "row {i}{tok}",
        "token_output": "output of token {i}{tok}",
        "head": "head",
        "head_output": "Output of head {h} (before out_proj)",
        "layer_output": "Layer output (the heads side by side, through out_proj)",
        "keys": "keys",
        "keys_length": "Keys' length",
        "rules": "attention rules",
        "masked": "-inf: a masked key (its weight is 0)",
    },
}
LANGUAGES = tuple(LABELS)
