"""Elastic net with a certified sensitivity (PrivateLASSO spec M1).

For the records of a slot set B with public nominal size N::

    F(θ) = f(θ) + g(θ)
    f(θ) = (1/N) Σ_{s ∈ B, present} (r_s − ⟨x_s, θ⟩)² + (μ/2)‖θ‖₂²
    g(θ) = λ_N‖θ‖₁ + I{‖θ‖₂ ≤ C_θ}

Sensitivity. Each loss (r − ⟨x,θ⟩)² is L-Lipschitz on the ball with L = 2·B_x·(C_r + B_x·C_θ)
(an absent record has loss 0) and F is μ-strongly convex, so neighbouring minimisers satisfy
‖θ* − θ*′‖₂ ≤ Δ° := 2L/(μN) (Chaudhuri, Monteleoni & Sarwate 2011; derivation in
``docs/privacy/private-lasso.md``).

Solver. Proximal gradient from θ₀ = 0 with the public step η = 1/L_f, L_f = 2B_x² + μ, for
exactly k_max = ⌈(L_f/μ)·ln(C_θ/(γΔ°))⌉ iterations; the prox of g is Proj_{‖·‖₂ ≤ C_θ} ∘ Soft.
The map is a (1 − μ/L_f)-contraction and ‖θ₀ − θ*‖ ≤ C_θ, hence ‖θ̃ − θ*‖ ≤ γΔ° and the
**certified sensitivity of θ̃ is Δ = (1 + 2γ)·Δ°**. The iteration count depends on public
constants only: no acceleration, warm start or tolerance-based stopping (spec P4).

Determinism. With the same rows in the same (slot) order the iterations are bit-identical: the
sparse products run sequentially in C and the rows are exact grid values.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import sparse

from ..utils.arrays import ArrayLike, FloatArray

__all__ = ["CertifiedElasticNet", "ElasticNetFit", "prox_l1_l2ball"]


def prox_l1_l2ball(v: FloatArray, t: float, radius: float) -> FloatArray:
    """prox of t‖·‖₁ + I{‖·‖₂ ≤ radius}: soft-threshold, then project (along the last axis).

    >>> prox_l1_l2ball(np.array([3.0, -0.5, 4.5]), 0.5, 5.0).tolist()
    [2.5, -0.0, 4.0]
    >>> np.round(prox_l1_l2ball(np.array([3.0, 0.0, 4.5]), 0.5, 1.0), 4).tolist()
    [0.53, 0.0, 0.848]
    """
    s = np.sign(v) * np.maximum(np.abs(v) - t, 0.0)
    norm = np.linalg.norm(s, axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(norm > radius, radius / np.where(norm > 0, norm, 1.0), 1.0)
    return s * factor


@dataclasses.dataclass
class ElasticNetFit:
    """θ̃ (secret: only ever used through the SVT) and the solver's public constants."""

    theta: FloatArray
    iterations: int
    sensitivity: float
    residual_bound: float | None = None  # a-posteriori ‖θ̃ − θ*‖ bound (secret diagnostic)


