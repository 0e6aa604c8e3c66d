"""Validated policy configurations (pydantic v2): one class per policy, one union.

``policy_config(name, params)`` validates a policy's parameters (one clear error line);
``cfg.build(seed)`` constructs it. The service's settings live in
:mod:`streaming_dpbandit.settings` (which imports this package, never the other way round).

Every name is imported on first use (PEP 562): ``CONFIGS`` (:mod:`.registry`) names every
policy without building a model, and validating FLIPHAT's parameters imports FLIPHAT's
configuration only, not the pydantic models of the other policies and of ``serve`` (start-up,
issue 24).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..utils.lazy import lazy_attribute

if TYPE_CHECKING:  # the real names for type checkers (imported lazily at run time)
    from .base import PolicyConfigBase, format_validation_error, parse_kv
    from .fliphat import FliphatConfig
    from .ldp import LDPGLBConfig, LDPGLOCConfig, LDPUCBConfig
    from .matroid import DPMatroidConfig, DPTSMatConfig, DPUCBMatConfig, MatroidConfig
    from .policies import (
        DPLinUCBConfig,
        GreedyConfig,
        LassoBanditConfig,
        LinUCBConfig,
        LinUCBDisjointConfig,
        PolicyConfig,
        PrivateLassoConfig,
        RandomConfig,
        SALassoConfig,
        TableConfig,
        THLassoConfig,
    )
    from .registry import CONFIGS, policy_config, validate_for_mode
    from .user_level import UserLevelConfig

#: Module of each public name of the package.
_MODULES = {
    "CONFIGS": "registry",
    "DPLinUCBConfig": "policies",
    "DPMatroidConfig": "matroid",
    "DPTSMatConfig": "matroid",
    "DPUCBMatConfig": "matroid",
    "FliphatConfig": "fliphat",
    "GreedyConfig": "policies",
    "LDPGLBConfig": "ldp",
    "LDPGLOCConfig": "ldp",
    "LDPUCBConfig": "ldp",
    "LassoBanditConfig": "policies",
    "LinUCBConfig": "policies",
    "LinUCBDisjointConfig": "policies",
    "MatroidConfig": "matroid",
    "PolicyConfig": "policies",
    "PolicyConfigBase": "base",
    "PrivateLassoConfig": "policies",
    "RandomConfig": "policies",
    "SALassoConfig": "policies",
    "THLassoConfig": "policies",
    "TableConfig": "policies",
    "UserLevelConfig": "user_level",
    "format_validation_error": "base",
    "parse_kv": "base",
    "policy_config": "registry",
    "validate_for_mode": "registry",
}


def __getattr__(name: str) -> Any:
    """A configuration name, imported from its module on first use."""
    value = lazy_attribute(__name__, _MODULES, name)
    globals()[name] = value  # later look-ups skip this function
    return value


__all__ = [
    "CONFIGS",
    "ConfigError",
    "DPLinUCBConfig",
    "DPMatroidConfig",
    "DPTSMatConfig",
    "DPUCBMatConfig",
    "FliphatConfig",
    "GreedyConfig",
    "LDPGLBConfig",
    "LDPGLOCConfig",
    "LDPUCBConfig",
    "LassoBanditConfig",
    "LinUCBConfig",
    "LinUCBDisjointConfig",
    "MatroidConfig",
    "PolicyConfig",
    "PolicyConfigBase",
    "PrivateLassoConfig",
    "RandomConfig",
    "SALassoConfig",
    "THLassoConfig",
    "TableConfig",
    "UserLevelConfig",
    "format_validation_error",
    "parse_kv",
    "policy_config",
    "validate_for_mode",
]
