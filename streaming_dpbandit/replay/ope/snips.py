"""Self-normalised inverse propensity scoring."""

from __future__ import annotations

import numpy as np

from ...utils.arrays import FloatArray
from .base import MaybeArray, OffPolicyEstimator, Terms

__all__ = ["SNIPS"]


class SNIPS(OffPolicyEstimator):
    """V̂_SNIPS = Σ w_i r_i / Σ w_i: a ratio estimator, consistent, usually far less variable
    than IPS; its standard error is the delta method's.

    Examples
    --------
    >>> import numpy as np
    >>> est = SNIPS(bootstrap=0)
    >>> est.update(np.array([1.0, 0.0, 1.0, 0.0]), np.array([3.0, 1.0, 0.0, 0.0]))
    >>> est.estimate().value
    0.75
    """

    name = "snips"

    def terms(
        self, rewards: FloatArray, weights: MaybeArray, q_logged: MaybeArray, q_target: MaybeArray
    ) -> Terms:
        w = np.asarray(weights, dtype=np.float64)
        return w * rewards, w
