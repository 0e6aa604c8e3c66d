"""Gaussian release of a Gram matrix restricted to a public support (PrivateLASSO spec M3).

Records are v_s = [x_{s,S}; r_s] ∈ R^{p+1} (p = |S| ≤ c); absent slots contribute v = 0. With the
per-coordinate clip |x_i| ≤ b_x and |r| ≤ C_r, ‖v‖² ≤ L̃² := b_x²·c + C_r², which does not depend
on d. The release is V + SymGauss(p+1, σ), V = Σ v vᵀ.

SymGauss(p, σ) = (Z′ + Z′ᵀ)/√2 with Z′ i.i.d. N(0, σ²): off-diagonal variance σ², diagonal 2σ².
It is therefore a Gaussian release of u(V) = (V_ij for i < j; V_ii/√2) with N(0, σ²I) noise, and

    ‖u(vvᵀ − v′v′ᵀ)‖₂² = ‖vvᵀ − v′v′ᵀ‖_F²/2 = (‖v‖⁴ + ‖v′‖⁴ − 2⟨v,v′⟩²)/2 ≤ L̃⁴,

so one participation costs **ρ = L̃⁴/(2σ²)** (attained by orthogonal records of norm L̃).
Derivation and audit: ``docs/privacy/private-lasso.md``.

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .noise import NoiseGenerator
    from .secure_noise import SecureGenerator

__all__ = [
    "gram_bound",
    "gram_rho",
    "gram_sigma",
    "record_bound",
    "sym_gauss",
    "u_distance",
    "u_vector",
]


def record_bound(feature_sq: float, reward_bound: float) -> float:
    """L̃² = F + C², the bound on ‖[x; r]‖² of a record whose features are clipped to ‖x‖² ≤ F
    and whose reward is clipped to |r| ≤ C.

    The one home of that sum: PrivateLASSO-R's Gram (F = b_x²·c) and DP-LinUCB's rows (F = L²,
    C = B̃) both calibrate their noise with it.

    >>> record_bound(1.0, 1.0)
    2.0
    """
    return feature_sq + reward_bound * reward_bound


def gram_bound(clip_coord: float, cap: int, reward_bound: float) -> float:
    """L̃² = b_x²·c + C_r², the bound on ‖v‖² (spec §5.1 "Derived").

    >>> round(gram_bound(1.0, 10, 2.4093), 3)
    15.805
    """
    return record_bound(clip_coord * clip_coord * cap, reward_bound)


def gram_sigma(l2sq: float, rho: float) -> float:
    """σ = L̃²/√(2ρ) for a per-release budget ρ.

    >>> round(gram_sigma(15.805, 0.25 * 0.015047), 1)
    182.2
    """
    if not (l2sq > 0 and rho > 0):
        raise ValueError("need a positive bound and rho")
    return l2sq / math.sqrt(2.0 * rho)


def gram_rho(l2sq: float, sigma: float) -> float:
    """zCDP cost L̃⁴/(2σ²) of one participation.

    >>> gram_rho(2.0, 2.0)
    0.5
    """
    return l2sq * l2sq / (2.0 * sigma * sigma)


def sym_gauss(
    p: int, sigma: float, rng: NoiseGenerator, size: int | None = None
) -> npt.NDArray[np.float64]:
    """SymGauss(p, σ): symmetric p×p noise, off-diagonal variance σ², diagonal 2σ².

    ``size`` draws a batch (size, p, p) of independent matrices (audits and tests).

    >>> Z = sym_gauss(3, 1.0, np.random.default_rng(0))
    >>> bool(np.array_equal(Z, Z.T)), sym_gauss(2, 1.0, np.random.default_rng(0), size=5).shape
    (True, (5, 2, 2))
    """
    shape = (p, p) if size is None else (size, p, p)
    Zp = rng.normal(0.0, sigma, size=shape)
    out: npt.NDArray[np.float64] = (Zp + np.swapaxes(Zp, -1, -2)) / math.sqrt(2.0)
    return out


def secure_grid_exponent(sigma: float, data_bits: int = 32) -> int:
    """g of the grid γ = 2^−g of a secure SymGauss release: γ divides the data unit 2^−data_bits
    and σ/γ ≥ 2³⁰ (docs/privacy/secure-noise.md, "Gram releases").

    >>> secure_grid_exponent(3.0), secure_grid_exponent(2.0**-10)
    (32, 40)
    """
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError("sigma must be positive and finite")
    return max(data_bits, 30 - (math.frexp(sigma)[1] - 1))


def secure_sym_gauss_release(
    V_units: npt.ArrayLike, sigma: float, rng: SecureGenerator, data_bits: int = 32
) -> npt.NDArray[np.float64]:
    """V + SymGauss(p, σ) on the secure backend, V exact integers in units of 2^−data_bits.

    Each upper-triangle entry gets exact discrete Gaussian noise in units of γ = 2^−g
    (:func:`secure_grid_exponent`), variance σ²/γ² off the diagonal and 2σ²/γ² on it — the
    per-coordinate variances of SymGauss, so the Rényi divergence of neighbouring releases is
    exactly SymGauss's ‖u(ΔV)‖²/2σ² per order (CKS Prop. 5, integer shifts: γ divides V's
    unit, nothing is rounded). The sum is formed in integers and converted to float once; the
    lower triangle mirrors the upper (post-processing). ``rng`` is a
    :class:`~.secure_noise.SecureGenerator`.

    >>> from streaming_dpbandit.privacy.noise import NoiseSource
    >>> V = np.array([[2**32, 0], [0, 2**33]], dtype=object)
    >>> G = secure_sym_gauss_release(V, 1.0, NoiseSource(1, backend="secure").generator("g"))
    >>> bool(np.array_equal(G, G.T)), bool(np.all(G * 2.0**32 == np.rint(G * 2.0**32)))
    (True, True)
    """
    from fractions import Fraction

    V = np.asarray(V_units)
    p = V.shape[0]
    g = secure_grid_exponent(sigma, data_bits)
    s2 = Fraction(sigma) ** 2 * Fraction(4) ** g
    iu = np.triu_indices(p)
    diag = iu[0] == iu[1]
    z = rng.normal_units([2 * s2 if dg else s2 for dg in diag])
    shift = 1 << (g - data_bits)
    vals = [int(v) * shift + int(n) for v, n in zip(V[iu], z, strict=True)]
    out: npt.NDArray[np.float64] = np.empty((p, p))
    out[iu] = [math.ldexp(float(v), -g) for v in vals]
    out[iu[1], iu[0]] = out[iu]
    return out


def u_vector(M: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """u(M) = (M_ij for i < j; M_ii/√2): the coordinates in which SymGauss is isotropic.

    >>> u_vector(np.array([[2.0, 1.0], [1.0, 4.0]])).round(4).tolist()
    [1.0, 1.4142, 2.8284]
    """
    M = np.asarray(M, dtype=np.float64)
    iu = np.triu_indices(M.shape[-1], k=1)
    u: npt.NDArray[np.float64] = np.concatenate(
        [M[..., iu[0], iu[1]], np.diagonal(M, axis1=-2, axis2=-1) / math.sqrt(2)], axis=-1
    )
    return u


def u_distance(v: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> float:
    """‖u(vvᵀ − wwᵀ)‖₂ for two records (the per-participation sensitivity).

    >>> u_distance(np.array([1.0, 1.0, 2 ** 0.5]), np.array([-1.0, -1.0, 2 ** 0.5]))
    4.0
    """
    v = np.asarray(v, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    sq = (np.dot(v, v) ** 2 + np.dot(w, w) ** 2 - 2.0 * np.dot(v, w) ** 2) / 2.0
    return math.sqrt(max(sq, 0.0))
