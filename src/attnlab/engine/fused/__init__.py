"""The fused engine: the tiled engine's block kernels and whole tasks compiled by numba
(``pip install 'attnlab[fast]'``); :mod:`._engine` loads them, :mod:`._kernels` defines them."""

from ._engine import KERNELS, available

__all__ = ["KERNELS", "available"]
