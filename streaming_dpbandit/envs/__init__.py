"""Simulation environments of the source papers (exactly as their specs describe)."""

from .base import Environment
from .fliphat_paper import FliphatPaperEnv
from .private_lasso import MarginEnv, NoMarginEnv
from .shariff_sheffet import ShariffSheffetEnv

#: Environments by registry name (the CLI's ``--env``).
REGISTRY: dict[str, type[Environment]] = {
    FliphatPaperEnv.name: FliphatPaperEnv,
    ShariffSheffetEnv.name: ShariffSheffetEnv,
    MarginEnv.name: MarginEnv,
    NoMarginEnv.name: NoMarginEnv,
}

__all__ = [
    "REGISTRY",
    "Environment",
    "FliphatPaperEnv",
    "MarginEnv",
    "NoMarginEnv",
    "ShariffSheffetEnv",
]
