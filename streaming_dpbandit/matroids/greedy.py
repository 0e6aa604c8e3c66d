"""The matroid greedy (thesis Alg. 1; DP-matroid spec §4.3), one row or a batch of rows.

The reference implementation is the spec's single scan: drop the loops, shuffle (random
tie-breaking, fresh each call), stable-sort by key descending (+∞ first), then accept every
item that keeps the set independent until the set has K items. It is equivalent to Alg. 1's
"K times, add the best item that keeps A independent" because an item that cannot be added to A
cannot be added to any superset of A. It returns a maximum-key basis for any real keys
(negative ones included), in acceptance order.

:func:`greedy_many` decides a batch of rows. Uniform and partition matroids have a vectorised
fast path; a row whose outcome depends on tie-breaking (equal keys inside the slate, or at the
boundary of the selection — in practice the +∞ keys of never-played items) goes through the
reference scan with that row's own generator, so the tie rule is exactly the reference's.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations
from typing import Literal, overload

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .base import Matroid

__all__ = ["all_bases", "greedy_basis", "greedy_many"]


def greedy_basis(matroid: Matroid, key: ArrayLike, rng: np.random.Generator) -> IntArray:
    """A maximum-key basis of ``matroid`` in greedy acceptance order (spec §4.3).

    Parameters
    ----------
    matroid
        The matroid.
    key
        One key per item (L,): finite floats or +∞; NaN raises ``ValueError``.
    rng
        Tie-breaking generator (all ties are broken uniformly at random).

    Examples
    --------
    >>> from streaming_dpbandit.matroids import PartitionMatroid
    >>> m = PartitionMatroid([0, 0, 1, 1], [1, 1])
    >>> greedy_basis(m, [0.2, -1.0, np.inf, 0.5], np.random.default_rng(0)).tolist()
    [2, 0]
    """
    key = np.asarray(key, dtype=np.float64)
    if key.shape != (matroid.n_items,):
        raise ValueError(f"expected {matroid.n_items} keys, got shape {key.shape}")
    if np.isnan(key).any():
        raise ValueError("a greedy key is NaN")
    perm = rng.permutation(matroid.candidates)
    return _scan(matroid, perm[np.argsort(-key[perm], kind="stable")])


MEMO_CANDIDATES = 10  # memoise scans of ground sets this small (≤ 10! orders)
MEMO_SIZE = 1 << 16


def _scan(matroid: Matroid, order: IntArray) -> IntArray:
    """Accept, in ``order``, every item that keeps the set independent, until K are taken.

    The result depends on the order alone, so for tiny ground sets it is memoised per matroid
    (the synthetic instance has 6! orders; each scan is a few oracle calls in Python).
    """
    if order.size <= MEMO_CANDIDATES:
        memo: dict[bytes, IntArray] = matroid.__dict__.setdefault("_scan_memo", {})
        key = order.tobytes()
        hit = memo.get(key)
        if hit is None:
            hit = _scan_uncached(matroid, order)
            if len(memo) < MEMO_SIZE:
                memo[key] = hit
        return hit.copy()
    return _scan_uncached(matroid, order)


def _scan_uncached(matroid: Matroid, order: IntArray) -> IntArray:
    b = matroid.builder()
    out = []
    K = matroid.rank
    for e in order.tolist():
        if b.can_add(e):
            b.add(e)
            out.append(e)
            if len(out) == K:
                break
    if len(out) != K:  # impossible for a valid matroid oracle
        raise AssertionError(f"greedy found {len(out)} items, the rank is {K}")
    return np.asarray(out, dtype=np.int64)


def _untied_order(matroid: Matroid, key: FloatArray) -> IntArray | None:
    """The candidates by key, descending, when no two candidate keys are equal (else None):
    without ties the shuffle of the reference scan cannot change the result."""
    cand = matroid.candidates
    kc = key[cand]
    if np.isnan(kc).any():
        raise ValueError("a greedy key is NaN")
    order = np.argsort(-kc, kind="stable")
    ks = kc[order]
    if (ks[1:] == ks[:-1]).any():
        return None
    return cand[order]


def _untied_many(matroid: Matroid, keys: FloatArray) -> tuple[IntArray, list[int]]:
    """Every row of :func:`_untied_order` and :func:`_scan` at once: the slates of the rows
    without tied candidate keys (each distinct order scanned once), and the tied rows' indices
    (their slate rows are left to the caller)."""
    B = keys.shape[0]
    slates = np.empty((B, matroid.rank), dtype=np.int64)
    if B <= 8:  # a few rows (one per round in a service): row by row is cheaper
        tied_rows = []
        for r in range(B):
            order = _untied_order(matroid, keys[r])
            if order is None:
                tied_rows.append(r)
            else:
                slates[r] = _scan(matroid, order)
        return slates, tied_rows
    cand = matroid.candidates
    kc = keys[:, cand]
    if np.isnan(kc).any():
        raise ValueError("a greedy key is NaN")
    order = np.argsort(-kc, axis=1, kind="stable")
    ks = np.take_along_axis(kc, order, axis=1)
    tied = (ks[:, 1:] == ks[:, :-1]).any(axis=1)
    untied = np.flatnonzero(~tied)
    if untied.size:  # scan each distinct order once
        orders, inverse = np.unique(cand[order[untied]], axis=0, return_inverse=True)
        scanned = np.array([_scan(matroid, o) for o in orders], dtype=np.int64)
        slates[untied] = scanned[inverse.reshape(-1)]
    return slates, np.flatnonzero(tied).tolist()


@overload
def greedy_many(
    matroid: Matroid,
    keys: ArrayLike,
    tie_rng: Callable[[int], np.random.Generator],
    with_keys: Literal[False] = False,
    fresh_order: bool = False,
) -> IntArray: ...
@overload
def greedy_many(
    matroid: Matroid,
    keys: ArrayLike,
    tie_rng: Callable[[int], np.random.Generator],
    with_keys: Literal[True],
    fresh_order: bool = False,
) -> tuple[IntArray, FloatArray]: ...
def greedy_many(
    matroid: Matroid,
    keys: ArrayLike,
    tie_rng: Callable[[int], np.random.Generator],
    with_keys: bool = False,
    fresh_order: bool = False,
) -> IntArray | tuple[IntArray, FloatArray]:
    """Greedy slates (B, K) for a batch of key rows (B, L).

    ``tie_rng(row)`` returns the tie-breaking generator of one row; it is called only for rows
    whose candidate keys have ties, so a decision's slate depends on its own row alone (rows
    without ties have one greedy answer, found by the same scan without the shuffle).
    ``with_keys=True`` also returns each slate's keys in slate order (B, K). ``fresh_order``
    is a speed hint for the fast path (see ``Matroid.greedy_fast_sorted``); it never changes
    the slates.

    >>> from streaming_dpbandit.matroids import UniformMatroid
    >>> keys = np.array([[0.1, 0.7, 0.3], [np.inf, np.inf, 0.0]])
    >>> s = greedy_many(UniformMatroid(3, 2), keys, lambda r: np.random.default_rng(r))
    >>> s[0].tolist(), sorted(s[1].tolist())
    ([1, 2], [0, 1])
    >>> greedy_many(UniformMatroid(3, 2), keys[:1], lambda r: None, with_keys=True)[1].tolist()
    [[0.7, 0.3]]
    """
    keys = np.asarray(keys, dtype=np.float64)
    if keys.ndim != 2 or keys.shape[1] != matroid.n_items:
        raise ValueError(f"expected keys of shape (B, {matroid.n_items}), got {keys.shape}")
    fast = matroid.greedy_fast_sorted(keys, fresh_order) if keys.shape[0] else None
    if fast is None:
        slates, rows = _untied_many(matroid, keys)
        for r in rows:  # rows with tied candidate keys: the reference greedy
            slates[r] = greedy_basis(matroid, keys[r], tie_rng(r))
        return (slates, np.take_along_axis(keys, slates, axis=1)) if with_keys else slates
    slates, slow, served = fast
    slates = np.asarray(slates, dtype=np.int64)  # a fresh array of the fast path
    rows = np.flatnonzero(slow).tolist() if slow.any() else []
    for r in rows:
        order = _untied_order(matroid, keys[r])
        if order is None:
            slates[r] = greedy_basis(matroid, keys[r], tie_rng(r))
        else:
            slates[r] = _scan(matroid, order)
    if not with_keys:
        return slates
    if served is None:
        return slates, np.take_along_axis(keys, slates, axis=1)
    if rows:  # rows re-decided by the reference greedy: their keys in their new order
        served = np.array(served, dtype=np.float64)
        served[rows] = np.take_along_axis(keys[rows], slates[rows], axis=1)
    return slates, served


def all_bases(matroid: Matroid, limit: int = 20) -> list[tuple[int, ...]]:
    """Every basis, by enumeration (small ground sets only: L ≤ ``limit``).

    >>> from streaming_dpbandit.matroids import GraphicMatroid
    >>> len(all_bases(GraphicMatroid([(0, 1), (1, 2), (0, 2)])))  # spanning trees of a triangle
    3
    """
    if matroid.n_items > limit:
        raise ValueError(f"enumeration is for L <= {limit}")
    return [
        c
        for c in combinations(matroid.candidates.tolist(), matroid.rank)
        if matroid.is_independent(c)
    ]
