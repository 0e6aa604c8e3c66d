"""Bandit policies, one per file, all sharing :class:`~.base.Policy`'s interface."""

from .base import DecisionBatch, Policy
from .fliphat import FLIPHAT
from .lasso_bandit import LassoBandit
from .random import RandomPolicy

#: Policies by registry name (the CLI's ``--policy``).
REGISTRY: dict[str, type[Policy]] = {
    FLIPHAT.name: FLIPHAT,
    RandomPolicy.name: RandomPolicy,
    LassoBandit.name: LassoBandit,
}

__all__ = ["FLIPHAT", "REGISTRY", "DecisionBatch", "LassoBandit", "Policy", "RandomPolicy"]
