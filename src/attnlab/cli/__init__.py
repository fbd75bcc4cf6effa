"""The command line, ``attnlab``: one module per command (its options and its run), the
options they share, reading the user's files, and errors as one line with exit status 2."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
