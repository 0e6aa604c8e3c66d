"""Streaming moments of a ratio of means, per position, merged exactly across chunks.

Every estimator of this package is a ratio of means V = ā / b̄ over per-event terms (a_i, b_i):
IPS, DM and DR have b ≡ 1 (a plain mean), SNIPS has a = w·r and b = w. The sufficient
statistics are the count, the means and the centred co-moments of (a, b); chunks are merged with
Chan et al.'s parallel update, which is exact and numerically stable (no Σa² − (Σa)²/n
cancellation), so memory is O(positions), whatever the length of the log.

Normal-approximation (delta-method) variance of the ratio:

    Var(V̂) ≈ (S_aa − 2V·S_ab + V²·S_bb) / (n · b̄²),

with S the sample (n − 1) covariances; for b ≡ 1 it is the usual S_aa / n.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from ..utils.arrays import ArrayLike, FloatArray, IntArray

__all__ = ["RatioMoments", "normal_quantile", "prefix_estimates"]

#: (n, ā, b̄, C_aa, C_bb, C_ab): :meth:`RatioMoments.total`
Totals = tuple[int, float, float, float, float, float]


def normal_quantile(level: float) -> float:
    """Two-sided standard-normal quantile z with P(|Z| ≤ z) = level.

    >>> round(normal_quantile(0.95), 4)
    1.96
    """
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    return float(special.ndtri(0.5 + level / 2))


def prefix_estimates(
    before: Totals, a: FloatArray, b: FloatArray, ends: IntArray, z: float
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Estimates and normal intervals after the first ``ends[j]`` terms of a chunk.

    ``before`` is :meth:`RatioMoments.total` before the chunk. Vectorised: segment sums of the
    terms shifted by the running means (one pass), cumulated and Chan-merged with ``before`` —
    what a running curve needs inside a chunk without updating the moments term by term.

    >>> m = RatioMoments(); m.update(np.array([1.0, 3.0]), np.ones(2))
    >>> v, lo, hi = prefix_estimates(m.total(), np.array([5.0, 7.0]), np.ones(2),
    ...                              np.array([1, 2]), 1.96)
    >>> v.tolist()
    [3.0, 4.0]
    """
    n1, ma1, mb1, caa1, cbb1, cab1 = before
    if n1 == 0:
        ma1, mb1 = float(a[0]), float(b[0])
    da = a - ma1
    db = b - mb1
    starts = np.r_[0, ends[:-1]]
    seg = [np.add.reduceat(x, starts) for x in (da, db, da * da, db * db, da * db)]
    sa, sb, saa, sbb, sab = (np.cumsum(x) for x in seg)
    n2 = ends.astype(np.float64)
    # prefix statistics (about their own means), then Chan's merge with ``before``
    ma2 = ma1 + sa / n2
    mb2 = mb1 + sb / n2
    caa2 = saa - sa * sa / n2
    cbb2 = sbb - sb * sb / n2
    cab2 = sab - sa * sb / n2
    n = n1 + n2
    f = n1 * n2 / n
    ma = (n1 * ma1 + n2 * ma2) / n
    mb = (n1 * mb1 + n2 * mb2) / n
    caa = caa1 + caa2 + (ma2 - ma1) ** 2 * f
    cbb = cbb1 + cbb2 + (mb2 - mb1) ** 2 * f
    cab = cab1 + cab2 + (ma2 - ma1) * (mb2 - mb1) * f
    with np.errstate(invalid="ignore", divide="ignore"):
        v = ma / mb
        var = (caa - 2 * v * cab + v * v * cbb) / np.maximum(n - 1, 1)
        se = np.where(n >= 2, np.sqrt(np.maximum(var, 0.0) / n) / np.abs(mb), np.nan)
    return v, v - z * se, v + z * se


