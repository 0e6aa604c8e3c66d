"""The configuration class of every configurable policy, imported when first looked up.

``CONFIGS`` names every configurable policy without importing a configuration: a command that
validates one policy (``dpbandit simulate --policy fliphat``) builds that policy's pydantic
model only, not those of every other policy and of the service's settings (start-up, issue 24).
The union of every configuration (:data:`~.policies.PolicyConfig`, what a bandit's ``policy:``
section of ``dpbandit serve`` is) lives in :mod:`.policies`; ``tests/config`` checks that it
and this registry name the same classes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..utils.lazy import LazyRegistry

if TYPE_CHECKING:
    from .base import PolicyConfigBase

__all__ = ["CONFIGS", "policy_config", "validate_for_mode"]


def _policy_default(cls: type) -> object:
    """The name a configuration class gives its policy: its ``policy`` field's default."""
    return cls.model_fields["policy"].default  # type: ignore[attr-defined]


#: Configuration class by policy registry name (the members of ``PolicyConfig``, in its order).
CONFIGS: LazyRegistry[PolicyConfigBase] = LazyRegistry(
    "streaming_dpbandit.config",
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
    },
    name_of=(_policy_default, "policy"),
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
