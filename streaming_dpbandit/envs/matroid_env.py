"""Semi-bandit environments over a matroid: a slate is a basis, every served item is observed.

Round t draws the whole reward vector w_t ∈ [0, 1]^L (coordinates independent, i.i.d. over
rounds for the synthetic instance); the learner observes w_t(e) for the served items only. The
metrics use the true means w̄ (DP-matroid spec §2): pseudo-regret
R_n = Σ_t (f(A*, w̄) − Σ_{e∈A^t} w̄(e)) and the expected per-round return.
"""

from __future__ import annotations

import abc

import numpy as np

from ..matroids import Matroid, greedy_basis

__all__ = ["MatroidEnvironment"]


class MatroidEnvironment(abc.ABC):
    """A matroid, true item means, and a reward sampler.

    Subclasses set ``matroid`` and ``means`` and implement :meth:`draw`.
    """

    name: str = "matroid-env"
    matroid: Matroid
    means: np.ndarray

    @abc.abstractmethod
    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Reward vectors of n rounds, (n, L), values in [0, 1]."""

    @property
    def n_items(self) -> int:
        return self.matroid.n_items

    @property
    def K(self) -> int:
        return self.matroid.rank

    def optimal_slate(self) -> np.ndarray:
        """A* = the greedy on w̄ (unique when the means have no ties that matter)."""
        return greedy_basis(self.matroid, self.means, np.random.default_rng(0))

    def optimal_return(self) -> float:
        """f(A*, w̄) = Σ_{e∈A*} w̄(e)."""
        return float(self.means[self.optimal_slate()].sum())

    def describe(self) -> dict:
        return {
            "name": self.name,
            "L": self.n_items,
            "K": self.K,
            "matroid": self.matroid.kind,
            "loops": sorted(self.matroid.loops),
            "optimal_return": self.optimal_return(),
        }
