"""A bounded-memory bootstrap for ratio-of-means estimators over a stream.

The log is cut into consecutive blocks; each block keeps (count, Σa, Σb). While the log is short
every block is one event, and resampling blocks *is* the ordinary nonparametric bootstrap of the
events. When ``capacity`` blocks are full, neighbours are merged pairwise and the block size
doubles, so memory stays O(capacity) however long the log is, and there are always at least
capacity/2 blocks to resample. For i.i.d. events, sums of disjoint blocks are i.i.d., so the
block bootstrap is consistent; with ≥ 2,048 blocks its standard error is within about 2% of the
event-level one.

Percentile intervals: V*_r = Σ_j c_rj A_j / Σ_j c_rj B_j for multinomial resampling counts c_r,
and the interval is the (α/2, 1 − α/2) quantiles of V*.
"""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray

__all__ = ["BlockBootstrap"]


class BlockBootstrap:
    """Adaptive-block bootstrap of V = Σa / Σb.

    Parameters
    ----------
    capacity
        Maximum number of blocks kept (even, ≥ 2).

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> boot = BlockBootstrap(capacity=64)
    >>> for _ in range(10):
    ...     boot.add(rng.normal(1.0, 1.0, 100), np.ones(100))
    >>> boot.blocks, boot.block_size, boot.events
    (63, 16, 1000)
    >>> lo, hi = boot.interval(0.95, replicates=2000, rng=np.random.default_rng(1))
    >>> bool(lo < 1.0 < hi), round(hi - lo, 1)
    (True, 0.1)
    """

    def __init__(self, capacity: int = 4096):
        if capacity < 2 or capacity % 2:
            raise ValueError("capacity must be an even number >= 2")
        self.capacity = capacity
        self._n = np.zeros(capacity, dtype=np.int64)
        self._a = np.zeros(capacity)
        self._b = np.zeros(capacity)
        self._k = 0  # blocks in use
        self._size = 1  # target events per block
        self.events = 0

    @property
    def blocks(self) -> int:
        return self._k

    @property
    def block_size(self) -> int:
        return self._size

    def _merge(self) -> None:
        k = self._k
        half = k // 2
        for arr in (self._n, self._a, self._b):
            pairs = arr[: 2 * half].reshape(half, 2).sum(axis=1)
            arr[:half] = pairs
            arr[half : 2 * half] = 0
        self._k = half
        self._size *= 2

    def add(self, a: ArrayLike, b: ArrayLike) -> None:
        """Append a chunk of terms in log order."""
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        i, m = 0, a.size
        self.events += m
        while i < m:
            # top up the last block if it is not full
            if self._k > 0 and self._n[self._k - 1] < self._size:
                j = self._k - 1
                take = min(self._size - int(self._n[j]), m - i)
                self._n[j] += take
                self._a[j] += a[i : i + take].sum()
                self._b[j] += b[i : i + take].sum()
                i += take
                continue
            if self._k == self.capacity:
                self._merge()
                continue
            s = self._size
            whole = min((m - i) // s, self.capacity - self._k)
            if whole == 0:  # fewer than one block left: open a partial block
                j = self._k
                self._k += 1
                self._n[j] = m - i
                self._a[j] = a[i:].sum()
                self._b[j] = b[i:].sum()
                i = m
                continue
            seg = slice(i, i + whole * s)
            blk = slice(self._k, self._k + whole)
            self._n[blk] = s
            self._a[blk] = a[seg].reshape(whole, s).sum(axis=1)
            self._b[blk] = b[seg].reshape(whole, s).sum(axis=1)
            self._k += whole
            i += whole * s

    def replicates(self, replicates: int, rng: np.random.Generator) -> FloatArray:
        """Bootstrap replicates V*_r (NaN where Σb* = 0)."""
        k = self._k
        if k == 0:
            return np.full(replicates, math.nan)
        A, B = self._a[:k], self._b[:k]
        out = np.empty(replicates)
        step = max(1, 2_000_000 // k)  # bounded temporary memory
        for r0 in range(0, replicates, step):
            r1 = min(replicates, r0 + step)
            idx = rng.integers(0, k, size=(r1 - r0, k))
            num = A[idx].sum(axis=1)
            den = B[idx].sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[r0:r1] = np.where(den != 0, num / np.where(den != 0, den, 1.0), math.nan)
        return out

    def interval(
        self, level: float, replicates: int, rng: np.random.Generator
    ) -> tuple[float, float]:
        """Percentile interval at ``level`` (NaN when fewer than two events)."""
        if self.events < 2:
            return math.nan, math.nan
        v = self.replicates(replicates, rng)
        v = v[np.isfinite(v)]
        if v.size < replicates // 2:
            return math.nan, math.nan
        lo, hi = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
        return float(lo), float(hi)
