"""Ring attention over torch.distributed (``pip install 'attnlab[torch]'``): each rank
holds a shard of the sequence, keys and values travel around a ring of ranks, and the
partial outputs merge by their log-sum-exps. Usage::

    from attnlab import distributed

    out = distributed.ring_attention(q_shard, k_shard, v_shard, is_causal=True)

The algorithm is in :mod:`._ring` (the schedule), :mod:`._agreement` (the ranks' one
collective before any other), :mod:`._shards` (the layouts) and docs/distributed.md.
"""

from .._exceptions import RingError
from ._attention import LAYOUTS, ring_attention, ring_attention_backward, shard, unshard

__all__ = ["LAYOUTS", "RingError", "ring_attention", "ring_attention_backward", "shard", "unshard"]

RingError.__module__ = __name__  # attnlab.distributed.RingError, where users find it
