"""Rows a = [x; y] of the DP-LinUCB Gram aggregators: clipping, grid rounding, exact sums.

Spec §1 (A6) and §10 item 3: every inserted row must satisfy ‖a‖² = ‖x‖² + y² ≤ L̃² = L² + B̃².
:func:`prepare_rows` enforces it *before* a row touches a private computation: non-finite input
is rejected, x is scaled to norm ≤ L and y clipped to [−B̃, B̃]; the numbers of clipped actions
and rewards are returned (counted as metrics, values never logged).

What counts as clipped: an action whose norm exceeds the *declared* bound L, i.e. whose computed
‖x‖² exceeds L²·(1 + (d + 2)·2⁻⁵²) — above every float64 rounding error of the computed
squared norm ((d + 1)·2⁻⁵³ relative), so a unit-normalised x (‖x‖ = L up to an ulp) is never
counted, and an x counted is certainly over L. Rows between the rounding margin Lq below and L
are still scaled to Lq (the grid margin, part of rounding, not of clipping) but not counted: the
count used to include every such row, which made "clipped actions" ≈ 100 % on
unit-normalised streams (issue 22 §3). A reward counts when clipping changed it.

Rows are also rounded to the grid 2⁻¹⁶ so that the exact prefix sum M = Σ a aᵀ can be kept as
integers (units of 2⁻³²): the same rows then give a bit-identical M in any order and any
micro-batching, so a release recomputed after a crash from the same rows and the same noise
identities is bit-identical too (and the ledger recognises the retry). The clip bounds are
lowered by the worst-case rounding (√d·2⁻¹⁷ for x, to the grid for y), so rounding can never
cross L or B̃.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .symmetric import packing

__all__ = [
    "GRID",
    "exact_gram_units",
    "overflowing_norms",
    "prepare_rows",
    "units_to_float",
]

QBITS = 16
GRID = 2.0**-QBITS
_MAGIC = 1.5 * 2.0 ** (52 - QBITS)  # x + M − M rounds x to the 2⁻¹⁶ grid (|x| < 2³⁵)
_UNIT = 2.0 ** (2 * QBITS)
_EXACT = 2.0 ** (52 - 2 * QBITS)  # float64 partial sums of 2⁻³²-grid products stay exact below


@functools.lru_cache(maxsize=64)
def _ones(d: int) -> np.ndarray:
    v = np.ones(d)
    v.flags.writeable = False
    return v


def _round_grid(a: np.ndarray) -> np.ndarray:
    a += _MAGIC
    a -= _MAGIC
    return a


def prepare_rows(
    X: npt.ArrayLike, y: npt.ArrayLike, L: float, B_tilde: float
) -> tuple[npt.NDArray[np.float64], int, int]:
    """Clip and round (x, y) into rows a = [x; y] with ‖a‖ ≤ √(L² + B̃²).

    Returns (rows (n, d+1), clipped actions, clipped rewards).

    >>> rows, cx, cy = prepare_rows(np.array([[3.0, 4.0], [0.3, 0.4]]), np.array([2.0, -0.5]),
    ...                             L=1.0, B_tilde=1.0)
    >>> np.round(rows, 4).tolist(), cx, cy
    ([[0.6, 0.8, 1.0], [0.3, 0.4, -0.5]], 1, 1)
    >>> bool(np.all((rows ** 2).sum(axis=1) <= 2.0))
    True
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    n: int
    d: int
    n, d = X.shape
    Lq = L - math.sqrt(d) * GRID / 2  # rounding moves x by at most √d·2⁻¹⁷
    if Lq <= 0:
        raise ValueError("L is too small for the 2^-16 grid")
    out = np.empty((n, d + 1))
    xo = out[:, :d]
    sq = np.multiply(X, X) @ _ones(d)
    norms_overflow = None
    # one reduction each: NaN or ±inf anywhere makes the sum non-finite
    if not (math.isfinite(np.add.reduce(sq)) and math.isfinite(np.add.reduce(y))):
        if not (np.isfinite(X).all() and np.isfinite(y).all()):
            raise ValueError("contexts and rewards must be finite (NaN/inf rows are rejected)")
        norms_overflow = overflowing_norms(X, sq)
    big = sq > Lq * Lq
    n_big = int(np.count_nonzero(big))
    n_x = 0
    if n_big:
        # over the declared L beyond rounding (overflowed rows have sq = inf: counted)
        n_x = int(np.count_nonzero(sq > L * L * (1.0 + (d + 2) * 2.0**-52)))
        # x ← x·min(1, Lq/‖x‖) for every row in one pass (factor exactly 1.0 where ‖x‖ ≤ Lq)
        f = np.sqrt(sq, out=sq)
        if norms_overflow is not None:
            f[norms_overflow[0]] = norms_overflow[1]
        np.maximum(f, Lq, out=f)
        np.divide(Lq, f, out=f)
        np.multiply(X, f[:, None], out=xo)
    else:
        np.copyto(xo, X)
    Bq = math.floor(B_tilde / GRID) * GRID
    yo = out[:, d]
    np.maximum(y, -Bq, out=yo)  # ufuncs: np.clip's Python wrapper costs more than the work
    np.minimum(yo, Bq, out=yo)
    n_y = int(np.count_nonzero(yo != y))
    _round_grid(out)
    return out, n_x, n_y


def overflowing_norms(X: np.ndarray, sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of finite X whose ‖x‖² overflows float64: their indices and norms, by rescaling."""
    rows = np.flatnonzero(~np.isfinite(sq))
    part = X[rows]
    top = np.abs(part).max(axis=1, keepdims=True)
    part /= top
    return rows, top[:, 0] * np.sqrt(np.multiply(part, part).sum(axis=1))


def exact_gram_units(rows: npt.NDArray[np.float64], row_norm_sq: float) -> npt.NDArray[np.int64]:
    """Packed Σ a aᵀ of grid rows as exact int64 multiples of 2⁻³².

    ``row_norm_sq`` bounds ‖a‖²; rows are summed by BLAS in chunks whose partial sums are
    exactly representable in float64, then converted to integers.

    >>> r = np.array([[0.5, 0.25], [1.0, -0.5]])
    >>> units_to_float(exact_gram_units(r, 1.25)).tolist()
    [1.25, -0.375, 0.3125]
    """
    p = rows.shape[1]
    upper = _upper_flat(p)
    chunk = max(1, int(_EXACT // max(row_norm_sq, GRID * GRID)))
    if rows.shape[0] <= chunk:  # the common case: one exact BLAS product
        # a contiguous copy of rows.T makes this a plain GEMM: numpy sends `rows.T @ rows` to
        # SYRK, 25% slower at these shapes (exactness does not depend on the summation order)
        G = np.dot(rows.T.copy(), rows).ravel()[upper]
        G *= _UNIT
        units: npt.NDArray[np.int64] = G.astype(np.int64)
        return units
    total = np.zeros(upper.size, dtype=np.int64)
    for i in range(0, rows.shape[0], chunk):
        part = rows[i : i + chunk]
        G = (part.T @ part).ravel()[upper]
        G *= _UNIT
        total += G.astype(np.int64)
    return total


@functools.lru_cache(maxsize=64)
def _upper_flat(p: int) -> np.ndarray:
    """Row-major flat positions of the packed upper triangle of a (p × p) matrix."""
    pk = packing(p)
    idx = pk.rows * p + pk.cols
    idx.flags.writeable = False
    return idx


def units_to_float(units: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """int64 (or exact Python int) multiples of 2⁻³² back to float64."""
    return units.astype(np.float64) / _UNIT
