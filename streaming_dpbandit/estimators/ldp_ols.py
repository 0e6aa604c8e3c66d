"""LDP-OLS server: exact sums of privatised (M, u) reports and the shifted solve (spec §4.2).

State: V = Σ sym(M_i), U = Σ u_i and the count t — commutative sums, so shards (partitions,
replicas) can be merged and late or out-of-order reports are harmless. Every privatised value is
rounded to the grid 2⁻¹⁶ and summed as int64 in units of 2⁻¹⁶, so the sums are *exact*: the same
reports give bit-identical statistics in any order, batching or merge tree (rounding a released
value is post-processing). Reports are bounded by the caller (the service rejects entries above
``MAX_ABS``), so int64 cannot overflow for any realistic stream (2⁶³ units ≈ 1.4·10¹⁴ in value).

At each refresh (spec §4.2):

    A = V + c̃√t·I,   solve Aθ = U by Cholesky (never an explicit inverse);

if Cholesky fails, A (symmetrised) is eigendecomposed, its eigenvalues floored at c̃√t/2 and
θ̂ = QΛ⁻¹QᵀU; the fallback is counted and logged (no values). Then θ̂ ← Π_S(θ̂). This is all
post-processing. The shift constant is c̃ = 2τ(4√d + 2 ln(2T/α)) single-parameter (Thm 3.1) and
2τ(4√d + 2 ln(2TK/α)) multi-parameter (Thm 4.1), with τ the noise scale of the reports.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from scipy import linalg

from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .ldp_sgd import project_l2

__all__ = ["LDPOLS", "MAX_ABS", "ols_shift_constant", "quantize_int"]

log = logging.getLogger("streaming_dpbandit.estimators.ldp_ols")

QBITS = 16
_SCALE = float(1 << QBITS)
#: Largest privatised entry accepted (the service dead-letters larger ones).
MAX_ABS = 1e6


def quantize_int(a: ArrayLike) -> IntArray:
    """Round to the grid 2⁻¹⁶, as int64 multiples of 2⁻¹⁶.

    >>> quantize_int(np.array([0.5, -1.0, 2**-17])).tolist()
    [32768, -65536, 0]
    """
    a = np.asarray(a, dtype=np.float64)
    if a.size and not np.abs(a).max() <= MAX_ABS:
        raise ValueError(f"report entries must be finite and at most {MAX_ABS:g} in magnitude")
    return np.rint(a * _SCALE).astype(np.int64)


def ols_shift_constant(
    tau: float, d: int, horizon: int, alpha: float = 0.1, K: int | None = None
) -> float:
    """c̃ = 2τ(4√d + 2 ln(2T/α)) (single) or 2τ(4√d + 2 ln(2TK/α)) (multi, K arms).

    Golden values of spec §4.2 (α = 0.1, T = 10⁶):

    >>> round(ols_shift_constant(6.2149, 2, 10**6), 1), round(ols_shift_constant(13.2918, 2,
    ...     10**6, K=10), 1), round(ols_shift_constant(10.1493, 20, 10**6, K=3), 1)
    (488.2, 1166.6, 1090.2)
    """
    k = 1 if K is None else K
    return 2.0 * tau * (4.0 * math.sqrt(d) + 2.0 * math.log(2.0 * horizon * k / alpha))


class LDPOLS:
    """Exact sufficient statistics of LDP-OLS and their shifted solve.

    Parameters
    ----------
    d
        Dimension.
    c_tilde
        Shift constant c̃ (0: no shift, θ̂ = V⁻¹U as in the authors' single-parameter code).
    S
        Projection radius of θ̂ (``None``: none).

    Examples
    --------
    >>> import numpy as np
    >>> ols = LDPOLS(d=2, c_tilde=0.0, S=None)
    >>> ols.learn_many(np.array([[1.0, 0.0, 1.0]]), np.array([[2.0, 3.0]]))   # V = I, U = (2, 3)
    >>> ols.count, ols.solve().tolist()
    (1, [2.0, 3.0])
    >>> other = LDPOLS(d=2, c_tilde=0.0, S=None)
    >>> other.learn_many(np.array([[1.0, 0.0, 1.0]]), np.array([[0.0, 1.0]]))
    >>> ols.merge(other).solve().tolist()                                      # (2I)⁻¹(2, 4)
    [1.0, 2.0]

    """

    def __init__(self, d: int, c_tilde: float = 0.0, S: float | None = 1.0):
        if d < 1 or c_tilde < 0:
            raise ValueError("need d >= 1 and c_tilde >= 0")
        self.d = d
        self.c_tilde = float(c_tilde)
        self.S = S
        self.p = d * (d + 1) // 2
        self._V = np.zeros(self.p, dtype=np.int64)
        self._U = np.zeros(d, dtype=np.int64)
        self.count = 0
        self.pd_fallbacks = 0
        self._rows, self._cols = np.triu_indices(d)

    def learn_many(self, M: ArrayLike, u: ArrayLike) -> None:
        """Add reports: packed matrices M (n, d(d+1)/2) and vectors u (n, d)."""
        M = np.atleast_2d(M)
        u = np.atleast_2d(u)
        if M.shape[1] != self.p or u.shape[1] != self.d or M.shape[0] != u.shape[0]:
            raise ValueError(f"expected M (n, {self.p}) and u (n, {self.d})")
        self._V += quantize_int(M).sum(axis=0)
        self._U += quantize_int(u).sum(axis=0)
        self.count += M.shape[0]

    def merge(self, other: LDPOLS) -> LDPOLS:
        """Add another shard's sums (exact, commutative)."""
        if other.d != self.d:
            raise ValueError("cannot merge statistics of different dimensions")
        self._V += other._V
        self._U += other._U
        self.count += other.count
        return self

    def gram(self) -> FloatArray:
        """V (d × d, symmetric) in float64."""
        out = np.empty((self.d, self.d))
        v = self._V / _SCALE
        out[self._rows, self._cols] = v
        out[self._cols, self._rows] = v
        return out

    def vector(self) -> FloatArray:
        """U in float64."""
        return self._U / _SCALE

    def solve(self, t: int | None = None) -> FloatArray:
        """θ̂ = Π_S((V + c̃√t I)⁻¹U); ``t`` defaults to this model's report count."""
        t = self.count if t is None else t
        shift = self.c_tilde * math.sqrt(max(t, 0))
        A = self.gram()
        U = self.vector()
        if shift > 0:
            A[np.diag_indices(self.d)] += shift
            try:
                theta = linalg.cho_solve(linalg.cho_factor(A, check_finite=False), U)
            except linalg.LinAlgError:
                self.pd_fallbacks += 1
                log.warning(
                    "ldp-ols: shifted Gram not positive definite after %d reports; "
                    "eigenvalue floor at c̃√t/2 used (fallback %d)",
                    t,
                    self.pd_fallbacks,
                )
                lam, Q = np.linalg.eigh(0.5 * (A + A.T))
                lam = np.maximum(lam, shift / 2.0)
                theta = Q @ ((Q.T @ U) / lam)
        else:  # no shift (the authors' single-parameter code): plain V⁻¹U
            if self.count == 0:
                theta = np.zeros(self.d)
            else:
                try:
                    theta = np.linalg.solve(A, U)
                except np.linalg.LinAlgError:
                    self.pd_fallbacks += 1
                    theta = np.linalg.lstsq(A, U, rcond=None)[0]
        return project_l2(np.asarray(theta, dtype=np.float64), self.S)

    def state_dict(self) -> dict[str, Any]:
        return {
            "V": self._V.copy(),
            "U": self._U.copy(),
            "count": self.count,
            "pd_fallbacks": self.pd_fallbacks,
        }

    def load_state_dict(self, state: dict[str, Any]) -> LDPOLS:
        self._V = np.array(state["V"], dtype=np.int64)
        self._U = np.array(state["U"], dtype=np.int64)
        self.count = int(state["count"])
        self.pd_fallbacks = int(state["pd_fallbacks"])
        return self
