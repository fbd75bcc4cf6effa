"""``python -m attnlab``: the ``attnlab`` command."""

import sys

from .cli._main import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
