"""Simulation environments of the source papers (exactly as their specs describe)."""

from .base import Environment
from .fliphat_paper import FliphatPaperEnv
from .ldp_glb import LDPMultiParamEnv, LDPSingleParamEnv
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

__all__ = [
    "REGISTRY",
    "Environment",
    "FliphatPaperEnv",
    "LDPMultiParamEnv",
    "LDPSingleParamEnv",
    "MarginEnv",
    "NoMarginEnv",
    "ShariffSheffetEnv",
]
