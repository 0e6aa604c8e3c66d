"""A private clip scale: the median of |ỹ| over one episode's rows, by report-noisy-max.

FLIPHAT's ``grad_clip="private"`` (issue 35; derivation in
``docs/privacy/fliphat-noise-reduction.md`` §7) needs a scale for its contribution clip G that
does not come from a loose public bound. The rows of the first episode are histogrammed by |ỹ|
on a fixed public grid c_m = 2^{m/4} (m = −40 … 40: 2⁻¹⁰ … 2¹⁰); at the first fit the grid point
closest to the median is released by report-noisy-max:

    u_m = −| #{i : |ỹ_i| ≤ c_m} + (n − rows) − n/2 |,    m* = argmax_m (u_m + Lap(2/ε_q)),

with n the fit's public nominal size (a missing row is a zero row, |0| ≤ every c_m). Replacing one
row moves one row's bin, so every count, hence every u_m, moves by at most 1: report-noisy-max
with Laplace scale 2/ε_q is pure ε_q-DP (the factor 2: the u_m need not move in one direction).

Nothing here logs; the histogram is raw-derived (snapshot only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .noise import NoiseGenerator

if TYPE_CHECKING:  # privacy/ and utils/ are independent layers: annotations only
    from ..utils.arrays import ArrayLike, FloatArray, IntArray

__all__ = ["SCALE_GRID", "scale_bins", "scale_release"]

#: The public candidates c_m = 2^{m/4}, m = −40 … 40.
SCALE_GRID: FloatArray = 2.0 ** (np.arange(-40, 41, dtype=np.float64) / 4.0)


def scale_bins(values: ArrayLike) -> IntArray:
    """Histogram of |values| over :data:`SCALE_GRID`: bin m counts c_{m−1} < |v| ≤ c_m (bin 0:
    |v| ≤ c_0; the last bin, len(grid): above every candidate).

    >>> scale_bins([0.0, 1.0, 1.1, -2.0, 5e9])[[0, 40, 41, 44, 81]].tolist()
    [1, 1, 1, 1, 1]
    """
    v = np.abs(np.asarray(values, dtype=np.float64)).reshape(-1)
    if not np.isfinite(v).all():
        raise ValueError("values must be finite")
    idx = np.searchsorted(SCALE_GRID, v, side="left")
    return np.bincount(idx, minlength=SCALE_GRID.size + 1).astype(np.int64)


def scale_release(hist: ArrayLike, n: int, epsilon: float, rng: NoiseGenerator) -> float:
    """The released median candidate: report-noisy-max over the grid, pure ε-DP (module doc).

    ``hist`` is the histogram of :func:`scale_bins` over the fit's rows (at most ``n`` of them).

    >>> rng = np.random.default_rng(0)
    >>> h = scale_bins(np.linspace(0.5, 1.5, 1000))
    >>> scale_release(h, 1000, 50.0, rng)  # the grid point nearest the median |ỹ| = 1
    1.0
    """
    h = np.asarray(hist, dtype=np.int64)
    if h.shape != (SCALE_GRID.size + 1,) or h.min() < 0:
        raise ValueError("hist must be a histogram of scale_bins")
    rows = int(h.sum())
    if rows > n or not (epsilon > 0):
        raise ValueError("need at most n rows and epsilon > 0")
    below = np.cumsum(h)[:-1] + (n - rows)  # #{|ỹ| ≤ c_m}, missing rows counting as zeros
    util = -np.abs(below - n / 2.0)
    noisy = rng.laplace(util, 2.0 / epsilon)  # the utility as loc (secure backends round it)
    return float(SCALE_GRID[int(np.argmax(noisy))])
