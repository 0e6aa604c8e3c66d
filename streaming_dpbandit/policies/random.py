"""Uniform random policy: the ε → 0 end of the privacy–utility trade-off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..utils.arrays import ArrayLike, MaybeArray
from .base import DecisionBatch, Policy
from .registry import register
from .types import PositiveInt

__all__ = ["RandomPolicy"]


@register
class RandomPolicy(Policy):
    """Pick an arm uniformly at random (propensity 1/K), learn nothing.

    Parameters
    ----------
    d
        Context dimension (checked, otherwise unused).
    seed
        Seeds the coins (``None``: OS entropy).

    Examples
    --------
    >>> import numpy as np
    >>> pol = RandomPolicy(d=2, seed=3)
    >>> dec = pol.decide(np.zeros((1000, 4, 2)))
    >>> sorted(set(dec.arms.tolist())), float(dec.propensities[0])
    ([0, 1, 2, 3], 0.25)

    """

    name = "random"

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"d": 4}

    def __init__(self, d: PositiveInt | None = None, seed: int | None = None):
        self.d = d
        self.seed = seed

    def decide(
        self, X: ArrayLike, event_ids: ArrayLike | None = None, mask: ArrayLike | None = None
    ) -> DecisionBatch:
        X = self._check_batch(X, self.d)
        B, K, _ = X.shape
        t = self.t
        rounds = np.arange(t + 1, t + B + 1, dtype=np.int64)
        u = self._coins(rounds, event_ids)
        if mask is None:
            arms = np.minimum((u * K).astype(np.int64), K - 1)
            prop = np.full(B, 1.0 / K)
        else:
            mask = np.asarray(mask, dtype=bool)
            n_avail = mask.sum(axis=1)
            pick = np.minimum((u * n_avail).astype(np.int64), n_avail - 1)
            arms = np.argmax(mask & (np.cumsum(mask, axis=1) - 1 == pick[:, None]), axis=1)
            prop = 1.0 / n_avail
        self._t = t + B
        return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), 0)

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._state_header(),
            "tie_key": self._coin_key(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> RandomPolicy:
        self._t = int(state["t"])
        self._tie_key = int(state["tie_key"])
        return self
