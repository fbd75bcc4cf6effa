"""attnlab as a transformers attention backend (``pip install 'attnlab[hf]'``).

Importing this module registers ``attn_implementation="attnlab"``: every architecture
whose attention goes through transformers' attention interface then runs it on attnlab's
engine, forward and backward, with the real q and k (after RoPE)::

    import attnlab.hf
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="attnlab")
    trace = attnlab.hf.trace(model, "他很高兴", tokenizer=tokenizer)   # every attention module
"""

from ._backend import UnsupportedModelError, attention_forward
from ._generation import trace_generation
from ._record import trace
from ._register import NAME, check_model, register

__all__ = ["NAME", "UnsupportedModelError", "attention_forward", "check_model", "register", "trace", "trace_generation"]

UnsupportedModelError.__module__ = __name__  # attnlab.hf.UnsupportedModelError, where users find it

register()
