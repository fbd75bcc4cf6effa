"""The layout's rules that no linter checks: small functions (none in src/ of 120 lines or
more; a class is as long as its methods, each held to this) and a test tree laid out like
the package's."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "attnlab"
TESTS = Path(__file__).parent
MAX_LINES = 120


def test_no_function_reaches_120_lines():
    sizes = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                sizes[f"{path.relative_to(SRC)}:{node.lineno} {node.name}"] = node.end_lineno - first + 1
    too_long = {name: lines for name, lines in sizes.items() if lines >= MAX_LINES}
    assert len(sizes) > 500 and not too_long  # hundreds of functions read, none too long


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
