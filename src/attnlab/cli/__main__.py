"""``python -m attnlab.cli``, the same as ``python -m attnlab``."""

from . import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
