"""One way to open a model and one way to run it, for the command line, the live page,
analysis and Python alike: :func:`load_model` opens what ``--model`` takes on the backend
the command line would choose, and gives a :class:`Runner`, the one interface of a model
on either backend ("run this model on these ids and record what is asked") that
``attnlab.serve``, ``analysis.ablate``, ``analysis.head_types``, ``attnlab.view`` and
``attnlab.show`` accept."""

from ._open import BACKENDS, HEADS, Checkpoint, load_model, open_checkpoint
from ._runner import Runner

__all__ = ["BACKENDS", "HEADS", "Checkpoint", "Runner", "load_model", "open_checkpoint"]

for _public in (Checkpoint, Runner, load_model, open_checkpoint):
    _public.__module__ = __name__
del _public
