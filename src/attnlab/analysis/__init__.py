"""What a traced or running model's attention does across layers: attention rollout and
flow (Abnar & Zuidema 2020) over a :class:`attnlab.models.ModelTrace`, the effect of
each head, by ablating or patching its output, and what kind of head each one is
(previous-token, induction, sink…), on attnlab's NumPy models and on transformers models
through attnlab's backend; and what a KV cache may drop (StreamingLLM, H2O, SnapKV),
replayed on attnlab's NumPy models::

    import attnlab
    from attnlab import analysis, models

    model = models.load("gpt2")
    trace = model.trace("小明是个运动达人，他平时很爱打篮球")
    analysis.rollout(trace)                         # (layers, L, L)
    analysis.flow(trace, heads=[0, 1])              # (layers, L, L), max-flows
    result = analysis.ablate(model, "The cat sat on the", heads="all", target=" mat")
    result.effect                                   # (layers, heads): Δ log p(" mat")
    print(result.render())
    kinds = analysis.head_types(model)              # runs the model on a text and on r + r
    kinds.strongest("induction", 3)                 # [(layer, head, score), …]
    replay = analysis.evict(attnlab.load_model("smollm2.gguf"), long_text, budgets=[0.1, 0.25, 0.5])
    print(replay.render())                          # KL(full ‖ evicted), top-1 per policy and budget

``ablate`` on a transformers model needs ``pip install 'attnlab[hf]'``; ``flow`` needs SciPy.
"""

from ._ablate import MODES, ablate
from ._ablation import Ablation
from ._eviction import Eviction, evict
from ._head_table import HeadTypes
from ._head_types import head_types
from ._rollout import FLOW_SCALE, flow, residual_attention, rollout

__all__ = [
    "FLOW_SCALE", "MODES", "Ablation", "Eviction", "HeadTypes", "ablate", "evict", "flow", "head_types",
    "residual_attention", "rollout",
]  # fmt: skip

for _public in (Ablation, Eviction, HeadTypes, ablate, evict, flow, head_types, residual_attention, rollout):
    _public.__module__ = __name__
del _public
