"""The layout's rules that no linter checks: a test tree laid out like the package's, and
every exception defined in the one exceptions module. (A unit's size follows from its one
job: no line count is held to.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "attnlab"
TESTS = Path(__file__).parent


def test_every_test_folder_is_a_package_folder_of_src():
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and p.name not in ("seed", "docs", "__pycache__")}
    packages = {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert folders and folders <= packages, folders - packages


def test_exceptions_and_warnings_are_defined_only_in_the_exceptions_module():
    defined = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Warning", "Exception")):
                defined[node.name] = str(path.relative_to(SRC))
    assert len(defined) >= 9 and set(defined.values()) == {"_exceptions.py"}, defined
