"""No private name of the package is defined and never used: a module-level ``_name`` or an
undecorated ``_method`` that nothing references is dead code (the validators that pydantic
calls through their decorators are used)."""

from __future__ import annotations

import ast
import collections
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "streaming_dpbandit"


def _defined_private_names(tree: ast.Module) -> list[str]:
    """Module-level private names, and ``Class._method`` for undecorated private methods."""
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
                f"{node.name}.{f.name}"
                for f in node.body
                if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.decorator_list
            ]
    return [
        n
        for n in names
        if n.rpartition(".")[2].startswith("_") and not n.rpartition(".")[2].startswith("__")
    ]


def _overrides_a_base(path: str, qualname: str) -> bool:
    """Whether ``Class._method`` of the package module at ``path`` overrides a method of one
    of the class's bases (e.g. argparse's ``HelpFormatter._split_lines``): its caller is the
    base class, outside the package."""
    cls_name, _, method = qualname.partition(".")
    module = "streaming_dpbandit." + path.removesuffix(".py").replace("/", ".")
    module = module.removesuffix(".__init__")
    try:
        cls = getattr(importlib.import_module(module), cls_name)
    except (ImportError, AttributeError):
        return False
    return any(method in vars(base) for base in cls.__mro__[1:])


def unused_private_names(texts: dict[str, str], *, resolve_bases: bool = True) -> list[str]:
    """``module: name`` for each private name whose only occurrence is its definition (a
    method that overrides a base class's is used by that base)."""
    seen = collections.Counter(re.findall(r"\b_\w+\b", "\n".join(texts.values())))
    return [
        f"{path}: {name.rpartition('.')[2]}"
        for path, text in texts.items()
        for name in _defined_private_names(ast.parse(text))
        if seen[name.rpartition(".")[2]] <= 1
        and not ("." in name and resolve_bases and _overrides_a_base(path, name))
    ]


def test_no_private_name_is_unused():
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.rglob("*.py"))}
    assert unused_private_names(texts) == []


def test_the_check_finds_an_unused_helper():
    code = "def _used():\n    pass\n\n_used()\n_SPARE = 1\n\nclass C:\n    def _m(self): ...\n"
    texts = {"a.py": code}
    assert unused_private_names(texts, resolve_bases=False) == ["a.py: _SPARE", "a.py: _m"]


def test_an_override_of_a_base_class_method_is_used_but_a_new_method_is_not():
    # cli.py's help formatter overrides argparse's _split_lines (called by argparse)
    assert _overrides_a_base("cli.py", "_Formatter._split_lines")
    assert not _overrides_a_base("cli.py", "_Formatter._no_such_hook")
