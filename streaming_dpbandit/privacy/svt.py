"""Sparse Vector Technique, "Sparse" form with correct threshold handling (PrivateLASSO spec M2).

::

    SVT(q ∈ R^m, τ, σ, c):                   # queries in a fixed, data-independent order
        S ← [] ; τ̂ ← τ + Lap(σ) ; h ← 0
        for i in order:
            h ← h + 1
            if q_i + Lap(2σ) ≥ τ̂:            # fresh query noise at every comparison
                append i to S
                if |S| = c: break
                τ̂ ← τ + Lap(σ)                # threshold redrawn ONLY after a ⊤
        return S, h                           # (S, h) is the whole public transcript

Privacy (Dwork & Roth 2014, §3.6, Alg. 1–2 with δ = 0). If every query has sensitivity ≤ Δ,
one AboveThreshold run (threshold noise Lap(σ), query noise Lap(2σ)) is ε0-DP with
ε0 = 2Δ/σ, i.e. ε0²/2 = 2Δ²/σ² zCDP; the loop is at most c adaptively restarted runs, so one
call costs ρ_svt = 2cΔ²/σ² and a per-call budget ρ_b gives **σ = Δ·√(2c/ρ_b)**
(derivation: ``docs/privacy/private-lasso.md``).

Utility. For a query at q ≤ τ − a the pass probability of one comparison is at most
P(Lap(2σ) − Lap(σ) ≥ a) = (2/3)e^{−a/(2σ)} − (1/6)e^{−a/σ} (:func:`pass_probability`), hence
the mandatory margin a = 2σ·ln(m/(c − s0)) (:func:`svt_margin`).

The noise is drawn in a fixed layout — the c threshold draws first, then one query draw per
position — so a run is a deterministic function of its generator (a crash-retry that re-derives
the same noise stream reproduces the same transcript).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from .noise import NoiseGenerator
from .secure_noise import GRID_MARGIN

__all__ = [
    "SECURE_SVT_MARGIN",
    "SVTResult",
    "SparseVector",
    "pass_probability",
    "svt_epsilon0",
    "svt_margin",
    "svt_rho",
    "svt_sigma",
]


#: The secure backend's rounding term of one AboveThreshold run, in units of σ: a query value
#: is rounded to the grid of 2σ and the threshold to the grid of σ, so the coupling shift of the
#: threshold (a multiple of its grid) is at most Δ + grid(2σ) + grid(σ) ≤ Δ + 3σ·2⁻³⁰.
SECURE_SVT_MARGIN = 3.0 * GRID_MARGIN


def svt_sigma(sensitivity: float, cap: int, rho: float, margin: float = 0.0) -> float:
    """σ = Δ·√(2c/ρ_b): the SVT noise for a per-call zCDP budget ρ_b; with the secure
    backend's ``margin`` (:data:`SECURE_SVT_MARGIN`) σ = Δ/(√(ρ_b/2c) − margin), so that the
    effective sensitivity Δ + margin·σ still costs ρ_b.

    >>> round(svt_sigma(4.973e-4, 10, 0.011285), 5)
    0.02094
    """
    if not (sensitivity > 0 and cap >= 1 and rho > 0):
        raise ValueError("need sensitivity > 0, cap >= 1 and rho > 0")
    if not margin:
        return sensitivity * math.sqrt(2.0 * cap / rho)
    room = math.sqrt(rho / (2.0 * cap)) - margin
    if not room > 0:
        raise ValueError("the SVT budget is too small for the secure grid")
    return sensitivity / room


def svt_rho(sensitivity: float, sigma: float, cap: int, margin: float = 0.0) -> float:
    """zCDP cost 2cΔ²/σ² of one call (c AboveThreshold runs of ε0 = 2Δ/σ each; on the secure
    backend 2c(Δ/σ + margin)²).

    >>> svt_rho(1.0, 2.0, 3)
    1.5
    """
    if not margin:
        return 2.0 * cap * sensitivity * sensitivity / (sigma * sigma)
    r = sensitivity / sigma + margin
    return 2.0 * cap * r * r


def svt_epsilon0(sensitivity: float, sigma: float, margin: float = 0.0) -> float:
    """Pure ε0 = 2Δ/σ of one AboveThreshold run (2(Δ/σ + margin) on the secure backend).

    >>> svt_epsilon0(1.0, 4.0)
    0.5
    """
    if not margin:
        return 2.0 * sensitivity / sigma
    return 2.0 * (sensitivity / sigma + margin)


def svt_margin(sigma: float, m: int, cap: int, s0: int) -> float:
    """a = 2σ·ln(m/(c − s0)): expected null selections ≤ (2/3)(c − s0) (spec M2).

    >>> round(svt_margin(0.02094, 10_000, 10, 5), 4)
    0.3183
    """
    if not cap > s0:
        raise ValueError("the support cap c must exceed s0")
    return 2.0 * sigma * math.log(m / (cap - s0))


def pass_probability(a: npt.ArrayLike, sigma: float) -> npt.NDArray[np.float64]:
    """P(Lap(2σ) − Lap(σ) ≥ a): the pass probability of a query ``a`` below the threshold.

    For a ≥ 0 it is (2/3)e^{−a/(2σ)} − (1/6)e^{−a/σ}; the difference is symmetric, so
    P(· ≥ a) = 1 − P(· ≥ −a) for a < 0.

    >>> float(pass_probability(0.0, 1.0))
    0.5
    >>> round(float(pass_probability(2.0, 1.0) + pass_probability(-2.0, 1.0)), 12)
    1.0
    """
    a = np.asarray(a, dtype=np.float64)
    x = np.abs(a)
    upper = (2.0 / 3.0) * np.exp(-x / (2.0 * sigma)) - (1.0 / 6.0) * np.exp(-x / sigma)
    prob: npt.NDArray[np.float64] = np.where(a >= 0, upper, 1.0 - upper)
    return prob


@dataclasses.dataclass
class SVTResult:
    """Transcript of one SVT call: selected positions (in query order), halt index h, cap hit."""

    selected: npt.NDArray[np.int64]
    halted_at: int
    cap_hit: bool


class SparseVector:
    """The "Sparse" SVT of spec M2 with threshold ``tau``, noise ``sigma`` and cap ``cap``.

    Parameters
    ----------
    tau
        Public threshold τ (already including the margin a).
    sigma
        Threshold noise scale σ; query noise has scale 2σ.
    cap
        c, the maximal number of ⊤ answers (the loop stops at the c-th).

    Examples
    --------
    >>> import numpy as np
    >>> svt = SparseVector(tau=1.0, sigma=1e-3, cap=2)
    >>> res = svt.run(np.array([0.0, 5.0, 0.2, 3.0, 4.0]), np.random.default_rng(0))
    >>> res.selected.tolist(), res.halted_at, res.cap_hit
    ([1, 3], 4, True)
    >>> svt.run(np.zeros(4), np.random.default_rng(1)).halted_at  # nothing passes: all queried
    4

    """

    def __init__(self, tau: float, sigma: float, cap: int):
        self.tau = tau
        self.sigma = sigma
        self.cap = cap

    def _check(self) -> None:
        if not (self.sigma > 0 and self.cap >= 1 and math.isfinite(self.tau)):
            raise ValueError("need sigma > 0, cap >= 1 and a finite threshold")

    def run(
        self, q: npt.ArrayLike, rng: NoiseGenerator, order: npt.NDArray[np.int64] | None = None
    ) -> SVTResult:
        """One call on queries ``q`` taken in ``order`` (default 0, 1, …; must be data-free).

        ``selected`` holds indices into ``q``; ``halted_at`` counts the comparisons made.
        """
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 1:
            raise ValueError("SparseVector.run expects a vector of queries")
        if order is not None:
            order = np.asarray(order, dtype=np.int64)
            if order.shape != q.shape:
                raise ValueError("order must be a permutation of the query positions")
            q = q[order]
        pos, h = self.run_many(q[None, :], rng)
        sel = pos[0][pos[0] >= 0]
        if order is not None:
            sel = order[sel]
        return SVTResult(sel, int(h[0]), bool(sel.size == self.cap))

    def run_many(
        self, Q: npt.ArrayLike, rng: NoiseGenerator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Independent calls on each row of ``Q`` (n × m), in column order; vectorised.

        Returns (positions n × c, padded with −1; halt indices h (n,)). For one row the draws
        are exactly those of :meth:`run`: c threshold values, then m query values.
        """
        self._check()
        Q = np.asarray(Q, dtype=np.float64)
        if Q.ndim != 2:
            raise ValueError("expected a 2-D array of queries (n × m)")
        if not np.all(np.isfinite(Q)):
            raise ValueError("SVT queries contain NaN or infinite values")
        n, m = Q.shape
        c = self.cap
        # values as loc: a secure stream releases them on its grid (docs/privacy/secure-noise.md)
        thr = rng.laplace(self.tau, self.sigma, size=(n, c))
        noisy = rng.laplace(Q, 2.0 * self.sigma, size=(n, m))
        out = np.full((n, c), -1, dtype=np.int64)
        start = np.zeros(n, dtype=np.int64)  # next position to compare
        active = np.ones(n, dtype=bool)
        cols = np.arange(m)
        for k in range(c):
            rows = np.nonzero(active)[0]
            if rows.size == 0:
                break
            above = (noisy[rows] >= thr[rows, k][:, None]) & (cols[None, :] >= start[rows, None])
            found = above.any(axis=1)
            first = np.argmax(above, axis=1)
            hit = rows[found]
            out[hit, k] = first[found]
            start[hit] = first[found] + 1
            miss = rows[~found]
            start[miss] = m  # every remaining query was compared and failed
            active[miss] = False
        return out, start
