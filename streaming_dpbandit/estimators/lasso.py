"""Lasso by cyclic coordinate descent on sufficient statistics (non-private).

Solves  min_w (1/(2n))‖y − Xw‖² + α‖w‖₁  (no intercept) from G = XᵀX, h = Xᵀy and yᵀy, which a
streaming baseline can maintain incrementally. The stopping rule is scikit-learn's
(``Lasso(tol=...)``): when the largest coordinate update of a sweep is below ``tol`` times the
largest coefficient, the duality gap is computed, and the solver stops once the gap is below
``tol·yᵀy``; gap-safe screening (Fercoq et al. 2015) drops coordinates that must be zero.
``tests/estimators/test_lasso.py`` checks the solutions against scikit-learn's.
"""

from __future__ import annotations

import math

import numpy as np

from ..utils.arrays import BoolArray, FloatArray

__all__ = ["lasso_gram"]


def _gap(
    w: FloatArray, alpha: float, Gw: FloatArray, h: FloatArray, yty: float
) -> tuple[float, float, FloatArray]:
    """Duality gap (scikit-learn's formulation, penalty α scaled by n) and ‖Xᵀr‖_∞."""
    q_dot_w = float(w @ h)
    r_norm2 = yty + float(w @ Gw) - 2.0 * q_dot_w
    ry = yty - q_dot_w
    xta = h - Gw
    dual = float(np.max(np.abs(xta))) if xta.size else 0.0
    if dual > alpha:
        const = alpha / dual
        gap = 0.5 * (r_norm2 + r_norm2 * const * const)
    else:
        const = 1.0
        gap = r_norm2
    gap += alpha * float(np.abs(w).sum()) - const * ry
    return gap, dual, xta


def lasso_gram(
    G: FloatArray,
    h: FloatArray,
    yty: float,
    n: int,
    alpha: float,
    tol: float = 1e-3,
    max_iter: int = 1000,
    w0: FloatArray | None = None,
) -> FloatArray:
    """Lasso coefficients from Gram statistics.

    Parameters
    ----------
    G, h, yty
        XᵀX, Xᵀy and yᵀy of the n rows.
    n
        Number of rows (the loss is averaged over n).
    alpha
        Penalty α of the averaged loss, as in ``sklearn.linear_model.Lasso``.
    tol, max_iter
        scikit-learn's tolerance and sweep limit.
    w0
        Starting point (default zeros, as a fresh scikit-learn estimator).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 5))
    >>> y = X @ np.array([1.5, 0, 0, -2.0, 0]) + 0.1 * rng.normal(size=200)
    >>> w = lasso_gram(X.T @ X, X.T @ y, float(y @ y), n=200, alpha=0.05)
    >>> np.abs(np.round(w, 1)).tolist()
    [1.4, 0.0, 0.0, 2.0, 0.0]

    """
    d = h.shape[0]
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)
    if n <= 0 or d == 0:
        return w
    l1 = alpha * n  # scikit-learn scales the penalty by n internally
    gtol = tol * yty
    Gw = G @ w
    diag = np.diag(G).copy()
    if l1 <= 0:
        raise ValueError("alpha must be positive")
    gap, dual, xta = _gap(w, l1, Gw, h, yty)
    if 0 <= gap <= gtol:
        return w
    active: BoolArray = np.ones(d, dtype=bool)

    def screen(gap: float, dual: float, xta: FloatArray) -> None:
        radius = math.sqrt(2.0 * abs(gap)) / l1
        with np.errstate(divide="ignore", invalid="ignore"):
            dj = (1.0 - np.abs(xta / max(l1, dual))) / np.sqrt(diag)
        drop = active & ((diag == 0) | (dj > radius))
        for j in np.nonzero(drop & (w != 0))[0]:
            Gw[:] -= w[j] * G[j]
            w[j] = 0.0
        active[drop] = False

    screen(gap, dual, xta)
    for it in range(max_iter):
        w_max = 0.0
        d_w_max = 0.0
        for j in np.nonzero(active)[0].tolist():
            gjj = diag[j]
            wj = w[j]
            tmp = h[j] - Gw[j] + wj * gjj
            new = math.copysign(max(abs(tmp) - l1, 0.0), tmp) / gjj
            if new != wj:
                Gw += (new - wj) * G[j]
                w[j] = new
            dw = abs(new - wj)
            if dw > d_w_max:
                d_w_max = dw
            if abs(new) > w_max:
                w_max = abs(new)
        if w_max == 0.0 or d_w_max / w_max <= tol or it == max_iter - 1:
            gap, dual, xta = _gap(w, l1, Gw, h, yty)
            if gap <= gtol:
                break
            screen(gap, dual, xta)
    return w
