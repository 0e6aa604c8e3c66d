"""The logged (behaviour) policy's own value: the mean logged reward."""

from __future__ import annotations

import numpy as np

from ...utils.arrays import ArrayLike, FloatArray
from .base import OffPolicyEstimator

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
        self,
        rewards: FloatArray,
        weights: ArrayLike | None,
        q_logged: ArrayLike | None,
        q_target: ArrayLike | None,
    ) -> tuple[FloatArray, FloatArray]:
        return rewards, np.ones_like(rewards)
