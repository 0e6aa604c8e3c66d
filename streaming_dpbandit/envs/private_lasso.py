"""The synthetic environments of the PrivateLASSO spec (§12.1): Env-M, Env-NM and Env-S.

θ. The support S* is a uniform s0-subset of [d]; θ_i = ±U[0.5, 1] with independent signs, then
rescaled to ‖θ‖₂ = 1 (C_θ = 1). θ is drawn once per environment from ``theta_seed`` so that every
repetition and every policy sees the same parameter. Reward noise is U[−√3σ, √3σ].

Base features
    ``dense``: x ~ U[−1, 1]^d (b_x = 1, B_x = √d).
    ``sparse``: each support coordinate is active with probability 1/2, plus m0 = 3 distinct
    non-support coordinates drawn uniformly; active values are ±1 (b_x = 1, B_x = √(s0 + m0)).

Env-M(base) (:class:`MarginEnv`, ``privatelasso-m``): K = 10 i.i.d. arms, σ = 0.1,
C_r = √s0 + √3σ. With the sparse base the gaps take finitely many values (a positive minimum
gap: the margin condition holds); with the dense base they have a bounded density.

Env-NM(base) (:class:`NoMarginEnv`, ``privatelasso-nm``): K = 2, σ = 0.5; X_1 ~ base and
X_2 = X_1 + g·θ/‖θ‖² + w with g = ±κ_min^U (U ~ U[0, 1], κ_min = 1e−4: a log-uniform gap
magnitude, so P(|gap| ≤ κ) = ln(κ/κ_min)/ln(1/κ_min) violates the margin condition) and
w = z − (⟨z,θ⟩/‖θ‖²)θ, z_i ~ U[−0.5, 0.5] on S* (0 elsewhere), so w ⊥ θ.

Env-S is Env-M(sparse) over a grid of d (the dimension experiments).

Every environment reports :meth:`public_bounds` (b_x, B_x, C_r, C_θ) under the PrivateLASSO
parameter names; contexts and rewards never exceed them, so clipping never triggers.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import math

import numpy as np

from .base import Environment

__all__ = ["MarginEnv", "NoMarginEnv", "draw_theta"]

BASES = ("sparse", "dense")
THETA_SEED = 20240206  # arXiv:2402.03737 was posted on 6 Feb 2024
RANDOM_REGRET_ROUNDS = 1_000_000


def draw_theta(d: int, s0: int, seed: int) -> np.ndarray:
    """θ with a uniform s0-subset support, entries ±U[0.5, 1], rescaled to ‖θ‖₂ = 1.

    >>> th = draw_theta(50, 5, 1)
    >>> int(np.count_nonzero(th)), round(float(np.linalg.norm(th)), 12)
    (5, 1.0)
    """
    if not 1 <= s0 <= d:
        raise ValueError("need 1 <= s0 <= d")
    rng = np.random.default_rng([seed, d, s0])
    support = np.sort(rng.choice(d, size=s0, replace=False))
    vals = rng.uniform(0.5, 1.0, size=s0) * rng.choice([-1.0, 1.0], size=s0)
    theta = np.zeros(d)
    theta[support] = vals / np.linalg.norm(vals)
    return theta


def _check_int(name: str, v) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {v!r}")


class _SparseLinearEnv(Environment):
    """Shared machinery: θ, the base feature draws, bounds and rewards."""

    m0 = 3
    base: str
    s0: int
    sigma: float
    theta_seed: int

    def _keep(self, d: int, base: str, s0: int, K: int, sigma: float, theta_seed: int) -> None:
        """Store the shared parameters (the subclasses' constructors) and check them."""
        self.d = d
        self.base = base
        self.s0 = s0
        self.K = K
        self.sigma = sigma
        self.theta_seed = theta_seed
        self._validate()

    def public_bounds(self) -> dict[str, float]:
        raise NotImplementedError

    def _validate(self) -> None:
        for name in ("d", "s0", "K", "theta_seed"):
            _check_int(name, getattr(self, name))
        if self.base not in BASES:
            raise ValueError(f"base must be one of {BASES}, got {self.base!r}")
        if not 1 <= self.s0 <= self.d:
            raise ValueError("need 1 <= s0 <= d")
        if self.base == "sparse" and self.d - self.s0 < 2 * self.m0:
            raise ValueError(f"the sparse base needs d >= s0 + {2 * self.m0}")
        if self.K < 2:
            raise ValueError("need at least K = 2 arms")
        if not self.sigma >= 0:
            raise ValueError("need sigma >= 0")

    @property
    def theta(self) -> np.ndarray:
        th = getattr(self, "_theta", None)
        if th is None:
            th = self._theta = draw_theta(self.d, self.s0, self.theta_seed)
        return th

    @property
    def support(self) -> np.ndarray:
        """S*, the true support (ascending)."""
        return np.nonzero(self.theta)[0]

    @property
    def b_max(self) -> float:
        """‖θ‖₁ (an oracle value; the public bound is √s0·C_θ)."""
        return float(np.abs(self.theta).sum())

    def _base_l2(self) -> float:
        return math.sqrt(self.d) if self.base == "dense" else math.sqrt(self.s0 + self.m0)

    def _base(self, rng: np.random.Generator, m: int) -> np.ndarray:
        """m base feature vectors (m, d)."""
        d = self.d
        if self.base == "dense":
            return rng.uniform(-1.0, 1.0, size=(m, d))
        X = np.zeros((m, d))
        S = self.support
        act = rng.random((m, S.size)) < 0.5
        sgn = rng.choice(np.array([-1.0, 1.0]), size=(m, S.size))
        X[:, S] = act * sgn
        others = np.setdiff1d(np.arange(d), S, assume_unique=True)
        picks = rng.integers(0, others.size, size=(m, self.m0))
        while True:  # distinct picks per row (collisions are rare; redraw those rows)
            srt = np.sort(picks, axis=1)
            bad = np.any(srt[:, 1:] == srt[:, :-1], axis=1)
            if not bad.any():
                break
            picks[bad] = rng.integers(0, others.size, size=(int(bad.sum()), self.m0))
        rows = np.repeat(np.arange(m), self.m0)
        X[rows, others[picks.ravel()]] = rng.choice(np.array([-1.0, 1.0]), size=m * self.m0)
        return X

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        S = self.support
        return X[..., S] @ self.theta[S]

    def records(self, rng: np.random.Generator, m: int):
        """m records (x, r) of uniformly random arms, as (CSR m × d, rewards): offline harnesses.

        Sparse base: built without a dense m × d array (m = 2^21 rows at d = 10⁴ is cheap).
        """
        from scipy import sparse

        if self.base == "dense":
            X = self._base(rng, m)
            y = X[:, self.support] @ self.theta[self.support]
            h = math.sqrt(3.0) * self.sigma
            return sparse.csr_matrix(X), y + rng.uniform(-h, h, size=m)
        S = self.support
        act = rng.random((m, S.size)) < 0.5
        sgn = rng.choice(np.array([-1.0, 1.0]), size=(m, S.size))
        others = np.setdiff1d(np.arange(self.d), S, assume_unique=True)
        picks = rng.integers(0, others.size, size=(m, self.m0))
        while True:
            srt = np.sort(picks, axis=1)
            bad = np.any(srt[:, 1:] == srt[:, :-1], axis=1)
            if not bad.any():
                break
            picks[bad] = rng.integers(0, others.size, size=(int(bad.sum()), self.m0))
        vals_o = rng.choice(np.array([-1.0, 1.0]), size=(m, self.m0))
        cols = np.concatenate([np.broadcast_to(S, (m, S.size)), others[picks]], axis=1)
        vals = np.concatenate([act * sgn, vals_o], axis=1)
        X = sparse.csr_matrix(
            (vals.ravel(), cols.ravel(), np.arange(0, cols.size + 1, cols.shape[1])),
            shape=(m, self.d),
        )
        X.eliminate_zeros()
        X.sort_indices()
        h = math.sqrt(3.0) * self.sigma
        y = (act * sgn) @ self.theta[S] + rng.uniform(-h, h, size=m)
        return X, y

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        h = math.sqrt(3.0) * self.sigma
        return rng.uniform(-h, h, size=(n, self.K))

    def describe(self) -> dict:
        return {
            "name": self.name,
            "base": self.base,
            "d": self.d,
            "s0": self.s0,
            "K": self.K,
            "sigma": self.sigma,
            "theta_seed": self.theta_seed,
            "support": self.support.tolist(),
            "public_bounds": self.public_bounds(),
        }


class MarginEnv(_SparseLinearEnv):
    """Env-M(base): K i.i.d. arms with margin (spec §12.1); Env-S is its sparse form over d.

    Parameters
    ----------
    d
        Dimension.
    base
        ``"sparse"`` (default) or ``"dense"``.
    s0
        Sparsity of θ (5).
    K
        Arms (10).
    sigma
        Noise level: the noise is U[−√3σ, √3σ] (σ = 0.1).
    theta_seed
        Seed of the fixed θ.

    Examples
    --------
    >>> import numpy as np
    >>> env = MarginEnv(d=1000)
    >>> X = env.contexts(np.random.default_rng(0), 4)
    >>> X.shape, int(np.count_nonzero(X[0, 0])) <= 8
    ((4, 10, 1000), True)
    >>> {k: round(v, 4) for k, v in env.public_bounds().items()}
    {'clip_coord': 1.0, 'clip_l2': 2.8284, 'reward_bound': 2.4093, 'theta_bound': 1.0}

    """

    name = "privatelasso-m"

    def __init__(
        self,
        d: int = 1000,
        base: str = "sparse",
        s0: int = 5,
        K: int = 10,
        sigma: float = 0.1,
        theta_seed: int = THETA_SEED,
    ):
        self._keep(d, base, s0, K, sigma, theta_seed)

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self._base(rng, n * self.K).reshape(n, self.K, self.d)

    def public_bounds(self) -> dict:
        return {
            "clip_coord": 1.0,
            "clip_l2": self._base_l2(),
            "reward_bound": math.sqrt(self.s0) + math.sqrt(3.0) * self.sigma,
            "theta_bound": 1.0,
        }

    def min_gap(self) -> float:
        """The smallest positive gap |⟨X_k − X_j, θ⟩| of the sparse base (the margin's size).

        Gaps are Σ_i c_i θ_i over S* with c_i ∈ {−2, …, 2}; for θ_i = ±U[0.5, 1] some of the
        5^s0 combinations nearly cancel, so the minimum is typically 10⁻⁵–10⁻³.

        >>> MarginEnv(d=1000).min_gap() < 1e-4
        True
        """
        if self.base != "sparse":
            raise ValueError("dense features have gaps with a density (no minimum gap)")
        import itertools

        t = self.theta[self.support]
        C = np.array(list(itertools.product(range(-2, 3), repeat=t.size)), dtype=np.float64)
        g = np.abs(C @ t)
        return float(g[g > 1e-12].min())

    def random_regret_per_round(self) -> float:
        """E[max_k ⟨X_k,θ⟩] − E[⟨X_random,θ⟩] by Monte Carlo over 10⁶ rounds (fixed seed)."""
        val = getattr(self, "_rr", None)
        if val is None:
            rng = np.random.default_rng([self.theta_seed, self.d, 7])
            th = self.theta[self.support]
            total = 0.0
            n_done = 0
            while n_done < RANDOM_REGRET_ROUNDS:
                m = min(100_000, RANDOM_REGRET_ROUNDS - n_done)
                if self.base == "dense":
                    U = rng.uniform(-1.0, 1.0, size=(m, self.K, th.size))
                else:
                    U = (rng.random((m, self.K, th.size)) < 0.5) * rng.choice(
                        np.array([-1.0, 1.0]), size=(m, self.K, th.size)
                    )
                mu = U @ th
                total += float((mu.max(axis=1) - mu.mean(axis=1)).sum())
                n_done += m
            val = self._rr = total / RANDOM_REGRET_ROUNDS
        return val


class NoMarginEnv(_SparseLinearEnv):
    """Env-NM(base): two arms whose gap has a log-uniform magnitude (no margin; spec §12.1).

    Parameters
    ----------
    d, base, s0, theta_seed
        As for :class:`MarginEnv`.
    K
        Must be 2.
    sigma
        Noise level (0.5).
    kappa_min
        Smallest gap magnitude κ_min (1e−4).

    Examples
    --------
    >>> import numpy as np
    >>> env = NoMarginEnv(d=200)
    >>> X = env.contexts(np.random.default_rng(0), 1000)
    >>> gap = env.mean_rewards(X) @ np.array([-1.0, 1.0])
    >>> bool(np.all(np.abs(gap) <= 1.0)), bool(np.all(np.abs(gap) >= 1e-4 - 1e-12))
    (True, True)
    >>> round(env.random_regret_per_round(), 5)
    0.05428

    """

    name = "privatelasso-nm"

    def __init__(
        self,
        d: int = 1000,
        base: str = "sparse",
        s0: int = 5,
        K: int = 2,
        sigma: float = 0.5,
        kappa_min: float = 1e-4,
        theta_seed: int = THETA_SEED,
    ):
        self.kappa_min = kappa_min
        self._keep(d, base, s0, K, sigma, theta_seed)
        if K != 2:
            raise ValueError("Env-NM has exactly K = 2 arms")
        if not 0 < kappa_min < 1:
            raise ValueError("need 0 < kappa_min < 1")

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        th = self.theta
        S = self.support
        X1 = self._base(rng, n)
        g = self.kappa_min ** rng.random(n) * rng.choice(np.array([-1.0, 1.0]), size=n)
        z = rng.uniform(-0.5, 0.5, size=(n, S.size))
        tS = th[S]
        w = z - np.outer(z @ tS / (tS @ tS), tS)
        X2 = X1.copy()
        X2[:, S] += np.outer(g / (tS @ tS), tS) + w
        return np.stack([X1, X2], axis=1)

    def public_bounds(self) -> dict:
        r = math.sqrt(self.s0)
        return {
            "clip_coord": 2.0 + 0.5 * (1.0 + r),
            "clip_l2": self._base_l2() + 1.0 + 0.5 * r,
            "reward_bound": r + 1.0 + math.sqrt(3.0) * self.sigma,
            "theta_bound": 1.0,
        }

    def random_regret_per_round(self) -> float:
        """E|g|/2 = (1 − κ_min)/(2 ln(1/κ_min)) (exact)."""
        k = self.kappa_min
        return (1.0 - k) / (2.0 * math.log(1.0 / k))

    def describe(self) -> dict:
        return {**super().describe(), "kappa_min": self.kappa_min}
