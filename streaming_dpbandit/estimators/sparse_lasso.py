"""Lasso on sparse rows by a working-set method (non-private baselines, spec §6).

Solves min_w (1/(2n))‖y − Zw‖² + α‖w‖₁ (no intercept; scikit-learn's normalisation) for a CSR
design Z with d possibly much larger than what a d×d Gram matrix allows (d = 10⁴–10⁵ with a few
non-zeros per row). Working set A: start from the warm start's support plus the coordinates
violating the optimality condition |Z_jᵀr|/n ≤ α; solve the restricted problem exactly with
:func:`~.lasso.lasso_gram` on the small dense Gram Z_AᵀZ_A; recompute the full correlation
Zᵀr/n with one sparse product; add the violators; repeat until there are none. The result
satisfies the full problem's optimality conditions up to the inner solver's duality gap.

The baselines release nothing, so any solver is acceptable (spec §6); this one costs
O(nnz(Z)) per outer pass plus O(n·|A|) for the restricted Gram.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from ..utils.arrays import ArrayLike, FloatArray, IntArray
from .lasso import lasso_gram

__all__ = ["lasso_rows", "least_squares_rows"]


def lasso_rows(
    Z: sparse.csr_matrix,
    y: ArrayLike,
    alpha: float,
    w0: ArrayLike | None = None,
    tol: float = 1e-6,
    max_outer: int = 100,
    max_add: int = 200,
) -> FloatArray:
    """Lasso coefficients (d,) for the rows of ``Z`` (n × d) and rewards ``y``.

    ``tol`` is the inner duality-gap tolerance relative to yᵀy (scikit-learn's meaning);
    ``max_add`` caps how many violators enter the working set per outer pass.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import sparse
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 50)) * (rng.random((300, 50)) < 0.2)
    >>> y = X[:, 3] * 2.0 - X[:, 7] + 0.01 * rng.normal(size=300)
    >>> w = lasso_rows(sparse.csr_matrix(X), y, alpha=0.01)
    >>> np.nonzero(np.abs(w) > 0.1)[0].tolist(), np.round(w[[3, 7]], 1).tolist()
    ([3, 7], [1.9, -0.9])

    """
    Z = sparse.csr_matrix(Z)
    y = np.asarray(y, dtype=np.float64)
    n, d = Z.shape
    w = np.zeros(d) if w0 is None else np.array(w0, dtype=np.float64)
    if n == 0:
        return np.zeros(d)
    Zc = Z.tocsc()
    yty = float(y @ y)
    corr_y = Zc.T @ y  # Zᵀy
    active: IntArray = np.nonzero(w)[0]

    def solve(active: IntArray) -> IntArray:
        ZA = Zc[:, active].toarray()
        wA = lasso_gram(ZA.T @ ZA, ZA.T @ y, yty, n, alpha, tol=tol, max_iter=10_000, w0=w[active])
        w[:] = 0.0
        w[active] = wA
        support: IntArray = active[wA != 0]
        return support

    if active.size:  # a warm start is re-optimised on its support before the KKT check
        active = solve(active)
    for _ in range(max_outer):
        r_fit = Zc[:, active] @ w[active] if active.size else np.zeros(n)
        grad = (corr_y - Zc.T @ r_fit) / n  # Zᵀ(y − Zw)/n
        viol = np.abs(grad) > alpha * (1.0 + 1e-9)
        viol[active] = False
        cand = np.nonzero(viol)[0]
        if cand.size == 0:
            break
        if cand.size > max_add:
            cand = cand[np.argsort(-np.abs(grad[cand]), kind="stable")[:max_add]]
        active = solve(np.union1d(active, cand))
    return w


def least_squares_rows(Z: sparse.csr_matrix, y: ArrayLike, support: ArrayLike) -> FloatArray:
    """Least squares of y on the columns ``support`` of Z (minimum-norm if rank-deficient).

    >>> import numpy as np
    >>> from scipy import sparse
    >>> Z = sparse.csr_matrix(np.array([[1.0, 0, 2], [0, 1.0, 0], [1.0, 1.0, 0]]))
    >>> np.round(least_squares_rows(Z, np.array([1.0, 2.0, 3.0]), np.array([0, 1])), 6).tolist()
    [1.0, 2.0, 0.0]
    """
    d = Z.shape[1]
    out = np.zeros(d)
    support = np.asarray(support, dtype=np.int64)
    if support.size == 0 or Z.shape[0] == 0:
        return out
    ZS = sparse.csc_matrix(Z)[:, support].toarray()
    coef, *_ = np.linalg.lstsq(ZS, np.asarray(y, dtype=np.float64), rcond=None)
    out[support] = coef
    return out
