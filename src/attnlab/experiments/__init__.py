"""``attnlab experiment``: the article's questions answered by experiments anyone can rerun,
and the 他 → 小明 task whose full run is the shipped builtin:coref model."""

from ._run import EXPERIMENTS, run

__all__ = ["EXPERIMENTS", "run"]
