"""The environment of Shariff & Sheffet's experiments (DP-LinUCB spec §12.1, authors' code).

θ* is a unit vector (S = 1). Every round offers K = d² *fresh* unit actions: in the frame where
θ* = e₁, action j is a_j = [h_j; √(1 − h_j²)·w_j] with w_j uniform on the unit sphere of R^{d−1}
and h_j = 2u_j − 1, u_j ~ Beta((d−1)/2, (d−1)/2) truncated to [(1 − 0.75)/2, (1 + 0.75 − Δ)/2]
(the law of one coordinate of a uniform unit vector, truncated to h ∈ [−0.75, 0.75 − Δ]). One
action, chosen uniformly, is optimal: h = 0.75 (its orthogonal part rescaled to √(1 − 0.75²)).
So every action has norm 1 (L = 1), mean reward μ_j = ⟨θ*, a_j⟩ = h_j, the optimal mean is 0.75
and the gap Δ separates it from every other action. Rewards are bounded, y = ±1 with
P(y = 1) = (1 + μ)/2 (B̃ = 1, σ = 1), or Gaussian y = μ + N(0, 1) (non-private runs only).

Sampling: the truncated Beta is drawn by rejection from numpy's Beta sampler (the same law as the
spec's inverse-CDF recipe, ~100× faster than ``betaincinv``). ``theta_seed=None`` (default) uses
the spec's allowed shortcut θ* = e₁ (LinUCB is rotation-equivariant and every noise law here is
orthogonally invariant); an integer draws θ* uniformly on the sphere once and rotates the
actions by an orthogonal Q with Q e₁ = θ*.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import numpy as np

from .base import Environment

__all__ = ["ShariffSheffetEnv"]

OPTIMAL_PROJECTION = 0.75


class ShariffSheffetEnv(Environment):
    """Unit actions around a hidden unit θ*, optimal projection 0.75, gap Δ.

    Parameters
    ----------
    d
        Dimension (≥ 2).
    K
        Actions per round (default d²).
    gap
        Δ ≥ 0 between the optimal mean 0.75 and every other action's mean.
    rewards
        ``"bounded"`` (±1, the private runs) or ``"gaussian"`` (μ + N(0, 1)).
    theta_seed
        ``None``: θ* = e₁ (shortcut); an integer: θ* uniform on the sphere from that seed.

    Examples
    --------
    >>> import numpy as np
    >>> env = ShariffSheffetEnv(d=4, gap=0.1)
    >>> X = env.contexts(np.random.default_rng(0), 1000)
    >>> X.shape, bool(np.allclose(np.linalg.norm(X, axis=2), 1.0))
    ((1000, 16, 4), True)
    >>> mu = env.mean_rewards(X)
    >>> bool(np.all(mu.max(axis=1) == 0.75)), bool(np.all(np.sort(mu, 1)[:, -2] <= 0.65 + 1e-12))
    (True, True)
    >>> y = env.rewards(mu[:, 0], env.reward_noise(np.random.default_rng(1), 1000)[:, 0])
    >>> sorted(set(y.tolist()))
    [-1.0, 1.0]

    """

    name = "dp-linucb-paper"

    def __init__(
        self,
        d: int = 5,
        K: int | None = None,
        gap: float = 0.1,
        rewards: str = "bounded",
        theta_seed: int | None = None,
    ):
        self.d = d
        self.K = d * d if K is None else K
        self.gap = gap
        self.reward_model = rewards
        self.theta_seed = theta_seed
        self._validate()
        self._theta = np.zeros(d)
        self._theta[0] = 1.0
        self._Q = None
        if theta_seed is not None:
            g = np.random.default_rng(theta_seed).standard_normal(d)
            self._theta = g / np.linalg.norm(g)
            Q, _ = np.linalg.qr(self._theta[:, None], mode="complete")
            if Q[:, 0] @ self._theta < 0:
                Q[:, 0] *= -1.0
            self._Q = Q

    def _validate(self) -> None:
        for name, v in (("d", self.d), ("K", self.K)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{name} must be an integer, got {v!r}")
        if self.d < 2 or self.K < 2:
            raise ValueError("need d >= 2 and K >= 2")
        if not (isinstance(self.gap, (int, float)) and 0 <= self.gap < 1.5):
            raise ValueError("gap must be a number in [0, 1.5)")
        if self.reward_model not in ("bounded", "gaussian"):
            raise ValueError("rewards must be 'bounded' or 'gaussian'")

    # -- public facts ----------------------------------------------------------------------------
    @property
    def theta(self) -> np.ndarray:
        return self._theta.copy()

    @property
    def bounds(self) -> dict:
        """L, S, B̃ and σ of the environment (spec §12.1)."""
        if self.reward_model == "bounded":
            return {"L": 1.0, "S": 1.0, "B_tilde": 1.0, "sigma": 1.0}
        return {"L": 1.0, "S": 1.0, "B_tilde": None, "sigma": 1.0}

    def _h_range(self) -> tuple[float, float]:
        return -OPTIMAL_PROJECTION, OPTIMAL_PROJECTION - self.gap

    def _truncated_h(self, rng: np.random.Generator, n: int) -> np.ndarray:
        a = (self.d - 1) / 2.0
        lo, hi = self._h_range()
        out = np.empty(n)
        filled = 0
        while filled < n:
            need = n - filled
            h = 2.0 * rng.beta(a, a, size=int(need * 1.3) + 16) - 1.0
            h = h[(h >= lo) & (h <= hi)][:need]
            out[filled : filled + h.size] = h
            filled += h.size
        return out

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        d, K = self.d, self.K
        h = self._truncated_h(rng, n * K).reshape(n, K)
        best = rng.integers(0, K, size=n)
        h[np.arange(n), best] = OPTIMAL_PROJECTION
        w = rng.standard_normal((n, K, d - 1))
        w /= np.linalg.norm(w, axis=2, keepdims=True)
        X = np.empty((n, K, d))
        X[:, :, 0] = h
        X[:, :, 1:] = w * np.sqrt(1.0 - h * h)[:, :, None]
        if self._Q is not None:
            X = X @ self._Q.T
        return X

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        if self._Q is None:
            return X[..., 0].copy()
        return X @ self._theta

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.reward_model == "bounded":
            return rng.random((n, self.K))  # coins: y = +1 iff coin < (1 + μ)/2
        return rng.standard_normal((n, self.K))

    def rewards(self, mu: np.ndarray, noise: np.ndarray) -> np.ndarray:
        if self.reward_model == "bounded":
            return np.where(noise < 0.5 * (1.0 + mu), 1.0, -1.0)
        return mu + noise

    def mean_suboptimal_projection(self) -> float:
        """E[h] of a non-optimal action (truncated, rescaled Beta)."""
        from scipy import integrate

        lo, hi = self._h_range()
        p = (self.d - 3) / 2.0
        dens = lambda x: (1.0 - x * x) ** p  # noqa: E731
        num = integrate.quad(lambda x: x * dens(x), lo, hi)[0]
        return num / integrate.quad(dens, lo, hi)[0]

    def random_regret_per_round(self) -> float:
        """Expected pseudo-regret of the uniform policy: 0.75 − E[mean of a random action]."""
        K = self.K
        return OPTIMAL_PROJECTION - ((K - 1) * self.mean_suboptimal_projection() + 0.75) / K

    def describe(self) -> dict:
        return {
            "name": self.name,
            "d": self.d,
            "K": self.K,
            "gap": self.gap,
            "rewards": self.reward_model,
            "theta_seed": self.theta_seed,
            "optimal_mean": OPTIMAL_PROJECTION,
        }
