"""Every exception and warning attnlab defines, in one place (as httpx keeps its own), and
the one deprecation helper.

The hierarchy::

    Exception
    └── AttnlabError                  every error attnlab raises on purpose; the CLI catches it alone
        ├── ArgumentError             (ValueError) an argument of the right type, a value that cannot be used
        │   ├── CheckpointError       a checkpoint missing, incomplete, corrupted or unsupported (attnlab.models)
        │   └── InputError            the command line's input cannot be used (attnlab.cli)
        ├── ArgumentTypeError         (TypeError) an argument of the wrong type
        ├── MissingDependencyError    (ImportError) an optional extra not installed
        ├── UnsupportedModelError     (ValueError) a model attnlab's transformers backend cannot run (attnlab.hf)
        └── RingError                 (RuntimeError) a ring call failed on one rank, or the ranks are out of step
                                      (attnlab.distributed)

    UserWarning
    └── MissingFontWarning            tokens need glyphs that no installed font has (attnlab.plot)

    DeprecationWarning                an old name, kept one release: :func:`deprecated` says so

Users import each class from where they always did (``attnlab``, ``attnlab.models``,
``attnlab.hf``, ``attnlab.distributed``); this module is private. It sits below
``_validation``, which builds the argument errors, and imports nothing of attnlab.
"""

from __future__ import annotations

import warnings

__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "AttnlabError",
    "CheckpointError",
    "InputError",
    "MissingDependencyError",
    "MissingFontWarning",
    "RingError",
    "UnsupportedModelError",
    "deprecated",
    "renamed",
]


class AttnlabError(Exception):
    """Base of every error attnlab raises on purpose: a bad argument or bad input."""


class ArgumentError(AttnlabError, ValueError):
    """An argument has the right type but a value that cannot be used."""

    def __init__(self, message: str, argument: str = "", mentions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.argument = argument  # the name the message starts with, so a caller can rename it
        self.mentions = mentions  # other arguments the message names ("truncation=True"), renamed too


class ArgumentTypeError(AttnlabError, TypeError):
    """An argument has the wrong type."""

    def __init__(self, message: str, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


class MissingDependencyError(AttnlabError, ImportError):
    """An optional feature's extra is not installed; the message says which to install
    (``argument``: the argument whose value needs it, as "backend" for transformers)."""

    def __init__(self, message: str, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


class CheckpointError(ArgumentError):
    """A checkpoint that cannot be used: missing, incomplete, corrupted or unsupported."""

    def __init__(self, message: str, argument: str = "name_or_dir") -> None:
        super().__init__(message, argument)


class InputError(ArgumentError):
    """The user's input cannot be used; the message says why."""


class UnsupportedModelError(AttnlabError, ValueError):
    """A model, or a feature of one, that attnlab's backend cannot run exactly: the message
    names the model type and the feature (``argument``: the argument that gave the model,
    where the message starts with it)."""

    def __init__(self, message: str, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


class RingError(AttnlabError, RuntimeError):
    """What every rank raises when one rank's call failed with an error that is not about
    its arguments (a ``MemoryError``, a bug), or when the ranks are out of step: the calls
    being paired are not each rank's same call."""


class MissingFontWarning(UserWarning):
    """Tokens need glyphs that no installed font has."""


def renamed(error: AttnlabError, names: dict[str, str]) -> str | None:
    """``error``'s message naming what a caller passed on (a command's option, a page's
    field) instead of the library's argument: ``names[error.argument]`` in place of the
    argument its message starts with, and ``names[m]`` in place of each of the error's
    ``mentions`` (another argument the message names, spelled as it spells it, such as
    "truncation=True"); None when ``names`` has no name for its argument (or it has none:
    an error that is not about an argument)."""
    argument, message = getattr(error, "argument", ""), str(error)
    if not argument or argument not in names or not message.startswith(argument):
        return None
    message = names[argument] + message[len(argument) :]
    for mention in getattr(error, "mentions", ()):  # other arguments the message names, as it spells them
        message = message.replace(mention, names.get(mention, mention))
    return message


def deprecated(old: str, new: str, *, stacklevel: int = 2) -> None:
    """Warn (DeprecationWarning) that the name ``old`` is kept one release and ``new``
    replaces it: "``old`` is deprecated and will be removed in the next release: use ``new``".
    ``stacklevel`` counts as ``warnings.warn``'s would from the caller of this function: 2
    points at whoever called the caller."""
    message = f"{old} is deprecated and will be removed in the next release: use {new}"
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)
