"""Bandit policies, one per module: single-arm (:class:`~.base.Policy`) or slate
(:class:`~.slate_base.SlatePolicy`), both :class:`~.base.BasePolicy`.

A policy registers itself where it is defined (``@register``, :mod:`.registry`); ``REGISTRY``
finds it by name, and its configuration is derived from its constructor
(:mod:`streaming_dpbandit.config`). ``docs/adding-a-policy.md`` says how to add one.

The policy modules are imported on first use (``REGISTRY["fliphat"]``, ``from
streaming_dpbandit.policies import FLIPHAT``): together they import SciPy's linear algebra,
optimisation and sparse modules, and ``OneHotArms`` River's bandit module, which one policy
seldom needs.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import BasePolicy, DecisionBatch, Policy
from .registry import REGISTRY, register

#: The shared building blocks that are not policies: module of each.
_MODULES = {
    "MatroidPolicy": "matroid_base",
    "OneHotArms": "multi_armed",
    "SlateBatch": "matroid_base",
    "SlatePolicy": "slate_base",
}


def policy_class(name: str, params: Mapping[str, object] | None = None) -> type:
    """The class that builds policy ``name`` with the constructor parameters ``params``:
    ``REGISTRY[name]``, or the variant one of the parameters selects.

    >>> policy_class("private-lasso", {"d": 4, "calibration": "paper"}).__name__
    'PrivateLASSOPaper'
    >>> policy_class("private-lasso", {"d": 4}).__name__, policy_class("linucb").__name__
    ('PrivateLASSO', 'LinUCB')
    """
    cls = REGISTRY[name]
    params = params or {}
    for (param, value), variant in cls.variants().items():
        if params.get(param) == value:
            return variant  # type: ignore[no-any-return]
    return cls


def policy_variants(name: str) -> list[type]:
    """The classes that parameters of policy ``name`` select instead of ``REGISTRY[name]``.

    >>> [cls.__name__ for cls in policy_variants("private-lasso")], policy_variants("linucb")
    (['PrivateLASSOPaper'], [])
    """
    return list(REGISTRY[name].variants().values())


def is_slate(name: str) -> bool:
    """Whether policy ``name`` serves slates (a :class:`~.slate_base.SlatePolicy`: it decides
    with ``decide_slates``, not ``decide``; no per-arm contexts, no dimension d).

    >>> is_slate("dpts-mat"), is_slate("fliphat")
    (True, False)
    """
    from .slate_base import SlatePolicy

    return issubclass(REGISTRY[name], SlatePolicy)


if not TYPE_CHECKING:  # a type checker reads the classes from their modules

    def __getattr__(name: str) -> Any:
        """A policy class by its class name (``FLIPHAT``, found in the registry: a convenience
        at run time; typed code imports it from its module, ``policies.fliphat``), or a shared
        building block; ``SLATE_POLICIES``: the slate policies' names, recognised by type."""
        if name == "SLATE_POLICIES":
            return frozenset(n for n in REGISTRY if is_slate(n))
        if name in _MODULES:
            return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
        if name[:1].isupper():
            for cls in REGISTRY.values():
                for klass in (cls, *cls.variants().values()):
                    if klass.__name__ == name:
                        return klass
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "REGISTRY",
    "BasePolicy",
    "DecisionBatch",
    "Policy",
    "is_slate",
    "policy_class",
    "policy_variants",
    "register",
]
