"""The reward join for slates: per-item rewards under the same event-time rules as single arms.

A slate decision waits in the :class:`~.join.JoinStore` like any decision (same window, same
clock expiry, same held-early feedback judged as of its position in the feedback
partition, same remembered ids; docs/service.md, "Why the join is deterministic"). What it
stores is its row ``[items (K) | values (K)]``: the served item indices and, per item, the first
reward received (NaN until then). A slate resolves

* ``joined`` when every one of its K items has a reward, or
* ``expired`` when the feedback clock passes its deadline (decision time + window); the
  items still missing then get the bandit's default reward (DP-matroid spec §7.2).

Either way each served item yields exactly one reward record, and the *timing* of when a slate
reaches the policy is set by the round schedule (``feedback_lag_rounds``), never by which
feedback arrived: the batch composition of the private means depends on the slates only.
"""

from __future__ import annotations

import numpy as np

from ..join import JoinStore

__all__ = ["SlateJoinStore"]


class SlateJoinStore(JoinStore):
    """Pending slate decisions (rows of 2K floats) with partial per-item rewards.

    Parameters
    ----------
    K
        Slate size.
    window, capacity, retention
        As for :class:`~.join.JoinStore`.

    Examples
    --------
    >>> js = SlateJoinStore(K=2, window=10.0, capacity=8, retention=60.0)
    >>> js.add("e1", round=1, event_time=100.0, context=js.row([4, 9]))
    []
    >>> js.apply("e1", [1], [0.5]), js.status("e1")
    (1, 'pending')
    >>> js.apply("e1", [1, 0], [0.9, 1.0]), js.complete("e1")   # item 9 keeps its first value
    (1, True)
    >>> res = js.resolve_joined("e1")
    >>> SlateJoinStore.split(res.context)
    (array([4, 9]), array([1. , 0.5]))

    """

    def __init__(self, K: int, window: float, capacity: int, retention: float):
        self.K = K
        super().__init__(2 * K, window, capacity, retention)

    # -- rows ----------------------------------------------------------------------------------
    def row(self, items) -> np.ndarray:
        """A new pending row: the slate's items, no rewards yet."""
        out = np.full(2 * self.K, np.nan)
        out[: self.K] = items
        return out

    @staticmethod
    def split(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(items, values) of a row; NaN values are items without a reward."""
        K = row.shape[-1] // 2
        return row[..., :K].astype(np.int64), row[..., K:].copy()

    def items_of(self, event_id: str) -> np.ndarray:
        p = self.pending[event_id]
        return self._contexts[p.slot, : self.K].astype(np.int64)

    def apply(self, event_id: str, positions, values) -> int:
        """Record rewards at slate positions that have none yet; returns how many were new."""
        p = self.pending[event_id]
        vals = self._contexts[p.slot, self.K :]
        new = 0
        for pos, v in zip(positions, values):
            if np.isnan(vals[pos]):
                vals[pos] = v
                new += 1
        return new

    def complete(self, event_id: str) -> bool:
        p = self.pending[event_id]
        return not np.isnan(self._contexts[p.slot, self.K :]).any()

    def resolve_joined(self, event_id: str):
        return self.resolve(event_id, "joined", None)
