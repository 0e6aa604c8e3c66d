"""Clipped records kept sparse and exact, indexed by slot (PrivateLASSO spec §2, §5.2, §9).

Records z_s = (x_s, r_s) must be clipped before they are added: the store is the input of
private computations and has no bounds of its own. Values are rounded *toward zero* onto the
grid 2⁻¹⁶ (``quantize_toward_zero``), which never increases |x_i|, ‖x‖₂ or |r|, so every clip
bound still holds after rounding and sums of products are exact multiples of 2⁻³².

Rows are kept as sparse chunks and assembled into one CSR matrix in *slot order*
(:meth:`RowStore.matrix`): the same records give bit-identical matrices — and hence
bit-identical solver iterations and releases — whatever the arrival order or batching, so a
crash-retry recomputes a release exactly.

With a public ``slot_range`` the store also refuses a second record for the same slot (spec P7:
a duplicate reward would double a slot's contribution) and records outside the range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse

from ..utils.arrays import AnyArray, ArrayLike, BoolArray, FloatArray, IntArray
from .accumulator import _exact_matmul

__all__ = ["RowStore", "quantize_toward_zero"]

QBITS = 16
_SCALE = float(1 << QBITS)
_UNIT = 2.0 ** (2 * QBITS)

# one added batch: (slots, CSR indptr, CSR column indices, values, rewards)
_Chunk = tuple[IntArray, IntArray, npt.NDArray[np.int32], FloatArray, FloatArray]


def quantize_toward_zero(a: ArrayLike) -> FloatArray:
    """Round to the grid 2⁻¹⁶, toward zero (|result| ≤ |input|; bounds survive rounding).

    >>> quantize_toward_zero([0.1, -0.1, 1.0]).tolist() == [6553 / 65536, -6553 / 65536, 1.0]
    True
    """
    arr = np.asarray(a, dtype=np.float64)
    return np.trunc(arr * _SCALE) / _SCALE


class RowStore:
    """Sparse, exact, slot-indexed store of clipped (context, reward) records.

    Parameters
    ----------
    d
        Context dimension.
    slot_range
        Optional public (first, last) slot of the store: enables duplicate detection.
    exact
        Round values onto the 2⁻¹⁶ grid (default). ``False`` keeps float64 values as given
        (non-private baselines, which release nothing and need no exact sums).

    Examples
    --------
    >>> import numpy as np
    >>> st = RowStore(d=4, slot_range=(1, 8))
    >>> X = np.array([[0, 1.0, 0, 0], [0.5, 0, 0, -1.0]])
    >>> st.add(np.array([3, 1]), X, np.array([2.0, 1.0]))
    0
    >>> st.add(np.array([3]), np.ones((1, 4)), np.ones(1))   # slot 3 again: refused
    1
    >>> slots, Z, y = st.matrix()
    >>> slots.tolist(), Z.toarray().tolist(), y.tolist()
    ([1, 3], [[0.5, 0.0, 0.0, -1.0], [0.0, 1.0, 0.0, 0.0]], [1.0, 2.0])

    """

    def __init__(self, d: int, slot_range: tuple[int, int] | None = None, exact: bool = True):
        self.d = d
        self.slot_range = slot_range
        self.exact = exact

    def _state(self) -> RowStore:
        if not hasattr(self, "_chunks"):
            self._chunks: list[_Chunk] = []
            self._count = 0
            self._seen: BoolArray | None = None
            if self.slot_range is not None:
                lo, hi = self.slot_range
                self._seen = np.zeros(hi - lo + 1, dtype=bool)
            self._cache: tuple[IntArray, Any, FloatArray] | None = None
        return self

    @property
    def count(self) -> int:
        return self._state()._count

    def add(self, slots: ArrayLike, X: ArrayLike, y: ArrayLike) -> int:
        """Add clipped records (slots (B,), dense rows X (B, d), rewards y (B,)).

        Returns the number of records refused as duplicates (same slot twice). Raises on a slot
        outside ``slot_range``.
        """
        self._state()
        slots_a = np.asarray(slots, dtype=np.int64).reshape(-1)
        X_a = np.asarray(X, dtype=np.float64)
        y_a = np.asarray(y, dtype=np.float64).reshape(-1)
        return self._add(slots_a, X_a, y_a)

    def _add(self, slots: IntArray, X: FloatArray, y: FloatArray) -> int:
        if X.shape != (slots.size, self.d) or y.shape != slots.shape:
            raise ValueError(f"expected slots (B,), X (B, {self.d}) and y (B,)")
        if slots.size == 0:
            return 0
        dup = 0
        if self._seen is not None:
            assert self.slot_range is not None  # _seen exists only with a slot range
            lo, hi = self.slot_range
            if slots.min() < lo or slots.max() > hi:
                raise ValueError(f"slot outside the store's range [{lo}, {hi}]")
            pos = slots - lo
            _, first = np.unique(pos, return_index=True)
            keep = np.zeros(slots.size, dtype=bool)
            keep[first] = True
            keep &= ~self._seen[pos]
            dup = int(slots.size - keep.sum())
            if dup:
                slots, X, y = slots[keep], X[keep], y[keep]
            self._seen[slots - lo] = True
            if slots.size == 0:
                return dup
        Xq = quantize_toward_zero(X) if self.exact else X
        yq = quantize_toward_zero(y) if self.exact else y.copy()
        rows, cols = np.nonzero(Xq)
        indptr = np.zeros(slots.size + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=slots.size), out=indptr[1:])
        self._chunks.append((slots.copy(), indptr, cols.astype(np.int32), Xq[rows, cols], yq))
        self._count += slots.size
        self._cache = None
        return dup

    def matrix(self) -> tuple[IntArray, Any, FloatArray]:
        """(slots ascending, Z as CSR n × d in slot order, y): the canonical form of the records."""
        self._state()
        if self._cache is not None:
            return self._cache
        if not self._chunks:
            out = (np.zeros(0, np.int64), sparse.csr_matrix((0, self.d)), np.zeros(0))
            self._cache = out
            return out
        slots = np.concatenate([c[0] for c in self._chunks])
        y = np.concatenate([c[4] for c in self._chunks])
        mats = [
            sparse.csr_matrix((c[3], c[2], c[1]), shape=(c[0].size, self.d)) for c in self._chunks
        ]
        Z = sparse.vstack(mats, format="csr") if len(mats) > 1 else mats[0]
        order = np.argsort(slots, kind="stable")
        if not np.all(order == np.arange(order.size)):
            Z, y, slots = Z[order], y[order], slots[order]
        Z.sort_indices()
        Z = sparse.csr_matrix((Z.data.copy(), Z.indices.copy(), Z.indptr.copy()), shape=Z.shape)
        self._chunks = [(slots, Z.indptr, Z.indices, Z.data, y)]
        self._cache = (slots, Z, y)
        return self._cache

    def support_gram(self, support: ArrayLike) -> AnyArray:
        """V = Σ v vᵀ with v = [x_S; r] as exact integers in units of 2⁻³² ((p+1)², object dtype).

        Values are grid multiples of 2⁻¹⁶, so every product is an integer number of units and the
        chunked sums are exact: the same records give the same V in any order.
        """
        if not self.exact:
            raise RuntimeError("exact support Grams need a store with exact=True")
        _, Z, y = self.matrix()
        support_a = np.asarray(support, dtype=np.int64)
        p1 = support_a.size + 1
        out = np.zeros((p1, p1), dtype=object)
        if y.size == 0:
            return out
        ZS = sparse.csc_matrix(Z)[:, support_a].tocsr() if support_a.size else None
        step = max(1, (1 << 22) // p1)  # dense row chunks of at most ~32 MB
        for i in range(0, y.size, step):
            W = np.empty((min(step, y.size - i), p1))
            if ZS is not None:
                W[:, :-1] = ZS[i : i + step].toarray()
            W[:, -1] = y[i : i + step]
            amax = float(np.abs(W).max())
            out = out + _exact_matmul(W, W, amax, amax).astype(object)
        return out

    @staticmethod
    def units_to_float(V: AnyArray) -> FloatArray:
        return np.array(V, dtype=np.float64) / _UNIT

    def destroy(self) -> None:
        """Overwrite and drop every record (forgetting)."""
        self._state()
        for chunk in self._chunks:
            for arr in chunk:
                if isinstance(arr, np.ndarray) and arr.flags.writeable:
                    arr.fill(0)
        self._chunks = []
        self._cache = None
        self._count = 0

    @property
    def nbytes(self) -> int:
        self._state()
        return sum(a.nbytes for c in self._chunks for a in c)

    # -- persistence -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        slots, Z, y = self.matrix()
        return {
            "d": self.d,
            "slot_range": None if self.slot_range is None else list(self.slot_range),
            "exact": self.exact,
            "slots": slots,
            "indptr": Z.indptr.astype(np.int64),
            "indices": Z.indices.astype(np.int32),
            "values": Z.data,
            "y": y,
            "seen": self._seen,
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> RowStore:
        rng = state["slot_range"]
        st = cls(
            int(state["d"]),
            None if rng is None else (int(rng[0]), int(rng[1])),
            bool(state.get("exact", True)),
        )._state()
        slots = np.asarray(state["slots"], dtype=np.int64)
        if slots.size:
            st._chunks = [
                (
                    slots,
                    np.asarray(state["indptr"], dtype=np.int64),
                    np.asarray(state["indices"], dtype=np.int32),
                    np.asarray(state["values"], dtype=np.float64),
                    np.asarray(state["y"], dtype=np.float64),
                )
            ]
        st._count = int(slots.size)
        if state.get("seen") is not None:
            st._seen = np.asarray(state["seen"], dtype=bool)
        return st
