"""Sparsity-agnostic Lasso bandit (Oh, Iyengar & Zeevi, ICML 2021) at the PrivateLASSO spec's §6.

This is the foundation's :class:`~.lasso_bandit.LassoBandit` (greedy, uniform tie-break while
β = 0, all records kept, refits on all data) with the spec §6 profile:

* λ0 = 0.1 (≈ σ_noise·b_x; the FLIPHAT profile of ``lasso-bandit`` uses λ0 = 1);
* refits at n = 200, 400, … records (``lasso-bandit`` refits after rounds 201, 401, …), with
  λ_n = 2λ0·√((4·ln n + 2·ln d)/n) on (1/(2n))‖y − Zβ‖² + λ_n‖β‖₁, warm-started;
* records kept sparse (:class:`~..estimators.rowstore.RowStore`) and solved by a working-set Lasso,
  so that d = 10⁴–10⁵ fits in memory (``lasso-bandit`` keeps a dense d×d Gram);
* optional public clipping bounds, as for the private policies.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Annotated, Any, Self

import numpy as np

from ..estimators.rowstore import RowStore
from ..estimators.sparse_lasso import lasso_rows
from ..privacy.ledger import ReleaseRecord
from .lasso_bandit import LassoBandit
from .registry import register
from .th_lasso import ClippedRows
from .types import AtLeastOne, Gt, Positive

__all__ = ["SALassoBandit"]


@register
class SALassoBandit(ClippedRows, LassoBandit):
    """Sparsity-agnostic Lasso bandit, spec §6 profile (non-private ε = ∞ reference).

    Parameters
    ----------
    d
        Dimension.
    lambda0
        λ0 (0.1).
    refit_every
        Refit at n = k·refit_every records (200).
    clip_coord, clip_l2, reward_bound
        Optional public bounds; records are clipped to them.
    tol
        Relative duality-gap tolerance of the Lasso solver.
    seed
        Seeds the tie-break coins.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.envs import MarginEnv
    >>> env = MarginEnv(d=300)
    >>> pol = SALassoBandit(d=300, seed=0)
    >>> rng = np.random.default_rng(0)
    >>> while pol.t < 2000:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     n = min(pol.max_decide_batch(), 2000 - pol.t)
    ...     X = env.contexts(rng, n)
    ...     dec = pol.decide(X)
    ...     mu = env.mean_rewards(X)[np.arange(n), dec.arms]
    ...     pol.learn(X[np.arange(n), dec.arms], mu + env.reward_noise(rng, n)[:, 0], dec.rounds)
    >>> w = pol.coefficients
    >>> np.nonzero(np.abs(w) > 0.1)[0].tolist() == env.support.tolist(), pol.model_version
    (True, 9)

    """

    name = "sa-lasso"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4, "refit_every": 20}

    # copy kept (~ th_lasso.py __init__): River idiom, each constructor stores its own parameters
    def __init__(
        self,
        d: Annotated[int, Gt(1)],
        lambda0: Positive = 0.1,
        refit_every: AtLeastOne = 200,
        clip_coord: Positive | None = None,
        clip_l2: Positive | None = None,
        reward_bound: Positive | None = None,
        tol: Positive = 1e-6,
        seed: int | None = None,
    ):
        self.d = d
        self.lambda0 = lambda0
        self.refit_every = refit_every
        self.clip_coord = clip_coord
        self.clip_l2 = clip_l2
        self.reward_bound = reward_bound
        self.tol = tol
        self.seed = seed

    def _state(self) -> Self:
        if not hasattr(self, "_store"):
            if self.refit_every < 1:
                raise ValueError("refit_every must be >= 1")
            self._t = 0
            self._store = RowStore(self.d, exact=False)
            self._w = np.zeros(self.d)
            self._next_refit = self.refit_every
            self._version = 0
            self._counters = {"clipped_coords": 0, "clipped_norms": 0, "clipped_rewards": 0}
            self._coin_key()
        return self

    def lambda_n(self, n: int) -> float:
        """λ_n = 2λ0·√((4 ln n + 2 ln d)/n).

        >>> round(SALassoBandit(d=1000).lambda_n(200), 6)
        0.083676
        """
        return 2.0 * self.lambda0 * math.sqrt((4.0 * math.log(n) + 2.0 * math.log(self.d)) / n)

    def refit_due(self) -> bool:
        self._state()
        return self._t >= self._next_refit and self._store.count >= self._next_refit

    def refit(self) -> list[ReleaseRecord]:
        self._state()
        if not self.refit_due():
            return []
        _, Z, y = self._store.matrix()
        self._w = lasso_rows(Z, y, self.lambda_n(y.size), w0=self._w, tol=self.tol)
        self._next_refit += self.refit_every
        return self._refitted()

    def state_dict(self) -> dict[str, Any]:
        self._state()
        return {
            **self._state_header(),
            "store": self._store.state_dict(),
            "w": self._w,
            "next_refit": self._next_refit,
            "version": self._version,
            "counters": dict(self._counters),
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict[str, Any]) -> SALassoBandit:
        self._state()
        self._t = int(state["t"])
        self._store = RowStore.from_state_dict(state["store"])
        self._w = np.asarray(state["w"], dtype=np.float64)
        self._next_refit = int(state["next_refit"])
        self._version = int(state["version"])
        self._counters = dict(state["counters"])
        self._tie_key = int(state["tie_key"])
        return self
