"""Bandit policies, one per file, all sharing :class:`~.base.Policy`'s interface."""

from .base import DecisionBatch, Policy
from .fliphat import FLIPHAT
from .lasso_bandit import LassoBandit
from .private_lasso import PrivateLASSO
from .private_lasso_paper import PrivateLASSOPaper
from .random import RandomPolicy
from .sa_lasso import SALassoBandit
from .th_lasso import THLassoBandit

#: Policies by registry name (the CLI's ``--policy``).
REGISTRY: dict[str, type[Policy]] = {
    FLIPHAT.name: FLIPHAT,
    RandomPolicy.name: RandomPolicy,
    LassoBandit.name: LassoBandit,
    PrivateLASSO.name: PrivateLASSO,
    THLassoBandit.name: THLassoBandit,
    SALassoBandit.name: SALassoBandit,
}

__all__ = [
    "FLIPHAT",
    "REGISTRY",
    "DecisionBatch",
    "LassoBandit",
    "Policy",
    "PrivateLASSO",
    "PrivateLASSOPaper",
    "RandomPolicy",
    "SALassoBandit",
    "THLassoBandit",
]
