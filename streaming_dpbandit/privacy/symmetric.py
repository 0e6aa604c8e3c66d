"""Packed symmetric matrices: the storage format of every continual-release Gram aggregator.

DP-LinUCB spec §5 ("Storage"): only the upper triangle of a symmetric (p × p) matrix is stored,
as a vector of P = p(p+1)/2 entries in row-major order (``numpy.triu_indices``). The *rescaled*
coordinates of spec §3.2 divide the diagonal entries by √2: in them the symmetrised Gaussian node
noise is isotropic and a replaced row moves a node by at most L̃² in ℓ2 norm.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

__all__ = ["SymmetricPacking", "packing"]


class SymmetricPacking:
    """Index tables for packing symmetric (p × p) matrices into their upper triangles.

    Parameters
    ----------
    p
        Matrix size (d + 1 for the matrix of [x; y][x; y]ᵀ).

    Examples
    --------
    >>> import numpy as np
    >>> pk = SymmetricPacking(3)
    >>> S = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    >>> v = pk.pack(S)
    >>> v.tolist(), pk.size
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 6)
    >>> bool((pk.unpack(v) == S).all())
    True
    >>> pk.outer_sum(np.array([[1.0, 2.0, 0.0]])).tolist()
    [1.0, 2.0, 0.0, 4.0, 0.0, 0.0]

    """

    def __init__(self, p: int):
        if p < 1:
            raise ValueError("p must be >= 1")
        self.p = p
        self.rows, self.cols = np.triu_indices(p)
        self.size = p * (p + 1) // 2
        self.is_diag = self.rows == self.cols
        self.diag_pos = np.flatnonzero(self.is_diag)
        # flat index of every (i, j) in the packed vector, for unpacking by a single take()
        idx = np.empty((p, p), dtype=np.intp)
        idx[self.rows, self.cols] = np.arange(self.size)
        idx[self.cols, self.rows] = np.arange(self.size)
        self.full_index = idx.reshape(-1)
        # packed positions of the top-left (p−1)×(p−1) block and of the last column's first p−1
        top = (self.rows < p - 1) & (self.cols < p - 1)
        self.top_left = np.flatnonzero(top)
        self.last_col = np.flatnonzero((self.cols == p - 1) & (self.rows < p - 1))
        #: rescaled-coordinate weights: 1 off the diagonal, 1/√2 on it (spec §3.2)
        self.rescale = np.where(self.is_diag, 1.0 / np.sqrt(2.0), 1.0)

    def pack(self, S: np.ndarray) -> np.ndarray:
        """Upper triangle of ``S`` (…, p, p) as (…, P)."""
        return np.asarray(S)[..., self.rows, self.cols]

    def unpack(self, v: np.ndarray) -> np.ndarray:
        """The symmetric matrix (…, p, p) of a packed (…, P) vector."""
        v = np.asarray(v)
        return v[..., self.full_index].reshape(*v.shape[:-1], self.p, self.p)

    def outer_sum(self, rows: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Packed Σ_i a_i a_iᵀ of the rows a_i of ``rows`` (n, p)."""
        G = rows.T @ rows
        packed: npt.NDArray[np.float64] = G[self.rows, self.cols]
        return packed

    def split(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(top-left (p−1)×(p−1) block as a full matrix, last column without its last entry)."""
        S = self.unpack(v)
        return S[: self.p - 1, : self.p - 1], S[: self.p - 1, self.p - 1]


@functools.lru_cache(maxsize=64)
def packing(p: int) -> SymmetricPacking:
    """Shared, cached :class:`SymmetricPacking` for size p (the tables are read-only).

    >>> packing(4) is packing(4)
    True
    """
    return SymmetricPacking(p)
