"""The logged (behaviour) policy's own value: the mean logged reward."""

from __future__ import annotations

import numpy as np

from ...utils.arrays import FloatArray
from .base import MaybeArray, OffPolicyEstimator, Terms

__all__ = ["OnPolicy"]


class OnPolicy(OffPolicyEstimator):
    """V̂ = mean logged reward: the behaviour policy's on-policy value, the baseline every
    off-policy estimate is compared with.

    Examples
    --------
    >>> import numpy as np
    >>> est = OnPolicy(bootstrap=0)
    >>> est.update(np.array([0.0, 1.0, 1.0, 0.0]))
    >>> est.estimate().value
    0.5
    """

    name = "on-policy"
    uses_weights = False

    def terms(
        self, rewards: FloatArray, weights: MaybeArray, q_logged: MaybeArray, q_target: MaybeArray
    ) -> Terms:
        return rewards, np.ones_like(rewards)
