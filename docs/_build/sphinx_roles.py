"""A griffe extension of attnlab's API reference (mkdocs.yml: the python handler's
``extensions``): the docstrings' Sphinx roles, such as :func:`attnlab.attention`, shown as
code (``attnlab.attention``) instead of as the raw role."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrites each role of a docstring as a code span, before the docstring is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the roles of one object's docstring.

        Args:
            obj: the object griffe has just loaded.
            kwargs: the rest of griffe's hook arguments (unused).
        """
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
