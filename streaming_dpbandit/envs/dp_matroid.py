"""The thesis's synthetic matroid bandit (Chandak 2023, Sec. 6.1.1, Table 6.1; spec §11.1).

A linear matroid over ℝ³ with seven items (vectors from Neel & Neudauer 2009); rewards are
independent Bernoulli(w̄(e)) draws for every item and round, of which the served ones are seen.

======  ==========  ======       Facts (spec §11.6): L = 7, K = 3; e7 is a loop (a zero
item    vector      w̄(e)         vector: never playable despite its mean 0.70); e6 is parallel
======  ==========  ======       to e1; 13 bases; A* = {e1, e2, e3} with optimal return 2.15;
e1      (1, 0, 0)   0.80         the runner-up {e1, e2, e5} returns 1.85 (minimum gap 0.30).
e2      (0, 1, 0)   0.75
e3      (0, 0, 1)   0.60
e4      (1, 0, 1)   0.20
e5      (0, 1, 1)   0.30
e6      (2, 0, 0)   0.40
e7      (0, 0, 0)   0.70
======  ==========  ======

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import numpy as np

from ..matroids import LinearMatroid
from .matroid_env import MatroidEnvironment

__all__ = ["SYNTHETIC_MEANS", "SYNTHETIC_VECTORS", "MatroidSyntheticEnv"]

SYNTHETIC_VECTORS = (
    (1, 0, 0),
    (0, 1, 0),
    (0, 0, 1),
    (1, 0, 1),
    (0, 1, 1),
    (2, 0, 0),
    (0, 0, 0),
)
SYNTHETIC_MEANS = (0.80, 0.75, 0.60, 0.20, 0.30, 0.40, 0.70)


class MatroidSyntheticEnv(MatroidEnvironment):
    """The synthetic instance of the thesis (see the module docstring).

    Parameters
    ----------
    exact
        Use exact rational arithmetic for the linear matroid (same answers; slower).

    Examples
    --------
    >>> env = MatroidSyntheticEnv()
    >>> env.K, env.n_items, sorted(env.matroid.loops)
    (3, 7, [6])
    >>> sorted(env.optimal_slate().tolist()), round(env.optimal_return(), 10)
    ([0, 1, 2], 2.15)
    >>> env.draw(np.random.default_rng(0), 2).shape
    (2, 7)

    """

    name = "dp-matroid-synthetic"

    def __init__(self, exact: bool = False):
        self.exact = exact
        self.matroid = LinearMatroid(SYNTHETIC_VECTORS, exact=exact)
        self.means = np.array(SYNTHETIC_MEANS, dtype=np.float64)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return (rng.random((n, self.n_items)) < self.means).astype(np.float64)
