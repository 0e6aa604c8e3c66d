"""Fast deterministic argmax for UCB scores (ties are measure-zero but must stay deterministic)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray
from .base import argmax_random_ties

__all__ = ["argmax_ties_by_coins", "take_ids"]


def argmax_ties_by_coins(
    scores: FloatArray, coins_for: Callable[[IntArray], FloatArray]
) -> tuple[IntArray, FloatArray]:
    """Row-wise argmax of (B, K) ``scores``; exact ties are broken by ``coins_for(rows)``.

    ``coins_for(rows)`` returns the deterministic coins (hash of the event ids) of the given
    rows; it is called only when some row has a tie, which keeps the common path to an argmax,
    one gather and one comparison. Propensities are 1, or 1/#ties for tied rows.

    >>> s = np.array([[1.0, 3.0, 3.0], [0.0, 2.0, 1.0]])
    >>> arms, prop = argmax_ties_by_coins(s, lambda rows: np.array([0.9])[: rows.size])
    >>> arms.tolist(), prop.tolist()
    ([2, 1], [0.5, 1.0])
    """
    B = scores.shape[0]
    arms: IntArray = scores.argmax(axis=1)
    best = scores[np.arange(B), arms]
    ties = scores == best[:, None]
    if np.count_nonzero(ties) == B:
        return arms, np.ones(B)
    n_ties = ties.sum(axis=1)
    rows = np.flatnonzero(n_ties > 1)
    sub_arms, sub_prop = argmax_random_ties(scores[rows], coins_for(rows))
    arms[rows] = sub_arms
    prop = np.ones(B)
    prop[rows] = sub_prop
    return arms, prop


def take_ids(event_ids: ArrayLike | None, rows: IntArray) -> AnyArray | None:
    """The event ids of ``rows`` (None stays None: coins then come from the rounds).

    >>> take_ids(["a", "b", "c"], np.array([2, 0])).tolist(), take_ids(None, np.array([1]))
    (['c', 'a'], None)
    """
    if event_ids is None:
        return None
    return np.asarray(event_ids)[rows]
