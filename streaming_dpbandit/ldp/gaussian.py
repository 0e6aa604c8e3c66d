"""The Gaussian mechanism for the OLS report (xxᵀ, r·x) (LDP-GLB spec §3.2).

Pre-processing (the client, :func:`~.preprocess.normalise_contexts`): x ← x/s, then
x ← x·min(1, 1/‖x‖) (so ‖x‖ ≤ C_B = 1) and r ← clip(r, −c_r, c_r). The report is

    M = ut(xxᵀ + W),   W symmetric, upper-triangle entries i.i.d. N(0, (2τ)²), mirrored;
    u = r·x + ξ,        ξ ~ N(0, (c_r τ)² I_d);

with τ = σ_{ε,δ} = 2√(2 ln(1.25/δ))/ε (``classical``, needs ε ≤ 1) or the analytic-Gaussian σ for
ℓ2-sensitivity 2 at (ε, δ) (``analytic``, Balle & Wang 2018). Dividing each block by its noise
std turns the report into one Gaussian mechanism with unit noise whose ℓ2 sensitivity over
‖x‖ ≤ 1, |r| ≤ c_r is at most 2/τ (derivation in docs/privacy/ldp-glb.md: the worst case is
x′ → x, r′ = −r), which is exactly what either calibration needs. Only the upper triangle is
sent: d(d+1)/2 + d floats.

Pure Python and numpy only (the SDK must not need scipy): Φ comes from ``math.erfc``.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..utils.arrays import ArrayLike, FloatArray

if TYPE_CHECKING:
    from ..privacy.noise import NoiseGenerator

__all__ = [
    "GaussianOLSMechanism",
    "analytic_sigma",
    "classical_sigma",
    "gaussian_delta",
    "ols_tau",
    "packed_size",
    "triu_indices",
]

_TRIU: dict[int, tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]] = {}


def triu_indices(d: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Row-major upper-triangle indices of a d × d matrix (the packing of M), cached."""
    out = _TRIU.get(d)
    if out is None:
        out = _TRIU[d] = np.triu_indices(d)
    return out


def packed_size(d: int) -> int:
    """d(d+1)/2.

    >>> packed_size(20)
    210
    """
    return d * (d + 1) // 2


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Thm 8).

    >>> round(gaussian_delta(1.0, 1.0), 6)
    0.126937
    """
    mu = sensitivity / sigma
    a = mu / 2.0 - epsilon / mu
    b = -mu / 2.0 - epsilon / mu
    return max(0.0, _phi(a) - math.exp(epsilon) * _phi(b))


def classical_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """σ = Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth Thm A.1, Lemma 2.1 of the paper).

    >>> round(classical_sigma(1.0, 0.01, 2.0), 3)
    6.215
    """
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def analytic_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ with δ(ε) ≤ δ for the Gaussian mechanism (bisection on the exact profile).

    >>> round(analytic_sigma(1.0, 1e-5), 4)
    3.7306
    """
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")
    lo, hi = 1e-6 * sensitivity, sensitivity
    while gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mid, epsilon, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return hi  # δ(hi) ≤ δ by the bisection invariant


def ols_tau(
    epsilon: float, delta: float, gaussian: str = "classical", n_coords: int | None = None
) -> float:
    """τ of the OLS report: the Gaussian σ for ℓ2-sensitivity 2 at (ε, δ).

    ``classical`` requires ε ≤ 1 (spec §3.2, A17). ``discrete`` is the secure noise backend's
    calibration (docs/privacy/secure-noise.md, "LDP randomizers"): the report is released on
    per-block grids γ_i ≤ σ_i·2⁻³⁰ with exact discrete Gaussian noise, certified by its Rényi
    bound: rounding adds at most √n·2⁻³⁰ (n = ``n_coords``, the block's floats) to the
    rescaled sensitivity 2/τ, and ρ = (2/τ + √n·2⁻³⁰)²/2 must convert to (ε, δ) by CKS:
    τ = 2/(√(2ρ*) − √n·2⁻³⁰).

    >>> [round(ols_tau(e, dl), 3) for e, dl in ((1, 0.01), (0.5, 0.01), (1, 0.1), (0.5, 0.1))]
    [6.215, 12.43, 4.495, 8.99]
    >>> round(ols_tau(0.5, 0.005), 3)  # per arm in multi-param: (ε/2, δ/2) at (1, 0.01)
    13.292
    """
    if gaussian == "classical":
        if epsilon > 1.0:
            raise ValueError(
                "the classical Gaussian calibration needs ε ≤ 1 per mechanism; "
                "use gaussian='analytic'"
            )
        return classical_sigma(epsilon, delta, 2.0)
    if gaussian == "analytic":
        return analytic_sigma(epsilon, delta, 2.0)
    if gaussian == "discrete":
        from ..privacy.zcdp import rho_from_epsilon_delta_cks

        if n_coords is None:
            raise ValueError("the discrete calibration needs the block's n_coords")
        room = math.sqrt(2.0 * rho_from_epsilon_delta_cks(epsilon, delta))
        room -= math.sqrt(n_coords) * 2.0**-30
        if not room > 0:
            raise ValueError("(ε, δ) too small for the secure grid's rounding margin")
        return 2.0 / room
    raise ValueError(f"gaussian must be 'classical', 'analytic' or 'discrete', got {gaussian!r}")