class RatioMoments:
    """Count, means and centred co-moments of (a, b) per position, for V = ā / b̄.

    Positions are non-negative integers (slots of a slate; 0 when there are none); the arrays
    grow when a new position appears. :meth:`total` merges the positions into the whole log.

    Examples
    --------
    >>> m = RatioMoments()
    >>> m.update(np.array([1.0, 2.0, 3.0]), np.ones(3))
    >>> m.update(np.array([4.0]), np.ones(1))
    >>> est = m.estimate()
    >>> est["value"], round(est["se"], 6), est["n"]
    (2.5, 0.645497, 4)
    >>> w = np.array([2.0, 0.0, 1.0, 1.0])           # SNIPS-like: a = w·r, b = w
    >>> m = RatioMoments(); m.update(w * np.array([1.0, 5.0, 0.0, 1.0]), w, np.array([0, 0, 1, 1]))
    >>> m.estimate()["value"], [round(p["value"], 3) for p in m.per_position()]
    (0.75, [1.0, 0.5])
    """

    def __init__(self) -> None:
        self.n: IntArray = np.zeros(0, dtype=np.int64)
        self.ma: FloatArray = np.zeros(0)
        self.mb: FloatArray = np.zeros(0)
        self.caa: FloatArray = np.zeros(0)
        self.cbb: FloatArray = np.zeros(0)
        self.cab: FloatArray = np.zeros(0)

    def _grow(self, size: int) -> None:
        extra = size - self.n.size
        if extra > 0:
            self.n = np.r_[self.n, np.zeros(extra, dtype=np.int64)]
            for name in ("ma", "mb", "caa", "cbb", "cab"):
                setattr(self, name, np.r_[getattr(self, name), np.zeros(extra)])

    def update(self, a: ArrayLike, b: ArrayLike, positions: ArrayLike | None = None) -> None:
        """Add one chunk of terms (a, b) with their positions (default: position 0)."""
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        if a.size == 0:
            return
        if positions is None:
            pos = np.zeros(a.size, dtype=np.int64)
            P = 1
        else:
            pos = np.asarray(positions, dtype=np.int64).reshape(-1)
            P = int(pos.max()) + 1
        self._grow(P)
        cnt = np.bincount(pos, minlength=P)
        seen = cnt > 0
        safe = np.maximum(cnt, 1)
        ma2 = np.bincount(pos, a, minlength=P) / safe
        mb2 = np.bincount(pos, b, minlength=P) / safe
        da = a - ma2[pos]
        db = b - mb2[pos]
        caa2 = np.bincount(pos, da * da, minlength=P)
        cbb2 = np.bincount(pos, db * db, minlength=P)
        cab2 = np.bincount(pos, da * db, minlength=P)
        n1 = self.n[:P].astype(np.float64)
        n2 = cnt.astype(np.float64)
        n = n1 + n2
        nn = np.where(seen, n, 1.0)
        dA = ma2 - self.ma[:P]
        dB = mb2 - self.mb[:P]
        f = np.where(seen, n1 * n2 / nn, 0.0)
        sl = slice(0, P)
        self.ma[sl] = np.where(seen, self.ma[:P] + dA * n2 / nn, self.ma[:P])
        self.mb[sl] = np.where(seen, self.mb[:P] + dB * n2 / nn, self.mb[:P])
        self.caa[sl] += caa2 + dA * dA * f
        self.cbb[sl] += cbb2 + dB * dB * f
        self.cab[sl] += cab2 + dA * dB * f
        self.n[sl] += cnt

    @staticmethod
    def _merge(
        n: IntArray,
        ma: FloatArray,
        mb: FloatArray,
        caa: FloatArray,
        cbb: FloatArray,
        cab: FloatArray,
    ) -> Totals:
        N = float(n.sum())
        if N == 0:
            return 0, 0.0, 0.0, 0.0, 0.0, 0.0
        MA = float((n * ma).sum() / N)
        MB = float((n * mb).sum() / N)
        CAA = float(caa.sum() + (n * (ma - MA) ** 2).sum())
        CBB = float(cbb.sum() + (n * (mb - MB) ** 2).sum())
        CAB = float(cab.sum() + (n * (ma - MA) * (mb - MB)).sum())
        return int(N), MA, MB, CAA, CBB, CAB

    def total(self) -> Totals:
        """(n, ā, b̄, C_aa, C_bb, C_ab) of the whole log (positions merged)."""
        return self._merge(self.n, self.ma, self.mb, self.caa, self.cbb, self.cab)

    @staticmethod
    def _estimate(
        n: int,
        ma: float,
        mb: float,
        caa: float,
        cbb: float,
        cab: float,
        z: float = 1.959963984540054,
    ) -> dict[str, Any]:
        if n == 0 or mb == 0:
            return {"value": math.nan, "se": math.nan, "n": int(n), "ci": [math.nan, math.nan]}
        v = ma / mb
        if n < 2:
            se = math.nan
        else:
            var = (caa - 2 * v * cab + v * v * cbb) / (n - 1)
            se = math.sqrt(max(var, 0.0) / n) / abs(mb)
        return {"value": v, "se": se, "n": int(n), "ci": [v - z * se, v + z * se]}

    def estimate(self, level: float = 0.95) -> dict[str, Any]:
        """Point estimate, delta-method standard error and normal interval of the whole log."""
        return self._estimate(*self.total(), z=normal_quantile(level))

    def per_position(self, level: float = 0.95) -> list[dict[str, Any]]:
        """The same, separately for every position seen (index = position)."""
        z = normal_quantile(level)
        out = []
        for p in range(self.n.size):
            est = self._estimate(
                int(self.n[p]),
                float(self.ma[p]),
                float(self.mb[p]),
                float(self.caa[p]),
                float(self.cbb[p]),
                float(self.cab[p]),
                z=z,
            )
            est["position"] = p
            out.append(est)
        return out

    @property
    def count(self) -> int:
        return int(self.n.sum())