class CertifiedElasticNet:
    """Proximal-gradient elastic net whose output has a certified ℓ2 sensitivity.

    Parameters
    ----------
    ridge
        μ, the ℓ2 weight (strong convexity).
    theta_bound
        C_θ, the radius of the ℓ2 constraint.
    clip_l2
        B_x, the public bound on ‖x‖₂ (enforced by clipping upstream).
    reward_bound
        C_r, the public bound on |r| (enforced by clipping upstream).
    slack
        γ, the solver slack: the output is within γΔ° of the exact minimiser.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy import sparse
    >>> en = CertifiedElasticNet(ridge=1.0, theta_bound=1.0, clip_l2=1.0, reward_bound=1.0)
    >>> en.lipschitz, en.smoothness, en.iterations(1000)
    (4.0, 3.0, 24)
    >>> Z = sparse.csr_matrix(np.eye(4)[[0, 1, 0, 1]])
    >>> fit = en.fit(Z, np.array([1.0, -1.0, 1.0, -1.0]), N=4, lam=0.1)
    >>> np.round(fit.theta, 3).tolist(), fit.iterations, round(fit.sensitivity, 4)
    ([0.45, -0.45, 0.0, 0.0], 7, 2.2)

    """

    def __init__(
        self,
        ridge: float = 1.0,
        theta_bound: float = 1.0,
        clip_l2: float = 1.0,
        reward_bound: float = 1.0,
        slack: float = 0.05,
    ):
        self.ridge = ridge
        self.theta_bound = theta_bound
        self.clip_l2 = clip_l2
        self.reward_bound = reward_bound
        self.slack = slack

    # -- public constants ------------------------------------------------------------------
    @property
    def lipschitz(self) -> float:
        """L = 2·B_x·(C_r + B_x·C_θ)."""
        return 2.0 * self.clip_l2 * (self.reward_bound + self.clip_l2 * self.theta_bound)

    @property
    def smoothness(self) -> float:
        """L_f = 2B_x² + μ (public bound on the curvature of f)."""
        return 2.0 * self.clip_l2**2 + self.ridge

    def sensitivity0(self, N: int) -> float:
        """Δ° = 2L/(μN): sensitivity of the exact minimiser."""
        if N < 1:
            raise ValueError("the nominal size N must be >= 1")
        return 2.0 * self.lipschitz / (self.ridge * N)

    def sensitivity(self, N: int) -> float:
        """Δ = (1 + 2γ)Δ°: certified ℓ2 sensitivity of the solver's output."""
        return (1.0 + 2.0 * self.slack) * self.sensitivity0(N)

    def iterations(self, N: int) -> int:
        """k_max = ⌈(L_f/μ)·ln(C_θ/(γΔ°))⌉ (0 when C_θ ≤ γΔ°)."""
        ratio = self.theta_bound / (self.slack * self.sensitivity0(N))
        if ratio <= 1.0:
            return 0
        return math.ceil(self.smoothness / self.ridge * math.log(ratio))

    def _check(self) -> None:
        if not (self.ridge > 0 and self.theta_bound > 0 and self.clip_l2 > 0):
            raise ValueError("need ridge > 0, theta_bound > 0 and clip_l2 > 0")
        if not (self.reward_bound >= 0 and self.slack > 0):
            raise ValueError("need reward_bound >= 0 and slack > 0")

    # -- the solver ------------------------------------------------------------------------
    def _iterate(
        self,
        matvec: Callable[[FloatArray], FloatArray],
        rmatvec: Callable[[FloatArray], FloatArray],
        y: FloatArray,
        N: int,
        lam: float,
        shape: tuple[int, ...],
        check: bool,
        k_max: int | None = None,
    ) -> tuple[FloatArray, int, Any]:
        self._check()
        k_max = self.iterations(N) if k_max is None else int(k_max)
        mu, eta, C = self.ridge, 1.0 / self.smoothness, self.theta_bound

        def grad(theta: FloatArray) -> FloatArray:
            return (2.0 / N) * rmatvec(matvec(theta) - y) + mu * theta

        theta: FloatArray = np.zeros(shape)
        prev: FloatArray | None = None
        g_prev: FloatArray | None = None
        for _ in range(k_max):
            g = grad(theta)
            prev, g_prev = theta, g
            theta = prox_l1_l2ball(theta - eta * g, eta * lam, C)
        bound = None  # (d,) ‖r‖/μ is a numpy scalar, (P, d) an array
        if check and prev is not None and g_prev is not None:
            # (θ − θ⁺)/η − ∇f(θ) + ∇f(θ⁺) ∈ ∂F(θ⁺), so μ‖θ⁺ − θ*‖ ≤ its norm
            r = (prev - theta) / eta - g_prev + grad(theta)
            bound = np.linalg.norm(r, axis=-1) / mu
        return theta, k_max, bound

    def fit(
        self,
        Z: FloatArray | sparse.spmatrix,
        y: ArrayLike,
        N: int,
        lam: float,
        check: bool = False,
    ) -> ElasticNetFit:
        """Solve on rows ``Z`` (n × d, scipy sparse or dense; n ≤ N present records) and ``y``.

        ``check=True`` also returns the a-posteriori bound ‖r‖/μ ≥ ‖θ̃ − θ*‖ of the last step
        (a secret diagnostic, never released).
        """
        y = np.asarray(y, dtype=np.float64)
        if Z.shape[0] != y.shape[0] or y.shape[0] > N:
            raise ValueError("need as many rewards as rows, and at most N rows")
        theta, k, bound = self._iterate(
            lambda t: Z @ t, lambda u: Z.T @ u, y, N, lam, (Z.shape[1],), check
        )
        return ElasticNetFit(theta, k, self.sensitivity(N), None if bound is None else float(bound))

    def fit_batch(
        self, Z: ArrayLike, y: ArrayLike, N: int, lam: float, iterations: int | None = None
    ) -> FloatArray:
        """The same iterations on P independent dense problems Z (P, n, d), y (P, n) at once.

        Used by the sensitivity tests and audits to solve many neighbouring pairs quickly; it
        runs :meth:`fit`'s loop with batched products. ``iterations`` overrides k_max (tests
        only: a long run is the reference minimiser).
        """
        Z = np.asarray(Z, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        theta, _, _ = self._iterate(
            lambda t: np.einsum("pnd,pd->pn", Z, t),
            lambda u: np.einsum("pnd,pn->pd", Z, u),
            y,
            N,
            lam,
            (Z.shape[0], Z.shape[2]),
            False,
            iterations,
        )
        return theta
