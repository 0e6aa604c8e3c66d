"""Disjoint LinUCB: one ridge model per arm (Li, Chu, Langford & Schapire 2010, Alg. 1).

Arm a has its own V_a = reg·I + Σ_{rounds where a was chosen} x xᵀ and u_a; the score of arm a is
⟨θ̂_a, x_a⟩ + β_a‖x_a‖_{V_a⁻¹}, where x_a is the arm's feature vector (row a of the (K, d)
decision set; pass the same context K times for the classic shared-context setting). The number
of arms K is fixed (``n_arms``); arm identity is the position in the decision set.

``learn`` receives only (context, reward, round), so the policy remembers the arm it chose per
round in a ring buffer of ``pending_capacity`` rounds; feedback for an older round is dropped and
counted (``expired_feedback``).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import lapack

from ..estimators.ucb_model import oful_beta
from .base import DecisionBatch, Policy
from .linucb import decide_arms

__all__ = ["LinUCBDisjoint"]


class LinUCBDisjoint(Policy):
    """Per-arm ridge models with UCB scores, batched and vectorised over arms.

    Parameters
    ----------
    d
        Feature dimension.
    n_arms
        Number of arms K (every decision set has K rows).
    reg, beta, alpha, sigma, S, batch_size, ties, seed
        As in :class:`~.linucb.LinUCB` (the theoretical width is computed per arm).
    pending_capacity
        Rounds whose chosen arm is remembered for delayed feedback.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> thetas = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    >>> pol = LinUCBDisjoint(d=2, n_arms=3, beta=0.5, batch_size=4, seed=0)
    >>> while pol.t < 600:
    ...     if pol.refit_due():
    ...         _ = pol.refit()
    ...     ctx = rng.normal(size=(pol.max_decide_batch(), 2))
    ...     X = np.repeat(ctx[:, None, :], 3, axis=1)            # a shared context per round
    ...     dec = pol.decide(X)
    ...     r = np.einsum("bd,bd->b", ctx, thetas[dec.arms]) + 0.1 * rng.normal(size=len(ctx))
    ...     pol.learn(ctx, r, dec.rounds)
    >>> np.round(pol.coefficients, 1).tolist()
    [[1.0, 0.0], [-0.0, 1.0], [-1.0, 0.0]]

    """

    name = "linucb-disjoint"

    def __init__(
        self,
        d: int,
        n_arms: int,
        reg: float = 1.0,
        beta: float | None = None,
        alpha: float = 0.01,
        sigma: float = 1.0,
        S: float = 1.0,
        batch_size: int = 1,
        pending_capacity: int = 1 << 16,
        ties: str = "lowest",
        seed: int | None = None,
    ):
        self.d = d
        self.n_arms = n_arms
        self.reg = reg
        self.beta = beta
        self.alpha = alpha
        self.sigma = sigma
        self.S = S
        self.batch_size = batch_size
        self.pending_capacity = pending_capacity
        self.ties = ties
        self.seed = seed

    def _state(self):
        if not hasattr(self, "_G"):
            if self.d < 1 or self.n_arms < 1 or self.batch_size < 1 or self.pending_capacity < 1:
                raise ValueError("need d, n_arms, batch_size, pending_capacity >= 1")
            if self.reg <= 0 and self.beta is None:
                raise ValueError("reg must be > 0 for the theoretical width")
            K, d = self.n_arms, self.d
            self._t = 0
            self._since = 0
            self._version = 0
            self._G = np.broadcast_to(self.reg * np.eye(d), (K, d, d)).copy()
            self._u = np.zeros((K, d))
            self._ring_arm = np.zeros(self.pending_capacity, dtype=np.int32)
            self._ring_round = np.zeros(self.pending_capacity, dtype=np.int64)
            self._counters = {"rows_learned": 0, "expired_feedback": 0}
            self._coin_key()
            self._refresh()
        return self

    def _refresh(self) -> None:
        self._mG, self._mu = self._G.copy(), self._u.copy()
        self._build(self._mG, self._mu)

    def _build(self, G: np.ndarray, u: np.ndarray) -> None:
        K, d = self.n_arms, self.d
        C = np.linalg.cholesky(0.5 * (G + G.transpose(0, 2, 1)))
        Cinv = np.stack([lapack.dtrtri(C[a], lower=1)[0] for a in range(K)])
        z = np.einsum("kij,kj->ki", Cinv, u)
        self._theta = np.einsum("kji,kj->ki", Cinv, z)  # V⁻¹u = C⁻ᵀ C⁻¹ u
        self._proj = Cinv.transpose(0, 2, 1).copy()  # x @ proj[a] = C_a⁻¹ x
        logdet = 2.0 * np.log(np.diagonal(C, axis1=1, axis2=2)).sum(axis=1)
        if self.beta is None:
            self._width = np.array(
                [oful_beta(ld, d, self.reg, self.alpha, self.sigma, self.S) for ld in logdet]
            )
        else:
            self._width = np.full(K, float(self.beta))

    @property
    def model_version(self) -> int:
        return self._state()._version

    @property
    def coefficients(self) -> np.ndarray:
        """θ̂_a of every arm (K, d)."""
        return self._state()._theta.copy()

    @property
    def counters(self) -> dict:
        return dict(self._state()._counters)

    def _save_decide_extra(self):
        return self._ring_arm.copy(), self._ring_round.copy()

    def _restore_decide_extra(self, saved) -> None:
        self._ring_arm, self._ring_round = saved

    def refit_due(self) -> bool:
        return self._state()._since >= self.batch_size

    def max_decide_batch(self) -> int:
        return self.batch_size - self._state()._since

    def refit(self) -> list:
        self._state()
        if self._since < self.batch_size:
            return []
        self._refresh()
        self._since = 0
        self._version += 1
        return []

    def decide(self, X, event_ids=None, mask=None) -> DecisionBatch:
        self._state()
        X = self._check_batch(X, self.d)
        B, K, _ = X.shape
        if K != self.n_arms:
            raise ValueError(f"expected {self.n_arms} arms, got {K}")
        Xk = X.transpose(1, 0, 2)  # (K, B, d)
        mean = np.einsum("kbd,kd->bk", Xk, self._theta)
        Y = np.matmul(Xk, self._proj)  # (K, B, d): C_a⁻¹ x
        width = np.sqrt(np.einsum("kbd,kbd->bk", Y, Y))
        scores = mean + width * self._width
        t0 = self._t
        rounds = np.arange(t0 + 1, t0 + B + 1, dtype=np.int64)
        arms, prop = decide_arms(self, scores, mask, rounds, event_ids)
        slot = rounds % self.pending_capacity
        self._ring_arm[slot] = arms
        self._ring_round[slot] = rounds
        self._t = t0 + B
        self._since += B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), self._version)

    def learn(self, contexts, rewards, rounds, ids=None) -> None:
        self._state()
        X = np.asarray(contexts, dtype=np.float64)
        y = np.asarray(rewards, dtype=np.float64).reshape(-1)
        rounds = np.asarray(rounds, dtype=np.int64).reshape(-1)
        if X.shape != (y.size, self.d) or rounds.shape != y.shape:
            raise ValueError("learn expects contexts (B, d), rewards (B,) and rounds (B,)")
        if y.size == 0:
            return
        if rounds.max() > self._t or rounds.min() < 1:
            raise ValueError("learn() got a round that was never decided")
        slot = rounds % self.pending_capacity
        known = self._ring_round[slot] == rounds
        self._counters["expired_feedback"] += int(y.size - np.count_nonzero(known))
        arms = self._ring_arm[slot]
        for a in np.unique(arms[known]).tolist():
            sel = known & (arms == a)
            Xa = X[sel]
            self._G[a] += Xa.T @ Xa
            self._u[a] += Xa.T @ y[sel]
        self._counters["rows_learned"] += int(np.count_nonzero(known))

    def state_dict(self) -> dict:
        self._state()
        live = self._ring_round > max(0, self._t - self.pending_capacity)
        return {
            "policy": self.name,
            "params": self._get_params(),
            "t": self._t,
            "since": self._since,
            "version": self._version,
            "G": self._G.copy(),
            "u": self._u.copy(),
            "model_G": self._mG,
            "model_u": self._mu,
            "pending_rounds": self._ring_round[live].copy(),
            "pending_arms": self._ring_arm[live].copy(),
            "counters": dict(self._counters),
            "tie_key": self._tie_key,
        }

    def load_state_dict(self, state: dict) -> LinUCBDisjoint:
        self._state()
        self._t = int(state["t"])
        self._since = int(state["since"])
        self._version = int(state["version"])
        self._G = np.asarray(state["G"], dtype=np.float64).copy()
        self._u = np.asarray(state["u"], dtype=np.float64).copy()
        self._mG = np.asarray(state["model_G"], dtype=np.float64).copy()
        self._mu = np.asarray(state["model_u"], dtype=np.float64).copy()
        r = np.asarray(state["pending_rounds"], dtype=np.int64)
        self._ring_round[:] = 0
        self._ring_round[r % self.pending_capacity] = r
        self._ring_arm[r % self.pending_capacity] = np.asarray(state["pending_arms"])
        self._counters = dict(state["counters"])
        self._tie_key = int(state["tie_key"])
        self._build(self._mG, self._mu)
        return self
