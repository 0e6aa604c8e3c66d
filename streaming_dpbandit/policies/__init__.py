"""Bandit policies, one per file, all sharing :class:`~.base.Policy`'s interface."""

from .base import DecisionBatch, Policy
from .dp_linucb import DPLinUCB
from .fliphat import FLIPHAT
from .greedy import GreedyRidge
from .lasso_bandit import LassoBandit
from .ldp_glb import LDPGLB
from .ldp_gloc import LDPGLOC
from .ldp_ucb import LDPUCB
from .linucb import LinUCB
from .linucb_disjoint import LinUCBDisjoint
from .multi_armed import OneHotArms
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

__all__ = [
    "FLIPHAT",
    "LDPGLB",
    "LDPGLOC",
    "LDPUCB",
    "REGISTRY",
    "DPLinUCB",
    "DecisionBatch",
    "GreedyRidge",
    "LassoBandit",
    "LinUCB",
    "LinUCBDisjoint",
    "OneHotArms",
    "Policy",
    "PrivateLASSO",
    "PrivateLASSOPaper",
    "RandomPolicy",
    "SALassoBandit",
    "THLassoBandit",
    "TablePolicy",
]
