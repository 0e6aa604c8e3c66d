"""The linear (vector) matroid over the reals: items are vectors, independence is linear.

The field is ℝ, not GF(2) (spec §4.2): (1,1,0), (0,1,1), (1,0,1) are independent over ℝ
(determinant 2) although they sum to zero mod 2. Two arithmetic modes:

* ``exact=False`` (default): float64 incremental Gram–Schmidt. The builder keeps an orthonormal
  basis Q of the span so far; e can be added iff ‖u_e − Q Qᵀ u_e‖ > tol·‖u_e‖ (tol = 1e−9).
  The projection is applied twice ("twice is enough", Giraud et al. 2005), which keeps Q
  orthonormal to working precision, so the test does not drift with the set size.
* ``exact=True``: rational elimination with :class:`fractions.Fraction` on the exact binary
  values of the inputs; slow, for cross-checks and small ground sets.

At construction the computed rank must equal ``numpy.linalg.matrix_rank`` (and, in exact mode,
the exact rank must too); an ill-conditioned description is rejected rather than served.

Spec: docs/specs/dp_matroid.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any, cast

import numpy as np

from ..utils.arrays import FloatArray
from .base import Matroid

__all__ = ["LinearMatroid"]

DEFAULT_TOL = 1e-9


class _GramSchmidtBuilder:
    __slots__ = ("Q", "_cache", "norms", "size", "tol", "vectors")

    def __init__(self, vectors: FloatArray, norms: FloatArray, capacity: int, tol: float):
        self.vectors = vectors
        self.norms = norms
        self.tol = tol
        self.Q = np.empty((vectors.shape[1], capacity))
        self.size = 0
        self._cache: tuple[int, FloatArray] | None = None

    def _residual(self, e: int) -> FloatArray:
        u: FloatArray = self.vectors[e]
        if self.size == 0:
            return u.copy()
        Q = self.Q[:, : self.size]
        r = u - Q @ (Q.T @ u)
        res: FloatArray = r - Q @ (Q.T @ r)  # re-orthogonalisation
        return res

    def can_add(self, e: int) -> bool:
        n = self.norms[e]
        if n == 0.0 or self.size >= self.Q.shape[1]:
            return False
        r = self._residual(e)
        rn = float(np.sqrt(r @ r))
        ok = bool(rn > self.tol * n)
        self._cache = (e, r / rn) if ok else None
        return ok

    def add(self, e: int) -> None:
        if self._cache is not None and self._cache[0] == e:
            q = self._cache[1]
        else:
            r = self._residual(e)
            q = r / np.sqrt(r @ r)
        self.Q[:, self.size] = q
        self.size += 1
        self._cache = None


class _ExactBuilder:
    """Row echelon form over ℚ: rows (pivot, vector) with a 1 at the pivot."""

    __slots__ = ("rows", "size", "vectors")

    def __init__(self, vectors: list[list[Fraction]]):
        self.vectors = vectors
        self.rows: list[tuple[int, list[Fraction]]] = []
        self.size = 0

    def _reduce(self, e: int) -> list[Fraction]:
        u = list(self.vectors[e])
        for p, row in self.rows:
            c = u[p]
            if c:
                u = [a - c * b for a, b in zip(u, row)]
        return u

    def can_add(self, e: int) -> bool:
        return any(self._reduce(e))

    def add(self, e: int) -> None:
        u = self._reduce(e)
        p = next(i for i, a in enumerate(u) if a)
        inv = 1 / u[p]
        u = [a * inv for a in u]
        # keep the rows fully reduced at their pivots
        self.rows = [
            (q, [a - row[p] * b for a, b in zip(row, u)]) if row[p] else (q, row)
            for q, row in self.rows
        ]
        self.rows.append((p, u))
        self.size += 1


class LinearMatroid(Matroid):
    """Vectors u_e ∈ ℝ^d; a set is independent iff its vectors are linearly independent over ℝ.

    Rank = rank of the L×d matrix; loops = zero vectors; ``can_add`` costs O(d·K).

    Parameters
    ----------
    vectors
        L×d matrix, row e is item e's vector.
    exact
        Use exact rational arithmetic instead of float64 Gram–Schmidt.
    tol
        Relative residual threshold of the float mode.
    expected_rank
        Optional assertion on the computed rank.

    Examples
    --------
    The GF(2) counterexample of spec §4.2 is independent over ℝ:

    >>> m = LinearMatroid([[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    >>> m.rank, m.is_independent([0, 1, 2])
    (3, True)
    >>> m = LinearMatroid([[1, 0], [2, 0], [0, 0], [0, 3]], exact=True)
    >>> m.rank, sorted(m.loops), m.is_independent([0, 1])
    (2, [2], False)

    """

    kind = "linear"

    def __init__(
        self,
        vectors: Sequence[Sequence[float]] | np.ndarray,
        exact: bool = False,
        tol: float = DEFAULT_TOL,
        expected_rank: int | None = None,
    ):
        V = np.asarray(vectors, dtype=np.float64)
        if V.ndim != 2 or V.shape[0] == 0 or V.shape[1] == 0:
            raise ValueError("vectors must be a non-empty L×d matrix")
        if not np.isfinite(V).all():
            raise ValueError("vectors must be finite")
        if not 0 < tol < 1:
            raise ValueError("tol must be in (0, 1)")
        self.vectors = V
        self.exact = bool(exact)
        self.tol = float(tol)
        self.n_items = V.shape[0]
        self.dim = V.shape[1]
        self._norms = np.sqrt(np.einsum("ij,ij->i", V, V))
        self._fractions = (
            [[Fraction(float(x)) for x in row] for row in V.tolist()] if self.exact else None
        )
        self._capacity = min(self.n_items, self.dim)
        self._finish(expected_rank)
        reference = int(np.linalg.matrix_rank(V))
        if self.rank != reference:
            raise ValueError(
                f"ill-conditioned vectors: the incremental rank {self.rank} differs from "
                f"numpy.linalg.matrix_rank = {reference}"
            )

    def _rank_and_loops(self) -> tuple[int, set[int]]:
        b = self.builder()
        for e in range(self.n_items):
            if b.can_add(e):
                b.add(e)
        return b.size, set(np.flatnonzero(self._norms == 0.0).tolist())

    def builder(self) -> _ExactBuilder | _GramSchmidtBuilder:
        if self.exact:
            # exact mode stores the vectors as fractions in __init__
            return _ExactBuilder(cast("list[list[Fraction]]", self._fractions))
        return _GramSchmidtBuilder(self.vectors, self._norms, self._capacity, self.tol)

    def describe(self) -> dict[str, Any]:
        return {
            "type": self.kind,
            "vectors": self.vectors.tolist(),
            "exact": self.exact,
            "tol": self.tol,
        }
