"""Sparsity-agnostic Lasso bandit (Oh, Iyengar & Zeevi 2021), the non-private baseline.

FLIPHAT spec §13.2, exactly: greedy argmax_a x_a(t)ᵀβ̂ with β̂ = 0 (uniform tie-break) until
the first refit; every (chosen context, observed reward) row is kept (no forgetting); refits
after rounds t = 201, 401, 601, … on all t rows so far minimise
(1/(2t))‖y − Xw‖² + λ_t‖w‖₁ without intercept, λ_t = 2λ₀√((4 ln t + 2 ln d)/t), λ₀ = 1,
with scikit-learn's coordinate-descent tolerance 1e-3; the new β̂ is used from round t + 1.
Rows are kept as Gram statistics (XᵀX, Xᵀy, yᵀy), which give the same Lasso solution.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Self

import numpy as np

from ..estimators.lasso import lasso_gram
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import ArrayLike, FloatArray, MaybeArray
from .base import DecisionBatch, Policy, argmax_random_ties
from .registry import register
from .types import AtLeastOne, Positive, PositiveInt

__all__ = ["LassoBandit"]


@register
class LassoBandit(Policy):
    """Greedy Lasso bandit refitted every ``refit_every`` rounds on all data (non-private).

    Parameters
    ----------
    d
        Context dimension.
    lambda0
        λ₀ of the penalty schedule.
    refit_every
        Refit period; refits happen after rounds 1 + k·refit_every.
    tol, max_iter
        Coordinate-descent tolerance and sweep limit (scikit-learn's meaning).
    seed
        Seeds the tie-break coins.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> beta = np.zeros(10); beta[:2] = 1.0
    >>> pol = LassoBandit(d=10, seed=0)
    >>> while pol.t < 1000:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     n = min(pol.max_decide_batch(), 1000 - pol.t)
    ...     X = rng.normal(size=(n, 3, 10))
    ...     dec = pol.decide(X)
    ...     x = X[np.arange(n), dec.arms]
    ...     pol.learn(x, x @ beta + 0.1 * rng.normal(size=n), dec.rounds)
    >>> np.round(pol.coefficients[:3], 1).tolist()
    [0.7, 0.7, 0.0]

    """

    name = "lasso-bandit"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "refit_every": 20}

    def __init__(
        self,
        d: PositiveInt,
        lambda0: Positive = 1.0,
        refit_every: AtLeastOne = 200,
        tol: Positive = 1e-3,
        max_iter: AtLeastOne = 1000,
        seed: int | None = None,
    ):
        self.d = d
        self.lambda0 = lambda0
        self.refit_every = refit_every
        self.tol = tol
        self.max_iter = max_iter
        self.seed = seed

    def _state(self) -> Self:
        if not hasattr(self, "_G"):
            self._t = 0
            self._n = 0
            self._G = np.zeros((self.d, self.d))
            self._h = np.zeros(self.d)
            self._yty = 0.0
            self._rows = 0
            self._w = np.zeros(self.d)
            self._next_refit = self.refit_every + 1
            self._version = 0
            self._coin_key()
        return self

    @property
    def coefficients(self) -> FloatArray:
        return self._state()._w.copy()

    def refit_due(self) -> bool:
        self._state()
        return self._t >= self._next_refit

    def refit_reads_through(self) -> int:
        self._state()
        return min(self._t, self._next_refit)

    def max_decide_batch(self) -> int:
        self._state()
        if self._t >= self._next_refit:
            return 0
        return self._next_refit - self._t

    def refit(self) -> list[ReleaseRecord]:
        self._state()
        if not self.refit_due():
            return []
        t = self._rows  # = the round count when every decision got its reward
        if t > 1:
            lam = 2.0 * self.lambda0 * math.sqrt((4.0 * math.log(t) + 2.0 * math.log(self.d)) / t)
            self._w = lasso_gram(self._G, self._h, self._yty, t, lam, self.tol, self.max_iter)
        self._next_refit += self.refit_every
        return self._refitted()

    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B = X.shape[0]
        nz = np.nonzero(self._w)[0]
        scores = X[:, :, nz] @ self._w[nz] if nz.size else np.zeros(X.shape[:2])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        arms, prop = argmax_random_ties(scores, self._coins(rounds, event_ids))
        self._t += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        X, y = self._learn_xy(contexts, rewards)
        self._G += X.T @ X
        self._h += X.T @ y
        self._yty += float(y @ y)
        self._rows += y.size

    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "G": self._G,
            "h": self._h,
            "yty": self._yty,
            "rows": self._rows,
            "w": self._w,
            "next_refit": self._next_refit,
            "version": self._version,
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LassoBandit:
        self._state()
        self._t = int(state["t"])
        self._G = np.asarray(state["G"], dtype=np.float64)
        self._h = np.asarray(state["h"], dtype=np.float64)
        self._yty = float(state["yty"])
        self._rows = int(state["rows"])
        self._w = np.asarray(state["w"], dtype=np.float64)
        self._next_refit = int(state["next_refit"])
        self._version = int(state["version"])
        self._tie_key = int(state["tie_key"])
        return self
