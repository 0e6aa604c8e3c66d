"""Inverse propensity scoring (Horvitz–Thompson)."""

from __future__ import annotations

import numpy as np

from ...utils.arrays import FloatArray
from .base import MaybeArray, OffPolicyEstimator, Terms

__all__ = ["IPS"]


class IPS(OffPolicyEstimator):
    """V̂_IPS = (1/n) Σ w_i r_i, unbiased when π_b(a|x) > 0 wherever π_e(a|x) > 0.

    Examples
    --------
    >>> import numpy as np
    >>> est = IPS(bootstrap=0)
    >>> est.update(np.array([1.0, 0.0, 1.0, 0.0]), np.array([2.0, 2.0, 0.0, 0.0]))
    >>> e = est.estimate()
    >>> e.value, e.n, round(e.se, 4)
    (0.5, 4, 0.5)
    """

    name = "ips"

    def terms(
        self, rewards: FloatArray, weights: MaybeArray, q_logged: MaybeArray, q_target: MaybeArray
    ) -> Terms:
        w = np.asarray(weights, dtype=np.float64)
        return w * rewards, np.ones_like(rewards)
