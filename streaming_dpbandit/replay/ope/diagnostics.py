"""Importance-weight diagnostics."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...utils.arrays import ArrayLike
from ..moments import RatioMoments, normal_quantile

__all__ = ["WeightDiagnostics"]


class WeightDiagnostics:
    """Streaming summary of importance weights w_i = π_e / π_b.

    Reports the effective sample size ESS = (Σw)² / Σw² (Kish), the mean weight with its
    interval — it must be 1 in expectation when the propensities are right and π_b covers π_e,
    so an interval excluding 1 flags wrong propensities or missing support —, the largest weight,
    the share of zero weights (events the evaluated policy would not have chosen), and per
    position the same mean. The warning fires at a stricter level (``alarm_level``) than the
    intervals, so that honest logs rarely raise it.

    Examples
    --------
    >>> import numpy as np
    >>> diag = WeightDiagnostics()
    >>> diag.update(np.array([4.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0]))
    >>> s = diag.summary()
    >>> s["ess"], s["max_weight"], s["zero_share"], s["mean_weight"]
    (2.0, 4.0, 0.75, 1.0)
    """

    def __init__(self, level: float = 0.95, alarm_level: float = 0.999):
        self.level = level
        self.alarm_level = alarm_level
        self._m = RatioMoments()
        self.sum_w = 0.0
        self.sum_w2 = 0.0
        self.max_w = 0.0
        self.min_w = math.inf
        self.zeros = 0

    def update(self, weights: ArrayLike, positions: ArrayLike | None = None) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.size == 0:
            return
        self._m.update(w, np.ones_like(w), positions)
        self.sum_w += float(w.sum())
        self.sum_w2 += float(np.dot(w, w))
        self.max_w = max(self.max_w, float(w.max()))
        self.min_w = min(self.min_w, float(w.min()))
        self.zeros += int(np.count_nonzero(w == 0))

    def summary(self) -> dict[str, Any]:
        n = self._m.count
        est = self._m.estimate(self.level)
        ess = self.sum_w**2 / self.sum_w2 if self.sum_w2 > 0 else 0.0
        z = normal_quantile(self.alarm_level)
        flag = None
        if n >= 2 and math.isfinite(est["se"]) and est["se"] > 0:
            if abs(est["value"] - 1.0) > z * est["se"]:
                flag = (
                    f"mean weight {est['value']:.3f} differs from 1 beyond its "
                    f"{self.alarm_level:.1%} interval: wrong propensities, or the log does not "
                    "cover the policy"
                )
        return {
            "events": n,
            "ess": ess,
            "ess_share": ess / n if n else 0.0,
            "mean_weight": est["value"],
            "mean_weight_ci": est["ci"],
            "max_weight": self.max_w if n else math.nan,
            "min_weight": self.min_w if n else math.nan,
            "zero_share": self.zeros / n if n else math.nan,
            "per_position_mean_weight": [p["value"] for p in self._m.per_position(self.level)],
            "warning": flag,
        }
