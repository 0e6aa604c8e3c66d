"""The one registry of policies: a policy registers itself where it is defined (``@register``).

Everything that names a policy — the CLI's ``--policy``, the service's ``policy:`` sections,
``simulate``, ``replay``, ``explain``, ``budget`` — looks it up here, and its configuration is
derived from the class (:mod:`streaming_dpbandit.config`). Adding a policy is one module:
``docs/adding-a-policy.md``.

Looking a policy up imports only what it needs (start-up time, issue 24): ``REGISTRY["dp-linucb"]``
imports ``policies/dp_linucb.py`` (the module named after the policy), and only a name that no
such module registers makes the registry import every policy module. Listing the registry
(``sorted(REGISTRY)``) imports them all. A policy defined elsewhere (a test, a user's module) is
registered when its class is defined.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .base import BasePolicy

__all__ = ["REGISTRY", "PolicyRegistry", "register"]

T = TypeVar("T", bound="type[BasePolicy]")

_PACKAGE = __name__.rsplit(".", 1)[0]
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


class PolicyRegistry(Mapping[str, type[Any]]):
    """Read-only mapping ``policy name → class``, filled by :func:`register`.

    Examples
    --------
    >>> REGISTRY["random"].__name__, "no-such-policy" in REGISTRY
    ('RandomPolicy', False)
    """

    def __init__(self, package: str):
        self._package = package
        self._classes: dict[str, type[Any]] = {}
        self._complete = False

    def add(self, cls: type[BasePolicy]) -> None:
        """Register ``cls`` under its ``name``; a second class of the same name is refused
        (a class defined again in the same module, e.g. a reloaded one, replaces itself)."""
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(
                f"{cls.__qualname__}.name must be a lower-case policy name (letters, digits, "
                f"'-'), got {name!r}"
            )
        have = self._classes.get(name)
        if have is not None and have is not cls and _where(have) != _where(cls):
            raise ValueError(
                f"policy name {name!r} is taken by {_where(have)}; {_where(cls)} needs another"
            )
        self._classes[name] = cls

    def remove(self, name: str) -> None:
        """Forget policy ``name`` (a test's or an example's policy, after use)."""
        self._classes.pop(name, None)

    def _load(self, name: str) -> None:
        """Import the package's module named after the policy, else every policy module."""
        if not _NAME.fullmatch(name):
            return
        module = f"{self._package}.{name.replace('-', '_')}"
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
        if name not in self._classes:
            self._discover()

    def _discover(self) -> None:
        if self._complete:
            return
        package = importlib.import_module(self._package)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{self._package}.{info.name}")
        self._complete = True

    def __getitem__(self, name: str) -> type[Any]:  # (callers use the class's own API)
        if name not in self._classes:
            self._load(name)
        try:
            return self._classes[name]
        except KeyError:
            raise KeyError(f"unknown policy {name!r}") from None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if name not in self._classes:
            self._load(name)
        return name in self._classes

    def __iter__(self) -> Iterator[str]:
        self._discover()
        return iter(sorted(self._classes))

    def __len__(self) -> int:
        self._discover()
        return len(self._classes)

    def __repr__(self) -> str:
        return f"PolicyRegistry({sorted(self._classes)})"


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


#: Every policy by name.
REGISTRY = PolicyRegistry(_PACKAGE)


def register(cls: T) -> T:
    """Class decorator: register a policy under its ``name``.

    >>> from streaming_dpbandit.policies import Policy, register
    >>> @register
    ... class Constant(Policy):
    ...     name = "doc-constant"
    >>> REGISTRY["doc-constant"] is Constant
    True
    >>> REGISTRY.remove("doc-constant")
    """
    REGISTRY.add(cls)
    return cls