class GaussianOLSMechanism:
    """Gaussian noise on (ut(xxᵀ), r·x) with independent stds per block.

    Parameters
    ----------
    d
        Context dimension.
    matrix_std
        Standard deviation of each upper-triangle entry of W (2τ certified).
    vector_std
        Standard deviation of each entry of ξ (c_r·τ certified).

    Use :meth:`certified` for the product's calibration. Inputs must already be pre-processed
    (‖x‖ ≤ 1 and |r| ≤ c_r for the certified calibration); :meth:`privatize` does not clip.

    Examples
    --------
    >>> import numpy as np
    >>> mech = GaussianOLSMechanism.certified(d=3, epsilon=1.0, delta=0.01, c_r=1.0)
    >>> round(mech.matrix_std, 3), round(mech.vector_std, 3)
    (12.43, 6.215)
    >>> M, u = mech.privatize(np.array([[0.6, 0.8, 0.0]]), np.array([1.0]),
    ...                       np.random.default_rng(0))
    >>> M.shape, u.shape                      # d(d+1)/2 + d floats per report
    ((1, 6), (1, 3))

    """

    def __init__(self, d: int, matrix_std: float, vector_std: float):
        if d < 1:
            raise ValueError("d must be >= 1")
        if not (matrix_std > 0 and vector_std > 0):
            raise ValueError("noise standard deviations must be positive")
        self.d = int(d)
        self.matrix_std = float(matrix_std)
        self.vector_std = float(vector_std)

    @classmethod
    def certified(
        cls, d: int, epsilon: float, delta: float, c_r: float = 1.0, gaussian: str = "classical"
    ) -> GaussianOLSMechanism:
        """The certified calibration for unit-ball contexts (spec §3.2): stds (2τ, c_r τ)."""
        tau = ols_tau(epsilon, delta, gaussian)
        return cls(d, 2.0 * tau, c_r * tau)

    @property
    def tau(self) -> float:
        """τ = matrix_std / 2."""
        return self.matrix_std / 2.0

    @property
    def size(self) -> int:
        """Floats per report: d(d+1)/2 + d."""
        return packed_size(self.d) + self.d

    def privatize(
        self, X: ArrayLike, r: ArrayLike, rng: NoiseGenerator
    ) -> tuple[FloatArray, FloatArray]:
        """Reports of n rows: X (n, d), r (n,) → (packed matrices (n, p), vectors (n, d)).

        Rows of zeros with r = 0 give the synthetic (pure-noise) report ψ(0, 0).
        """
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        r = np.atleast_1d(np.asarray(r, dtype=np.float64))
        n, d = X.shape
        if d != self.d or r.shape != (n,):
            raise ValueError(f"expected X of shape (n, {self.d}) and r of shape (n,)")
        if not (np.all(np.isfinite(X)) and np.all(np.isfinite(r))):
            raise ValueError("input contains NaN or infinite values")
        rows, cols = triu_indices(d)
        M = X[:, rows] * X[:, cols]
        u = X * r[:, None]
        if getattr(rng, "backend", None) == "secure":
            # the value as ``loc``: rounded to the public grid of σ plus exact discrete Gaussian
            # noise (docs/privacy/secure-noise.md; certified with gaussian="discrete")
            return rng.normal(M, self.matrix_std), rng.normal(u, self.vector_std)
        M += rng.normal(0.0, self.matrix_std, size=M.shape)
        u += rng.normal(0.0, self.vector_std, size=u.shape)
        return M, u
