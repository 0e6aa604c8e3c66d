"""The configuration class of every configurable policy, imported when first looked up.

``CONFIGS`` names every configurable policy without importing a configuration: a command that
validates one policy (``dpbandit simulate --policy fliphat``) builds that policy's pydantic
model only, not those of every other policy and of the service's settings (start-up, issue 24).
The union of every configuration (:data:`~.policies.PolicyConfig`, what a bandit's ``policy:``
section of ``dpbandit serve`` is) lives in :mod:`.policies`; ``tests/config`` checks that it
and this registry name the same classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .base import PolicyConfigBase

__all__ = ["CONFIGS", "ConfigRegistry", "policy_config", "validate_for_mode"]


class ConfigRegistry(Mapping[str, "type[PolicyConfigBase]"]):
    """Read-only mapping ``policy registry name → configuration class``, imported on first use.

    Parameters
    ----------
    entries
        ``{registry name: (module of this package, class name)}``; each class's ``policy``
        field must default to its registry name (checked when it is imported).

    Examples
    --------
    >>> reg = ConfigRegistry({"random": ("policies", "RandomConfig")})
    >>> sorted(reg), reg["random"].__name__, "fliphat" in reg
    (['random'], 'RandomConfig', False)
    """

    def __init__(self, entries: Mapping[str, tuple[str, str]]):
        self._entries = dict(entries)
        self._loaded: dict[str, type[PolicyConfigBase]] = {}

    def __getitem__(self, key: str) -> type[PolicyConfigBase]:
        cls = self._loaded.get(key)
        if cls is None:
            module, attr = self._entries[key]
            cls = getattr(importlib.import_module(f"{__package__}.{module}"), attr)
            if cls.model_fields["policy"].default != key:
                raise RuntimeError(f"{attr}.policy defaults to another name than {key!r}")
            self._loaded[key] = cls
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __repr__(self) -> str:
        return f"ConfigRegistry({sorted(self._entries)})"


#: Configuration class by policy registry name (the members of ``PolicyConfig``, in its order).
CONFIGS: ConfigRegistry = ConfigRegistry(
    {
        "fliphat": ("fliphat", "FliphatConfig"),
        "random": ("policies", "RandomConfig"),
        "lasso-bandit": ("policies", "LassoBanditConfig"),
        "linucb": ("policies", "LinUCBConfig"),
        "linucb-disjoint": ("policies", "LinUCBDisjointConfig"),
        "greedy": ("policies", "GreedyConfig"),
        "dp-linucb": ("policies", "DPLinUCBConfig"),
        "private-lasso": ("policies", "PrivateLassoConfig"),
        "th-lasso": ("policies", "THLassoConfig"),
        "sa-lasso": ("policies", "SALassoConfig"),
        "ldp-glb": ("ldp", "LDPGLBConfig"),
        "ldp-ucb": ("ldp", "LDPUCBConfig"),
        "ldp-gloc": ("ldp", "LDPGLOCConfig"),
        "dpucb-mat": ("matroid", "DPUCBMatConfig"),
        "dpts-mat": ("matroid", "DPTSMatConfig"),
        "table": ("policies", "TableConfig"),
    }
)


def policy_config(name: str, params: dict) -> PolicyConfigBase:
    """Validate ``params`` for policy ``name``; raise :class:`ConfigError` with one line."""
    if name not in CONFIGS:
        raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(CONFIGS))}")
    cls = CONFIGS[name]
    from pydantic import ValidationError  # loaded with the configuration class

    from .base import format_validation_error

    try:
        return cls(**params)
    except ValidationError as err:
        raise ConfigError(
            format_validation_error(err, f"invalid parameters for {name}: ")
        ) from None


def validate_for_mode(cfg: PolicyConfigBase, mode: str) -> None:
    """Refuse settings that are only acceptable in simulation (FLIPHAT spec §5.3, §6)."""
    reason = None if mode == "simulation" else cfg.simulation_only()
    if reason:
        raise ConfigError(reason)
