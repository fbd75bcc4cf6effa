"""``attnlab bench``: the engines against torch and the seed, side by side in one run, with
the machine's limits beside them; a long sequence's memory, the first call's compile time,
a model against transformers, and the ring. Each measurement that needs a fresh process
has a module of its own run with ``python -m``."""

__all__: list[str] = []
