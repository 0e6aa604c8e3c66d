"""Simulation environments of the source papers (exactly as their specs describe)."""

from .base import Environment
from .dp_matroid import MatroidSyntheticEnv
from .fliphat_paper import FliphatPaperEnv
from .ldp_glb import LDPMultiParamEnv, LDPSingleParamEnv
from .matroid_env import MatroidEnvironment
from .movielens import MovieLensMatroidEnv, load_movielens_1m
from .private_lasso import MarginEnv, NoMarginEnv
from .shariff_sheffet import ShariffSheffetEnv

#: Environments by registry name (the CLI's ``--env``).
REGISTRY: dict[str, type[Environment]] = {
    FliphatPaperEnv.name: FliphatPaperEnv,
    ShariffSheffetEnv.name: ShariffSheffetEnv,
    MarginEnv.name: MarginEnv,
    NoMarginEnv.name: NoMarginEnv,
    LDPSingleParamEnv.name: LDPSingleParamEnv,
    LDPMultiParamEnv.name: LDPMultiParamEnv,
}

#: Semi-bandit (slate) environments over a matroid; the MovieLens instance is built from
#: user-supplied files (``MovieLensMatroidEnv``) and is not constructible by name.
MATROID_REGISTRY: dict[str, type[MatroidEnvironment]] = {
    MatroidSyntheticEnv.name: MatroidSyntheticEnv,
}

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
