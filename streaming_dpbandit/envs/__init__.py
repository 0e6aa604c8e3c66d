"""Simulation environments of the source papers (exactly as their specs describe).

The environment modules are imported on first use (``REGISTRY["fliphat-paper"]``,
``from streaming_dpbandit.envs import FliphatPaperEnv``), so that one simulation does not import
every environment's dependencies.
"""

from __future__ import annotations

from typing import Any

from ..utils.lazy import LazyRegistry, lazy_attribute
from .base import Environment

#: Module of each public name of the package.
_MODULES = {
    "FliphatPaperEnv": "fliphat_paper",
    "LDPMultiParamEnv": "ldp_glb",
    "LDPSingleParamEnv": "ldp_glb",
    "MarginEnv": "private_lasso",
    "MatroidEnvironment": "matroid_env",
    "MatroidSyntheticEnv": "dp_matroid",
    "MovieLensMatroidEnv": "movielens",
    "NoMarginEnv": "private_lasso",
    "ShariffSheffetEnv": "shariff_sheffet",
    "load_movielens_1m": "movielens",
}

#: Environments by registry name (the CLI's ``--env``).
REGISTRY: LazyRegistry[Any] = LazyRegistry(
    __name__,
    {
        "fliphat-paper": ("fliphat_paper", "FliphatPaperEnv"),
        "dp-linucb-paper": ("shariff_sheffet", "ShariffSheffetEnv"),
        "privatelasso-m": ("private_lasso", "MarginEnv"),
        "privatelasso-nm": ("private_lasso", "NoMarginEnv"),
        "ldp-glb-single": ("ldp_glb", "LDPSingleParamEnv"),
        "ldp-glb-multi": ("ldp_glb", "LDPMultiParamEnv"),
    },
)

#: Semi-bandit (slate) environments over a matroid; the MovieLens instance is built from
#: user-supplied files (``MovieLensMatroidEnv``) and is not constructible by name.
MATROID_REGISTRY: LazyRegistry[Any] = LazyRegistry(
    __name__, {"dp-matroid-synthetic": ("dp_matroid", "MatroidSyntheticEnv")}
)


def __getattr__(name: str):
    return lazy_attribute(__name__, _MODULES, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_MODULES])


__all__ = [
    "MATROID_REGISTRY",
    "REGISTRY",
    "Environment",
    "FliphatPaperEnv",
    "LDPMultiParamEnv",
    "LDPSingleParamEnv",
    "MarginEnv",
    "MatroidEnvironment",
    "MatroidSyntheticEnv",
    "MovieLensMatroidEnv",
    "NoMarginEnv",
    "ShariffSheffetEnv",
    "load_movielens_1m",
]
