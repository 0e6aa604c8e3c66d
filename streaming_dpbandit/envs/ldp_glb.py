"""The LDP-GLB paper's simulation environments (LDP-GLB spec §11, E1 and E2).

**E1, single-parameter** (``ldp-glb-single``; the authors' ``singleparam.py``): θ* = g/‖g‖ with
g ~ N(0, I_d), one per ``theta_seed``. Each round offers K independent N(0, I_d) vectors
normalised to the unit sphere (C_B = 1); the reward is noise-free, r = xᵀθ* (c_r = 1). The
optional GLM smoke variants draw Bernoulli(σ(xᵀθ*)) or Poisson(exp(xᵀθ*)) rewards.

**E2, multi-parameter** (``ldp-glb-multi``; ``multiparam.py``): K unit vectors θ*_1..θ*_K from
``theta_seed``. One context X_t per round, shared by the arms — Unif(S^{d−1}) (the paper's text,
``contexts="sphere"``) or N(0, I_d) unnormalised (the authors' code, ``contexts="gaussian"``) —
and the reward X_tᵀθ*_a + N(0, 0.05²). The per-arm context matrix repeats X_t K times, the
convention of the package's multi-parameter policies.
"""

from __future__ import annotations

import math

import numpy as np

from ..ldp.links import get_link
from .base import Environment

__all__ = ["LDPMultiParamEnv", "LDPSingleParamEnv", "unit_vectors"]


def unit_vectors(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Independent uniform unit vectors along the last axis, from a seed.

    >>> v = unit_vectors(0, (3, 4))
    >>> np.allclose(np.linalg.norm(v, axis=1), 1.0)
    True
    """
    g = np.random.default_rng([int(seed), 0x1D9]).standard_normal(shape)
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


def _check(name: str, v, low: int = 1) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")


def _random_regret(env: Environment, seed: int, n: int) -> float:
    """E[max_a μ_a − μ_random] by Monte Carlo over ``n`` rounds (fixed seed)."""
    X = env.contexts(np.random.default_rng([seed, 5]), n)
    mu = env.mean_rewards(X)
    return float((mu.max(axis=1) - mu.mean(axis=1)).mean())


class LDPSingleParamEnv(Environment):
    """E1: K unit-sphere segments per round, one unit θ*, noise-free linear rewards.

    Parameters
    ----------
    d, K
        Dimension (paper: 2) and arms (paper: 10).
    theta_seed
        Draws θ* (the reproduction uses one per repetition).
    rewards
        ``"linear"`` (noise-free, the paper), ``"bernoulli"`` (logistic link) or ``"poisson"``.

    Examples
    --------
    >>> env = LDPSingleParamEnv(d=2, K=10, theta_seed=3)
    >>> X = env.contexts(np.random.default_rng(0), 5)
    >>> X.shape, bool(np.allclose(np.linalg.norm(X, axis=2), 1.0))
    ((5, 10, 2), True)
    >>> mu = env.mean_rewards(X)
    >>> bool(np.allclose(env.rewards(mu, env.reward_noise(np.random.default_rng(1), 5)), mu))
    True
    """

    name = "ldp-glb-single"

    def __init__(self, d: int = 2, K: int = 10, theta_seed: int = 0, rewards: str = "linear"):
        _check("d", d)
        _check("K", K, 2)
        _check("theta_seed", theta_seed, 0)
        if rewards not in ("linear", "bernoulli", "poisson"):
            raise ValueError("rewards must be linear, bernoulli or poisson")
        self.d = d
        self.K = K
        self.theta_seed = theta_seed
        self.reward_model = rewards
        self.theta = unit_vectors(theta_seed, (d,))
        self.link = {"linear": "linear", "bernoulli": "logistic", "poisson": "poisson"}[rewards]

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        X = rng.standard_normal((n, self.K, self.d))
        X /= np.linalg.norm(X, axis=2, keepdims=True)
        return X

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        return get_link(self.link).mean(X @ self.theta)

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.reward_model == "linear":
            return np.zeros((n, self.K))
        return rng.random((n, self.K))  # uniforms: Bernoulli coins / Poisson inversion

    def rewards(self, mu: np.ndarray, noise: np.ndarray) -> np.ndarray:
        if self.reward_model == "linear":
            return mu + noise
        if self.reward_model == "bernoulli":
            return (noise < mu).astype(np.float64)
        from scipy import stats

        return stats.poisson.ppf(noise, mu)

    def random_regret_per_round(self) -> float:
        """E[max_a μ_a − μ_random] by Monte Carlo over 10⁶ rounds (fixed seed)."""
        return _random_regret(self, self.theta_seed, 1_000_000)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "d": self.d,
            "K": self.K,
            "theta_seed": self.theta_seed,
            "rewards": self.reward_model,
        }


class LDPMultiParamEnv(Environment):
    """E2: one shared context per round, K unknown unit vectors θ*_a, Gaussian reward noise.

    Parameters
    ----------
    d, K
        Dimension (paper: 20) and arms (paper: 3).
    contexts
        ``"sphere"`` (Unif(S^{d−1}), the paper) or ``"gaussian"`` (N(0, I_d), the authors' code).
    noise_sd
        Reward noise standard deviation (0.05).
    theta_seed
        Draws the θ*_a.

    Examples
    --------
    >>> env = LDPMultiParamEnv(d=4, K=3, theta_seed=1)
    >>> X = env.contexts(np.random.default_rng(0), 2)
    >>> X.shape, bool((X[:, 0] == X[:, 2]).all())          # the shared context, repeated
    ((2, 3, 4), True)
    >>> np.allclose(env.mean_rewards(X)[0], env.thetas @ X[0, 0])
    True
    """

    name = "ldp-glb-multi"

    def __init__(
        self,
        d: int = 20,
        K: int = 3,
        contexts: str = "sphere",
        noise_sd: float = 0.05,
        theta_seed: int = 0,
    ):
        _check("d", d)
        _check("K", K, 2)
        _check("theta_seed", theta_seed, 0)
        if contexts not in ("sphere", "gaussian"):
            raise ValueError("contexts must be 'sphere' or 'gaussian'")
        if not (isinstance(noise_sd, (int, float)) and noise_sd >= 0):
            raise ValueError("noise_sd must be a number >= 0")
        self.d = d
        self.K = K
        self.context_law = contexts
        self.noise_sd = float(noise_sd)
        self.theta_seed = theta_seed
        self.thetas = unit_vectors(theta_seed, (K, d))

    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        x = rng.standard_normal((n, self.d))
        if self.context_law == "sphere":
            x /= np.linalg.norm(x, axis=1, keepdims=True)
        return np.repeat(x[:, None, :], self.K, axis=1)

    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        return np.einsum("nkd,kd->nk", X, self.thetas)

    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.noise_sd * rng.standard_normal((n, self.K))

    def random_regret_per_round(self) -> float:
        return _random_regret(self, self.theta_seed, 200_000)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "d": self.d,
            "K": self.K,
            "contexts": self.context_law,
            "noise_sd": self.noise_sd,
            "theta_seed": self.theta_seed,
            "context_norm_mean": math.sqrt(self.d) if self.context_law == "gaussian" else 1.0,
        }
