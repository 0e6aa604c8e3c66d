"""A fixed, context-free stochastic policy given by a table of action probabilities.

The natural representation of a logged behaviour policy that ignores the context — the Open
Bandit Dataset's Bernoulli Thompson sampling ranks items from Beta posteriors, not from user
features — and of any randomised baseline: π(a | position p) for every slate position p.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray, IntArray, MaybeArray
from .base import DecisionBatch, Policy
from .registry import register
from .types import PositiveInt

__all__ = ["TablePolicy"]


@register
class TablePolicy(Policy):
    """Choose arm a at slate position p with probability ``probabilities[p][a]``.

    Decisions are deterministic given the event id (inverse CDF of a hashed coin), and
    :meth:`action_probabilities` gives the whole distribution, so off-policy estimators use the
    exact π(a | p). The policy learns nothing.

    Parameters
    ----------
    probabilities
        (P, K) probabilities per position (rows are normalised; a single row applies to every
        position).
    d
        Context dimension (checked, otherwise unused).
    seed
        Seeds the coins.

    Examples
    --------
    >>> import numpy as np
    >>> pol = TablePolicy([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], seed=0)
    >>> pol.action_probabilities(3, np.array([0, 1])).tolist()
    [[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]
    >>> dec = pol.decide(np.zeros((20000, 3, 1)), event_ids=np.arange(20000))
    >>> (np.bincount(dec.arms) / 20000).round(1).tolist(), round(float(dec.propensities[0]), 6)
    ([0.7, 0.2, 0.1], 0.7)
    """

    name = "table"
    config_types: ClassVar[Mapping[str, Any]] = {"probabilities": list[list[float]] | list[float]}

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {"probabilities": [[0.2, 0.5, 0.3]]}

    def __init__(
        self, probabilities: ArrayLike, d: PositiveInt | None = None, seed: int | None = None
    ) -> None:
        self.probabilities = probabilities
        self.d = d
        self.seed = seed

    def _validate(self) -> None:
        self._table()

    def _table(self) -> FloatArray:
        tab: FloatArray | None = getattr(self, "_tab", None)
        if tab is None:
            tab = np.asarray(self.probabilities, dtype=np.float64)
            if tab.ndim == 1:
                tab = tab[None, :]
            if tab.ndim != 2 or tab.shape[1] < 1:
                raise ValueError("probabilities must be a (positions, arms) table")
            if not np.isfinite(tab).all() or (tab < 0).any():
                raise ValueError("probabilities must be finite and non-negative")
            sums = tab.sum(axis=1, keepdims=True)
            if (sums <= 0).any():
                raise ValueError("every position needs some probability mass")
            tab = tab / sums
            self._tab = tab
        return tab

    @property
    def n_arms(self) -> int:
        return int(self._table().shape[1])

    def action_probabilities(
        self, n_arms: int, positions: ArrayLike, mask: ArrayLike | None = None
    ) -> FloatArray:
        """π(· | p_i) for every event (B, K); restricted to ``mask`` and renormalised."""
        tab = self._table()
        if n_arms != tab.shape[1]:
            raise ValueError(f"the table has {tab.shape[1]} arms, the events have {n_arms}")
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and pos.max() >= tab.shape[0]:
            if tab.shape[0] != 1:
                raise ValueError(
                    f"the table has {tab.shape[0]} positions, an event is at position "
                    f"{int(pos.max())} (0-based)"
                )
            pos = np.zeros_like(pos)
        probs: FloatArray = tab[pos]
        if mask is not None:
            probs = np.where(mask, probs, 0.0)
            s = probs.sum(axis=1, keepdims=True)
            if (s <= 0).any():
                raise ValueError("no available arm has positive probability")
            probs = probs / s
        return probs

    def sample(
        self, probs: FloatArray, event_ids: ArrayLike | None, rounds: IntArray | None = None
    ) -> IntArray:
        """Arms drawn from ``probs`` (B, K) by the inverse CDF of the events' coins."""
        B = probs.shape[0]
        if rounds is None:
            rounds = np.arange(1, B + 1)
        u = self._coins(rounds, event_ids)
        cdf = np.cumsum(probs, axis=1)
        arms: IntArray = (u[:, None] * cdf[:, -1:] >= cdf).sum(axis=1)
        out: IntArray = np.minimum(arms, probs.shape[1] - 1)
        return out

    def decide(
        self,
        X: ArrayLike,
        event_ids: ArrayLike | None = None,
        mask: ArrayLike | None = None,
        positions: ArrayLike | None = None,
    ) -> DecisionBatch:
        X = self._check_batch(X, self.d)
        B, K, _ = X.shape
        t = self.t
        rounds = np.arange(t + 1, t + B + 1, dtype=np.int64)
        pos = np.zeros(B, dtype=np.int64) if positions is None else positions
        probs = self.action_probabilities(K, pos, mask)
        arms = self.sample(probs, event_ids, rounds)
        if not getattr(self, "_frozen_eval", False):
            self._t = t + B
        return DecisionBatch(arms, probs[np.arange(B), arms], rounds, np.zeros(B, np.int64), 0)

    def learn(
        self, contexts: ArrayLike, rewards: ArrayLike, rounds: ArrayLike, ids: MaybeArray = None
    ) -> None:
        return None

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        tab = self._table()
        return {
            "policy": self.name,
            "private": False,
            "positions": int(tab.shape[0]),
            "arms": int(tab.shape[1]),
            "top_arms": [np.argsort(-row)[:5].tolist() for row in tab],
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **self._state_header(),
            "tie_key": self._coin_key(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> TablePolicy:
        self._t = int(state["t"])
        self._tie_key = int(state["tie_key"])
        return self
