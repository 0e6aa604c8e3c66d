"""Simulation environments: streams of per-arm contexts with known mean rewards."""

from __future__ import annotations

import abc

import numpy as np

__all__ = ["Environment"]


class Environment(abc.ABC):
    """A contextual-bandit environment with known expected rewards (for pseudo-regret).

    Subclasses draw contexts (n, K, d) and reward noise (n, K) from the generators they are
    given, so that a simulation can feed the *same* stream to several policies (common random
    numbers) and reproduce it from a seed.
    """

    name: str = "env"
    K: int
    d: int

    @abc.abstractmethod
    def contexts(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw n rounds of per-arm contexts, shape (n, K, d)."""

    @abc.abstractmethod
    def mean_rewards(self, X: np.ndarray) -> np.ndarray:
        """Expected reward of every arm, shape (n, K)."""

    @abc.abstractmethod
    def reward_noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Reward noise for every arm, shape (n, K) (only the chosen arm's is observed)."""

    def rewards(self, mu: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Observed rewards from means and the draws of :meth:`reward_noise` (default μ + noise).

        Environments whose reward law is not additive (e.g. ±1 rewards with P(+1) = (1 + μ)/2)
        override this and return coins from :meth:`reward_noise`.
        """
        return mu + noise

    def random_regret_per_round(self) -> float | None:
        """Expected pseudo-regret per round of the uniform random policy, if known."""
        return None

    def describe(self) -> dict:
        return {"name": self.name}
