"""Validated policy configurations (pydantic v2), derived from the policies themselves.

``policy_config(name, params)`` validates a policy's parameters (one clear error line);
``cfg.build(seed)`` constructs it. ``CONFIGS[name]`` is the configuration model of a registered
policy (:data:`streaming_dpbandit.policies.REGISTRY`), derived from its constructor
(:func:`~.registry.config_class`): a policy is one module, its configuration nothing to write.
The service's settings live in :mod:`streaming_dpbandit.settings` (which imports this package,
never the other way round).

Every name is imported on first use (PEP 562): validating FLIPHAT's parameters imports FLIPHAT
and builds its model only, not the other policies' (start-up, issue 24).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..utils.lazy import lazy_attribute

if TYPE_CHECKING:  # the real names for type checkers (imported lazily at run time)
    from .base import PolicyConfigBase, PolicyField, format_validation_error, parse_kv
    from .matroid import MatroidConfig
    from .registry import CONFIGS, config_class, policy_config, validate_for_mode
    from .user_level import UserLevelConfig

    PolicyConfig: Any

#: Module of each public name of the package.
_MODULES = {
    "CONFIGS": "registry",
    "MatroidConfig": "matroid",
    "PolicyConfigBase": "base",
    "PolicyField": "base",
    "UserLevelConfig": "user_level",
    "config_class": "registry",
    "format_validation_error": "base",
    "parse_kv": "base",
    "policy_config": "registry",
    "validate_for_mode": "registry",
}


def _union() -> Any:
    """Every configurable policy's configuration, one tagged union (``policy`` names it)."""
    from typing import Annotated, Union

    from pydantic import Field

    from .registry import CONFIGS

    members = tuple(CONFIGS[name] for name in CONFIGS)
    return Annotated[Union[members], Field(discriminator="policy")]  # noqa: UP007


def __getattr__(name: str) -> Any:
    """A configuration name, imported from its module on first use (``PolicyConfig``: the
    union of every configurable policy's configuration, built when first asked for)."""
    value = _union() if name == "PolicyConfig" else lazy_attribute(__name__, _MODULES, name)
    globals()[name] = value  # later look-ups skip this function
    return value


__all__ = [
    "CONFIGS",
    "ConfigError",
    "MatroidConfig",
    "PolicyConfig",
    "PolicyConfigBase",
    "PolicyField",
    "UserLevelConfig",
    "config_class",
    "format_validation_error",
    "parse_kv",
    "policy_config",
    "validate_for_mode",
]
