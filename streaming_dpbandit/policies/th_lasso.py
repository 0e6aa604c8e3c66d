"""Thresholded Lasso bandit (Ariu, Abe & Proutière, ICML 2022), non-private (PrivateLASSO spec §6).

Greedy on the support S of a thresholded Lasso, refitted every ``refit_every`` records::

    λ ← λ0·√(2·ln n·ln d / n)
    β^L ← argmin_β (1/(2n))‖y − Zβ‖² + λ‖β‖₁                (warm start)
    S0 ← {i : |β^L_i| > 4λ} ;  S ← {i ∈ S0 : |β^L_i| > 4λ·√|S0|}
    β ← 0 ; β_S ← least squares of y on Z_S (minimum-norm if rank-deficient)

Decisions: uniform while S = ∅, else random argmax of ⟨X_{t,k,S}, β_S⟩. Records are clipped to the
optional public bounds (the ε = ∞ reference keeps the private policies' inputs) and kept sparse.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterator
from typing import Annotated, Any, Self

import numpy as np

from ..estimators.rowstore import RowStore
from ..estimators.sparse_lasso import lasso_rows, least_squares_rows
from ..privacy.ledger import ReleaseRecord
from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from .base import DecisionBatch, Policy
from .private_lasso import clip_rows, random_argmax
from .registry import register
from .types import AtLeastOne, Gt, Positive

__all__ = ["ClippedRows", "THLassoBandit"]


class ClippedRows(Policy):
    """What the non-private Lasso references share (TH-Lasso, SA-Lasso): learned rows are
    clipped to the optional public bounds (each clip counted) and kept in a row store for the
    next refit."""

    clip_coord: float | None
    clip_l2: float | None
    reward_bound: float | None
    _counters: dict[str, int]
    _store: RowStore

    @abc.abstractmethod
    def _state(self) -> Self:
        """Build the state on first use (the row store, the counters); returns the policy."""

    @property
    def counters(self) -> dict[str, Any]:
        return dict(self._state()._counters)

    def _clip(self, X: FloatArray, y: FloatArray) -> tuple[FloatArray, FloatArray]:
        if self.clip_coord is not None or self.clip_l2 is not None:
            X, nc, nr = clip_rows(
                X,
                self.clip_coord if self.clip_coord is not None else np.inf,
                self.clip_l2 if self.clip_l2 is not None else np.inf,
            )
            self._counters["clipped_coords"] += nc
            self._counters["clipped_norms"] += nr
        if self.reward_bound is not None:
            yc = np.clip(y, -self.reward_bound, self.reward_bound)
            self._counters["clipped_rewards"] += int(np.count_nonzero(yc != y))
            y = yc
        return X, y

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        X, y, rounds = self._learn_rows(contexts, rewards, rounds)
        X, y = self._clip(X, y)
        self._store.add(rounds, X, y)


@register
class THLassoBandit(ClippedRows):
    """Thresholded Lasso bandit (non-private ε = ∞ reference).

    Parameters
    ----------
    d
        Dimension.
    lambda0
        λ0 of λ = λ0√(2 ln n ln d / n) (0.02, the authors' scripts).
    refit_every
        Refit after every this many records (1, the paper; 200 in the spec's experiments).
    first_refit
        No refit before this many records (2).
    clip_coord, clip_l2, reward_bound
        Optional public bounds; records are clipped to them (clips are counted).
    tol
        Relative duality-gap tolerance of the Lasso solver.
    seed
        Seeds the tie-break coins.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.envs import MarginEnv
    >>> env = MarginEnv(d=300)
    >>> pol = THLassoBandit(d=300, refit_every=100, seed=0)
    >>> rng = np.random.default_rng(0)
    >>> while pol.t < 2000:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     n = min(pol.max_decide_batch(), 2000 - pol.t)
    ...     X = env.contexts(rng, n)
    ...     dec = pol.decide(X)
    ...     mu = env.mean_rewards(X)[np.arange(n), dec.arms]
    ...     pol.learn(X[np.arange(n), dec.arms], mu + env.reward_noise(rng, n)[:, 0], dec.rounds)
    >>> S, beta = pol.coefficients
    >>> S.tolist() == env.support.tolist(), bool(np.allclose(beta, env.theta[S], atol=0.02))
    (True, True)

    """

    name = "th-lasso"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "refit_every": 5}

    def __init__(
        self,
        d: Annotated[int, Gt(1)],
        lambda0: Positive = 0.02,
        refit_every: AtLeastOne = 1,
        first_refit: AtLeastOne = 2,
        clip_coord: Positive | None = None,
        clip_l2: Positive | None = None,
        reward_bound: Positive | None = None,
        tol: Positive = 1e-6,
        seed: int | None = None,
    ):
        self.d = d
        self.lambda0 = lambda0
        self.refit_every = refit_every
        self.first_refit = first_refit
        self.clip_coord = clip_coord
        self.clip_l2 = clip_l2
        self.reward_bound = reward_bound
        self.tol = tol
        self.seed = seed

    def _state(self) -> Self:
        if not hasattr(self, "_store"):
            if self.refit_every < 1 or self.first_refit < 1:
                raise ValueError("refit_every and first_refit must be >= 1")
            self._t = 0
            self._store = RowStore(self.d, exact=False)
            self._beta_lasso = np.zeros(self.d)
            self._S = np.zeros(0, dtype=np.int64)
            self._beta = np.zeros(0)
            self._version = 0
            self._fitted_n = 0
            self._counters = {"clipped_coords": 0, "clipped_norms": 0, "clipped_rewards": 0}
            self._coin_key()
        return self

    @property
    def coefficients(self) -> tuple[IntArray, FloatArray]:
        """(S, β_S): the thresholded support and its least-squares coefficients."""
        self._state()
        return self._S.copy(), self._beta.copy()

    def lambda_n(self, n: int) -> float:
        """λ = λ0·√(2 ln n ln d / n).

        >>> round(THLassoBandit(d=1000).lambda_n(200), 6)
        0.0121
        """
        return self.lambda0 * math.sqrt(2.0 * math.log(n) * math.log(self.d) / n)

    def _next_refit(self) -> int:
        n = max(self._fitted_n + 1, self.first_refit)
        return -(-n // self.refit_every) * self.refit_every

    def refit_due(self) -> bool:
        self._state()
        return self._store.count >= self._next_refit() and self._t >= self._next_refit()

    def max_decide_batch(self) -> int:
        self._state()
        if self.refit_due():
            return 0
        return max(1, self._next_refit() - self._t)

    def refit(self) -> list[ReleaseRecord]:
        self._state()
        if not self.refit_due():
            return []
        _, Z, y = self._store.matrix()
        n = y.size
        lam = self.lambda_n(n)
        self._beta_lasso = lasso_rows(Z, y, lam, w0=self._beta_lasso, tol=self.tol)
        a = np.abs(self._beta_lasso)
        S0 = np.nonzero(a > 4.0 * lam)[0]
        S = S0[a[S0] > 4.0 * lam * math.sqrt(S0.size)] if S0.size else S0
        self._S = S
        self._beta = least_squares_rows(Z, y, S)[S]
        self._fitted_n = n
        return self._refitted()

    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X, rounds = self._decide_batch(X)
        B, K, _ = X.shape
        scores = X[:, :, self._S] @ self._beta if self._S.size else np.zeros((B, K))
        if mask is not None:
            scores = np.where(np.asarray(mask, dtype=bool), scores, -np.inf)
        arms, prop = random_argmax(scores, self._coins(rounds, event_ids))
        self._t += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "store": self._store.state_dict(),
            "beta_lasso": self._beta_lasso,
            "S": self._S,
            "beta": self._beta,
            "version": self._version,
            "fitted_n": self._fitted_n,
            "counters": dict(self._counters),
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> THLassoBandit:
        self._state()
        self._t = int(state["t"])
        self._store = RowStore.from_state_dict(state["store"])
        self._beta_lasso = np.asarray(state["beta_lasso"], dtype=np.float64)
        self._S = np.asarray(state["S"], dtype=np.int64)
        self._beta = np.asarray(state["beta"], dtype=np.float64)
        self._version = int(state["version"])
        self._fitted_n = int(state["fitted_n"])
        self._counters = dict(state["counters"])
        self._tie_key = int(state["tie_key"])
        return self
