"""A cross-fitted ridge reward model q̂(x, a, p) for the direct and doubly robust methods.

q̂(x_i, a, p) = ⟨θ, x_{i,a}⟩ + γ_p: a linear model on the policy's per-arm features plus a
per-position intercept (slots of a slate differ in click rates), fitted by ridge regression on
the logged (features of the logged arm, position, reward). Two folds by event order (even /
odd events of the log): the model that scores an event was fitted on the other fold only, so
DR keeps its unbiasedness and its variance estimate (cross-fitting, as in double machine
learning). Fitting reads the log once and keeps only the (d + P)² sufficient statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .batch import LoggedBatch

__all__ = ["RidgeRewardModel"]


class RidgeRewardModel:
    """Cross-fitted ridge regression of rewards on per-arm features and positions.

    Parameters
    ----------
    reg
        Ridge penalty λ (on θ and γ).

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.replay.batch import LoggedBatch
    >>> from streaming_dpbandit.replay.contexts import DenseContexts
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(4000, 3, 2)); a = rng.integers(0, 3, 4000)
    >>> r = X[np.arange(4000), a] @ np.array([1.0, -2.0]) + 0.1 * rng.normal(size=4000)
    >>> b = LoggedBatch(np.arange(4000), a, r, np.full(4000, 1 / 3),
    ...                 np.zeros(4000, dtype=np.int64), DenseContexts(X))
    >>> m = RidgeRewardModel(); m.learn(b, offset=0); _ = m.fit()
    >>> np.round(m.theta, 1).tolist()
    [[1.0, -2.0], [1.0, -2.0]]
    >>> round(m.summary()["r2_out_of_fold"], 2)
    1.0
    """

    def __init__(self, reg: float = 1.0):
        self.reg = reg
        self._G: FloatArray | None = None
        self._u: FloatArray | None = None
        self._yy = np.zeros(2)
        self._y = np.zeros(2)
        self._n = np.zeros(2)
        self._P = 0
        self.d: int | None = None
        self.theta: FloatArray | None = None
        self.gamma: FloatArray | None = None

    def _dim(self) -> int:
        if self.d is None:
            raise ValueError("the reward model has seen no data")
        return self.d

    def _features(self, rows: FloatArray, positions: IntArray, P: int) -> FloatArray:
        onehot = np.zeros((rows.shape[0], P))
        onehot[np.arange(rows.shape[0]), positions] = 1.0
        return np.hstack([rows, onehot])

    def learn(self, batch: LoggedBatch, offset: int) -> None:
        """Add a chunk; ``offset`` is the log index of its first event (fixes the folds)."""
        rows = batch.contexts.rows(batch.actions)
        pos = batch.positions
        P = max(self._P, int(pos.max()) + 1)
        if self._G is None or self._u is None:
            self.d = d = rows.shape[1]
            self._G = np.zeros((2, d + P, d + P))
            self._u = np.zeros((2, d + P))
        elif P > self._P:
            d = self._dim()
            G = np.zeros((2, d + P, d + P))
            u = np.zeros((2, d + P))
            k = d + self._P
            G[:, :k, :k] = self._G
            u[:, :k] = self._u
            self._G, self._u = G, u
        self._P = P
        Z = self._features(rows, pos, P)
        y = batch.rewards
        fold = (offset + np.arange(len(batch))) % 2
        for f in (0, 1):
            sel = fold == f
            Zf, yf = Z[sel], y[sel]
            self._G[f] += Zf.T @ Zf
            self._u[f] += Zf.T @ yf
            self._yy[f] += float(yf @ yf)
            self._y[f] += float(yf.sum())
            self._n[f] += int(sel.sum())

    def fit(self) -> RidgeRewardModel:
        """Solve each fold's ridge problem; the model for fold f is fitted on fold 1 − f."""
        if self._G is None or self._u is None:
            raise ValueError("the reward model has seen no data")
        k = self._G.shape[1]
        sol = np.stack(
            [np.linalg.solve(self._G[f] + self.reg * np.eye(k), self._u[f]) for f in (0, 1)]
        )
        self._coef: FloatArray = sol[
            ::-1
        ].copy()  # coefficients that score fold f: fitted on the other
        self.theta = self._coef[:, : self.d]
        self.gamma = self._coef[:, self.d :]
        return self

    def summary(self) -> dict[str, Any]:
        """Out-of-fold fit: mean squared error and R² (vs each fold's own mean)."""
        sse = 0.0
        sst = 0.0
        for f in (0, 1):
            c = self._coef[f]
            assert self._G is not None and self._u is not None  # set before _coef
            G, u = self._G[f], self._u[f]
            sse += float(self._yy[f] - 2 * c @ u + c @ G @ c)
            if self._n[f]:
                sst += float(self._yy[f] - self._y[f] ** 2 / self._n[f])
        n = float(self._n.sum())
        return {
            "model": "ridge on per-arm features + position intercepts, 2-fold cross-fitted",
            "reg": self.reg,
            "rows": int(n),
            "mse_out_of_fold": sse / n if n else float("nan"),
            "r2_out_of_fold": 1 - sse / sst if sst > 0 else float("nan"),
        }

    def _coef_for(self, offset: int, B: int) -> FloatArray:
        return self._coef[(offset + np.arange(B)) % 2]

    def predict_arms(self, batch: LoggedBatch, arms: ArrayLike, offset: int) -> FloatArray:
        """q̂(x_i, arms_i, p_i) with each event's out-of-fold model."""
        rows = batch.contexts.rows(arms)
        c = self._coef_for(offset, len(batch))
        pos = np.minimum(batch.positions, self._P - 1)
        d = self._dim()
        q: FloatArray = np.einsum("bd,bd->b", rows, c[:, :d]) + c[np.arange(len(batch)), d + pos]
        return q

    def predict_all(self, batch: LoggedBatch, offset: int) -> FloatArray:
        """q̂(x_i, a, p_i) for every arm (B, K)."""
        c = self._coef_for(offset, len(batch))
        pos = np.minimum(batch.positions, self._P - 1)
        d = self._dim()
        q = batch.contexts.project(c[:, :d])
        out: FloatArray = q + c[np.arange(len(batch)), d + pos][:, None]
        return out
