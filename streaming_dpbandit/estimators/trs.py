"""Trust-region subproblem TRS(A, b, C): min θᵀAθ − 2bᵀθ subject to ‖θ‖₂ ≤ C (spec §2).

A is symmetric, possibly indefinite (a noisy Gram). With A = QΛQᵀ and b′ = Qᵀb:

* if λ_min > 0 and ‖b′/Λ‖ ≤ C, the interior solution Q(b′/Λ);
* otherwise the boundary solution Q(b′/(Λ + ν)) with ν > max(0, −λ_min) found by bisection on
  ‖b′/(Λ + ν)‖ = C (relative tolerance 1e−10);
* in the *hard case* (b′ has no weight on the bottom eigenspace and the secular equation has no
  root above −λ_min) ν = −λ_min and the bottom eigenvector is added to reach the boundary.

This is post-processing of a private release: it costs no privacy.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import ArrayLike, FloatArray

__all__ = ["trs"]


def trs(A: ArrayLike, b: ArrayLike, C: float, rtol: float = 1e-10) -> FloatArray:
    """Solve the trust-region subproblem.

    Examples
    --------
    >>> import numpy as np
    >>> trs(np.eye(2), np.array([0.3, 0.4]), 1.0).tolist()     # interior
    [0.3, 0.4]
    >>> np.round(trs(np.eye(2), np.array([3.0, 4.0]), 1.0), 6).tolist()  # boundary
    [0.6, 0.8]
    >>> np.round(trs(-np.eye(2), np.array([0.0, 0.0]), 2.0), 6).tolist()  # hard case
    [2.0, 0.0]

    """
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    p = b.shape[0]
    if A.shape != (p, p):
        raise ValueError("A must be p×p and b of length p")
    if p == 0:
        return np.zeros(0)
    if not C > 0:
        raise ValueError("the radius C must be positive")
    lam, Q = np.linalg.eigh((A + A.T) / 2.0)
    bp = Q.T @ b
    lmin = float(lam[0])
    scale = max(1.0, float(np.max(np.abs(lam))))
    if lmin > 0:
        x = bp / lam
        if float(np.linalg.norm(x)) <= C:
            interior: FloatArray = Q @ x
            return interior
    bnorm = float(np.linalg.norm(bp))
    lo = max(0.0, -lmin)
    bottom = lam - lmin <= 1e-12 * scale
    if lmin <= 0 and (bnorm == 0.0 or np.all(np.abs(bp[bottom]) <= 1e-14 * max(bnorm, 1e-300))):
        # possible hard case: the secular function stays finite at ν = −λ_min
        rest = ~bottom
        x = np.zeros(p)
        x[rest] = bp[rest] / (lam[rest] + lo)
        r = float(np.linalg.norm(x))
        if r <= C:
            x[np.nonzero(bottom)[0][0]] = math.sqrt(max(C * C - r * r, 0.0))
            return Q @ x
    # bisection for ‖b′/(Λ + ν)‖ = C on (lo, hi]: at hi every λ_i + ν ≥ ‖b′‖/C
    hi = lo + bnorm / C
    lo_b = lo
    for _ in range(200):
        mid = 0.5 * (lo_b + hi)
        den = lam + mid
        if np.any(den <= 0):
            lo_b = mid
            continue
        r = float(np.linalg.norm(bp / den))
        if abs(r - C) <= rtol * C:
            hi = mid
            break
        if r > C:
            lo_b = mid
        else:
            hi = mid
        if hi - lo_b <= 1e-15 * max(1.0, hi):
            break
    boundary: FloatArray = Q @ (bp / (lam + hi))
    return boundary
