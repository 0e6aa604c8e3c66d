"""River compatibility without importing River's bandit module at start-up.

Importing ``river.bandit.base`` costs about a second (River's metrics import ``scipy.stats``),
more than everything else ``dpbandit`` needs to start. Policies therefore subclass the light
``river.base.Base`` (``clone``, parameters) and implement ``ContextualPolicy``'s interface
(``pull(arm_ids, context)``, ``update(arm_id, context, reward)``, ``ranking``) themselves;
:func:`register_contextual_policy` makes them *virtual* subclasses of
``river.bandit.base.ContextualPolicy`` (``ABCMeta.register``), so River's harnesses
(``bandit.evaluate_offline`` tests ``isinstance(policy, ContextualPolicy)``) treat them as
contextual policies. The registration happens at once when River's bandit module is already
loaded, else the moment it is first imported, through a one-shot import finder (a post-import
hook; ``wrapt.register_post_import_hook`` does the same but imports ``asyncio``, 0.1 s).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TypeVar

__all__ = ["register_contextual_policy"]

_TARGET = "river.bandit.base"
_PENDING: list[type] = []

_C = TypeVar("_C", bound=type)


def register_contextual_policy(cls: _C) -> _C:
    """Make ``cls`` a virtual subclass of ``river.bandit.base.ContextualPolicy``; returns it.

    Does not import River's bandit module: if it is not loaded yet, ``cls`` is registered
    when it is.

    >>> import sys
    >>> from streaming_dpbandit.policies import RandomPolicy
    >>> from river import bandit
    >>> isinstance(RandomPolicy(d=2), bandit.base.ContextualPolicy)
    True
    """
    module = sys.modules.get(_TARGET)
    if module is not None and hasattr(module, "ContextualPolicy"):
        module.ContextualPolicy.register(cls)
        return cls
    _PENDING.append(cls)
    if not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())
    return cls


def _register_pending(module: ModuleType) -> None:
    while _PENDING:
        module.ContextualPolicy.register(_PENDING.pop(0))


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``river.bandit.base`` to register afterwards."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname != _TARGET:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _RegisteringLoader(spec.loader, self)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader, finder: _RegisterOnImport) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # the module's own loader from now on (get_source, resources, reload)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        _register_pending(module)
