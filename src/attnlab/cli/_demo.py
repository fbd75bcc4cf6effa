"""attnlab demo: the article's demonstration, every step.

Print the seed article's demo: 4 one-hot tokens, d_model=8, d_k=6, seed 42.

Examples::

  attnlab demo --lang en
"""

from __future__ import annotations

import argparse

from ..reference import SelfAttention as ReferenceSelfAttention
from ..trace._trace import Trace
from ._options import add_output_options, print_trace

__all__ = ["OPTIONS", "run"]

# The seed article's demonstration: four one-hot tokens of width 8, d_k = 6.
DEMO_D_MODEL, DEMO_D_K = 8, 6
DEMO_X = [[1.0 if j == i else 0.0 for j in range(DEMO_D_MODEL)] for i in range(4)]


OPTIONS = (add_output_options,)  # the option groups, in --help's order


def run(args: argparse.Namespace) -> None:
    """Run the seed's pure-Python layer on the demo's tokens and print its trace."""
    steps = ReferenceSelfAttention(DEMO_D_MODEL, DEMO_D_K).trace(DEMO_X)
    print_trace(Trace.from_reference(DEMO_X, steps), args)
