"""The direct method: the reward model's value of the evaluated policy."""

from __future__ import annotations

import numpy as np

from ...utils.arrays import FloatArray
from .base import MaybeArray, OffPolicyEstimator, Terms

__all__ = ["DM"]


class DM(OffPolicyEstimator):
    """V̂_DM = (1/n) Σ_a π_e(a|x_i) q̂(x_i, a) over the logged contexts.

    Low variance, but biased whenever q̂ is: its interval covers only the sampling variance of
    the contexts, *conditional on the fitted reward model* (the label says so).

    Examples
    --------
    >>> import numpy as np
    >>> est = DM(bootstrap=0)
    >>> est.update(np.zeros(3), q_logged=np.zeros(3), q_target=np.array([0.2, 0.4, 0.6]))
    >>> round(est.estimate().value, 6)
    0.4
    """

    name = "dm"
    needs_model = True
    uses_weights = False
    label = "interval conditional on the reward model: its bias is not covered"

    def terms(
        self, rewards: FloatArray, weights: MaybeArray, q_logged: MaybeArray, q_target: MaybeArray
    ) -> Terms:
        q = np.asarray(q_target, dtype=np.float64)
        return q, np.ones_like(q)
