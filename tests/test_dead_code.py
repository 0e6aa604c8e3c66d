"""No private name of the package is defined and never used: a module-level ``_name`` or an
undecorated ``_method`` that nothing references is dead code (the validators that pydantic
calls through their decorators are used)."""

from __future__ import annotations

import ast
import collections
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "streaming_dpbandit"


def _defined_private_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        if isinstance(node, ast.ClassDef):
            names += [
                f.name
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.decorator_list
            ]
    return [n for n in names if n.startswith("_") and not n.startswith("__")]


def unused_private_names(texts: dict[str, str]) -> list[str]:
    """``module: name`` for each private name whose only occurrence is its definition."""
    seen = collections.Counter(re.findall(r"\b_\w+\b", "\n".join(texts.values())))
    return [
        f"{path}: {name}"
        for path, text in texts.items()
        for name in _defined_private_names(ast.parse(text))
        if seen[name] <= 1
    ]


def test_no_private_name_is_unused():
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.rglob("*.py"))}
    assert unused_private_names(texts) == []


def test_the_check_finds_an_unused_helper():
    code = "def _used():\n    pass\n\n_used()\n_SPARE = 1\n\nclass C:\n    def _m(self): ...\n"
    texts = {"a.py": code}
    assert unused_private_names(texts) == ["a.py: _SPARE", "a.py: _m"]
