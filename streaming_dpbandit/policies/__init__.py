"""Bandit policies, one per file, all sharing :class:`~.base.Policy`'s interface."""

from __future__ import annotations

from .base import DecisionBatch, Policy
from .dp_linucb import DPLinUCB
from .dpts_mat import DPTSMAT
from .dpucb_mat import DPUCBMAT
from .fliphat import FLIPHAT
from .greedy import GreedyRidge
from .lasso_bandit import LassoBandit
from .ldp_glb import LDPGLB
from .ldp_gloc import LDPGLOC
from .ldp_ucb import LDPUCB
from .linucb import LinUCB
from .linucb_disjoint import LinUCBDisjoint
from .matroid_base import MatroidPolicy, SlateBatch
from .matroid_baselines import OMM, CTSGaussian
from .private_lasso import PrivateLASSO
from .private_lasso_paper import PrivateLASSOPaper
from .random import RandomPolicy
from .sa_lasso import SALassoBandit
from .table import TablePolicy
from .th_lasso import THLassoBandit

#: Policies by registry name (the CLI's ``--policy``).
REGISTRY: dict[str, type[Policy]] = {
    FLIPHAT.name: FLIPHAT,
    RandomPolicy.name: RandomPolicy,
    LassoBandit.name: LassoBandit,
    LinUCB.name: LinUCB,
    LinUCBDisjoint.name: LinUCBDisjoint,
    GreedyRidge.name: GreedyRidge,
    DPLinUCB.name: DPLinUCB,
    PrivateLASSO.name: PrivateLASSO,
    THLassoBandit.name: THLassoBandit,
    SALassoBandit.name: SALassoBandit,
    LDPGLB.name: LDPGLB,
    LDPUCB.name: LDPUCB,
    LDPGLOC.name: LDPGLOC,
    TablePolicy.name: TablePolicy,
}

#: Slate (matroid) policies by registry name: they decide with ``decide_slates``, not
#: ``decide``; OMM and CTS-Gaussian are non-private, simulation-only baselines.
SLATE_REGISTRY: dict[str, type[MatroidPolicy]] = {
    DPUCBMAT.name: DPUCBMAT,
    DPTSMAT.name: DPTSMAT,
    OMM.name: OMM,
    CTSGaussian.name: CTSGaussian,
}

__all__ = [
    "DPTSMAT",
    "DPUCBMAT",
    "FLIPHAT",
    "OMM",
    "REGISTRY",
    "SLATE_REGISTRY",
    "CTSGaussian",
    "DPLinUCB",
    "DecisionBatch",
    "GreedyRidge",
    "LassoBandit",
    "LinUCB",
    "LinUCBDisjoint",
    "MatroidPolicy",
    "OneHotArms",
    "Policy",
    "PrivateLASSO",
    "PrivateLASSOPaper",
    "RandomPolicy",
    "SALassoBandit",
    "SlateBatch",
    "THLassoBandit",
    "TablePolicy",
]


def __getattr__(name: str):
    # OneHotArms subclasses River's (non-contextual) bandit Policy: importing it loads
    # river.bandit (≈ 1 s, scipy.stats), so it is imported on first use only.
    if name == "OneHotArms":
        from .multi_armed import OneHotArms

        return OneHotArms
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
