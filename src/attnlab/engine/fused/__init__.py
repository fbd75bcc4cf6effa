"""The fused engine: the tiled engine's block kernels and whole tasks compiled by numba
(``pip install 'attnlab[fast]'``); :mod:`._engine` loads them, :mod:`._kernels` defines them
and :mod:`._tasks` schedules the whole tasks."""

from ._engine import FUSED, KERNELS, available

__all__ = ["FUSED", "KERNELS", "available"]
