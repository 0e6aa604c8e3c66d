"""Registries whose classes are imported on first use (start-up time, issue 24).

A package that registers one class per module (policies, environments) would otherwise import
every module, and every heavy dependency of any of them, to use one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

__all__ = ["LazyRegistry", "lazy_attribute"]


def lazy_attribute(package: str, where: Mapping[str, str], name: str) -> Any:
    """Attribute ``name`` of ``package`` from its submodule ``where[name]`` (PEP 562 helper).

    >>> lazy_attribute("streaming_dpbandit.policies", {"FLIPHAT": "fliphat"}, "FLIPHAT").name
    'fliphat'
    """
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{package}.{module}"), name)


def _name_attribute(cls: type) -> object:
    return getattr(cls, "name", None)


class LazyRegistry(Mapping[str, type[T]], Generic[T]):
    """Read-only mapping ``registry name → class``; a class is imported when first looked up.

    Parameters
    ----------
    package
        The package holding the modules.
    entries
        ``{registry name: (module, class name)}``; each class's own name (``name_of(cls)``)
        must equal its registry name (checked when it is imported).
    name_of
        The name a class gives itself, and what ``name_of`` reads (for the error message):
        ``(function, label)``. By default its ``name`` attribute (a class without one is not
        checked).

    Examples
    --------
    >>> reg = LazyRegistry("streaming_dpbandit.policies", {"random": ("random", "RandomPolicy")})
    >>> sorted(reg), reg["random"].__name__, "fliphat" in reg
    (['random'], 'RandomPolicy', False)
    """

    def __init__(
        self,
        package: str,
        entries: Mapping[str, tuple[str, str]],
        name_of: tuple[Callable[[type], object], str] = (_name_attribute, "name"),
    ):
        self._package = package
        self._entries = dict(entries)
        self._name_of = name_of
        self._loaded: dict[str, type[T]] = {}

    def __getitem__(self, key: str) -> type[T]:
        cls = self._loaded.get(key)
        if cls is None:
            module, attr = self._entries[key]
            cls = getattr(importlib.import_module(f"{self._package}.{module}"), attr)
            read, label = self._name_of
            own = read(cls)
            if own is not None and own != key:
                raise RuntimeError(f"{attr}.{label} is {own!r}, registered as {key!r}")
            self._loaded[key] = cls
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return f"LazyRegistry({self._package!r}, {sorted(self._entries)})"
