"""Validated policy configurations (pydantic v2): one class per policy, one union.

``policy_config(name, params)`` validates a policy's parameters (one clear error line);
``cfg.build(seed)`` constructs it. The service's settings live in
:mod:`streaming_dpbandit.settings`; their names are still importable from here.
"""

from __future__ import annotations

from ..errors import ConfigError
from .base import PolicyConfigBase, format_validation_error, parse_kv
from .ldp import LDPGLBConfig, LDPGLOCConfig, LDPUCBConfig
from .matroid import DPMatroidConfig, DPTSMatConfig, DPUCBMatConfig, MatroidConfig
from .policies import (
    CONFIGS,
    DPLinUCBConfig,
    FliphatConfig,
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
    policy_config,
    validate_for_mode,
)
from .user_level import UserLevelConfig


def __getattr__(name: str):
    """The service settings' names (:mod:`streaming_dpbandit.settings`), imported on first use."""
    from .. import settings

    if name in settings.__all__:
        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
