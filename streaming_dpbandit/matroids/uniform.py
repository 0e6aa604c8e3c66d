"""The uniform matroid U(K, L): any set of at most K items is independent.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..utils.arrays import BoolArray, FloatArray, IntArray
from .base import Matroid, take_rows

__all__ = ["UniformMatroid"]

# Selection method, measured by bench/bench_matroid.py on numpy 2.4 / x86-64 (all give the same
# slates). Keys whose order nearly repeats from row to row (UCB indices): argpartition with two
# kth values (L−K−1, L−K), 2.5–4× faster than with one at every L measured (100 to 10,000), and
# the boundary-tie check is O(1) per row. Keys in a fresh order every row (Thompson samples,
# ``fresh_order``): up to this many items numpy's vectorised full argsort is as fast as one-kth
# argpartition and orders the K chosen for free; above it, one kth (two are 20–30% slower here).
_TWO_KTH_MAX_L = 160


class _CountBuilder:
    __slots__ = ("cap", "size")

    def __init__(self, cap: int):
        self.cap = cap
        self.size = 0

    def can_add(self, e: int) -> bool:
        return self.size < self.cap

    def add(self, e: int) -> None:
        self.size += 1


class UniformMatroid(Matroid):
    """Any K of L: the plain slate (spec §4.2). Rank min(K, L), no loops, O(1) ``can_add``.

    The greedy reduces to top-K by key; :meth:`greedy_fast` does it with ``argpartition`` for a
    whole batch of key rows, with the reference greedy's tie rule (rows with ties are flagged).

    Parameters
    ----------
    n_items
        L, the number of items.
    k
        The slate size K ≥ 1.
    expected_rank
        Optional assertion on the computed rank.

    Examples
    --------
    >>> m = UniformMatroid(5, 2)
    >>> m.rank, m.loops, m.is_independent([0, 4]), m.is_independent([0, 1, 2])
    (2, frozenset(), True, False)
    >>> slates, slow = m.greedy_fast(np.array([[0.1, 0.9, 0.5, np.inf, 0.2]]))
    >>> slates.tolist(), slow.tolist()
    ([[3, 1]], [False])

    """

    kind = "uniform"

    def __init__(self, n_items: int, k: int, expected_rank: int | None = None):
        self.n_items = int(n_items)
        self.k = int(k)
        if self.k < 1:
            raise ValueError("k must be >= 1 (a slate of K = 0 items serves nothing)")
        self._finish(expected_rank)

    def _rank_and_loops(self) -> tuple[int, set[int]]:
        return min(self.k, self.n_items), set()

    def builder(self) -> _CountBuilder:
        return _CountBuilder(self.rank)

    def describe(self) -> dict[str, Any]:
        return {"type": self.kind, "n_items": self.n_items, "k": self.k}

    def greedy_fast_sorted(
        self, keys: FloatArray, fresh_order: bool = False
    ) -> tuple[IntArray, BoolArray, FloatArray | None] | None:
        B, L = keys.shape
        K = self.rank
        below = None
        if K == L:
            part = np.broadcast_to(np.arange(L), (B, L))
            sel = keys
        elif fresh_order and L <= _TWO_KTH_MAX_L:
            # keys in a new order every row (Thompson samples): numpy's vectorised full argsort
            # beats argpartition here and leaves the K chosen already in order
            idx = np.argsort(keys, axis=1)[:, L - K - 1 :]  # the largest unselected, then the K
            # ascending; NaN sorts last. A flat gather is 2× faster than take_along_axis here
            both = take_rows(keys, idx)
            slates, sk, below = idx[:, :0:-1], both[:, :0:-1], both[:, 0]
            if math.isnan(sk[:, 0].max()):  # max propagates NaN
                raise ValueError("a greedy key is NaN")
            slow = (sk[:, 1:] == sk[:, :-1]).any(axis=1)  # ties inside the slate
            slow |= below >= sk[:, -1]  # ties at the boundary
            return slates, slow, sk
        elif not fresh_order:
            # kth = (L−K−1, L−K) also places the largest unselected key at L−K−1, which makes
            # the boundary-tie check O(1) per row (and numpy selects repeating orders faster)
            full = np.argpartition(keys, (L - K - 1, L - K), axis=1)[:, L - K - 1 :]
            both = np.take_along_axis(keys, full, axis=1)  # that key, then the K selected
            part, sel, below = full[:, 1:], both[:, 1:], both[:, 0]
        else:
            part = np.argpartition(keys, L - K, axis=1)[:, L - K :]  # NaN would sort last: in sel
            sel = np.take_along_axis(keys, part, axis=1)
        order = np.argsort(sel, axis=1)[:, ::-1]
        slates = np.take_along_axis(part, order, axis=1)
        sk = np.take_along_axis(sel, order, axis=1)
        if np.isnan(sk[:, 0]).any():  # argpartition and argsort put NaN last: first in sk
            raise ValueError("a greedy key is NaN")
        slow = (sk[:, 1:] == sk[:, :-1]).any(axis=1)  # ties inside the slate: order is random
        if below is not None:  # ties at the boundary: membership is random
            slow |= below >= sk[:, -1]
        elif K < L:
            slow |= np.count_nonzero(keys >= sk[:, -1:], axis=1) != K
        return slates, slow, sk
