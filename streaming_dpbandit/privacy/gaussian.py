"""The Gaussian mechanism with a declared ℓ2 sensitivity.

Three calibrations are offered, each named in the ledger:

``analytic`` (default)
    The smallest σ for which the Gaussian mechanism is (ε, δ)-DP, found numerically from the
    exact privacy profile (Balle & Wang 2018, Thm. 8):
    δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ).
``classic``
    σ = Δ·√(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm. A.1); valid only for ε < 1.
``zcdp``
    σ = Δ/√(2ρ) for a ρ-zCDP release (Bun & Steinke 2016, Prop. 1.6).

On the secure noise backend (``noise_backend="secure"``) the noise is the discrete Gaussian on
a public grid, for which the analytic-Gaussian profile is not proven. There ``analytic`` means
the certified discrete bound: ρ* from (ε, δ) by Canonne–Kamath–Steinke's conversion, and σ
solves (Δ/σ + √n·2⁻³⁰)²/2 = ρ* (the grid-rounding margin of n coordinates,
``docs/privacy/secure-noise.md``); ``zcdp`` solves the same equation for the given ρ;
``classic`` is refused. The ledger component is ``"discrete_gaussian"`` (Rényi only).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from .noise import NoiseGenerator

# scipy.special and scipy.optimize (≈ 0.3 s to import) are imported by the functions that use
# them: every policy module imports this one, few policies calibrate a Gaussian mechanism.

__all__ = ["GaussianMechanism", "analytic_gaussian_sigma", "gaussian_delta"]


def _log_ndtr(x: float) -> float:
    from scipy import special

    return float(special.log_ndtr(x))


def gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact δ(ε) of the Gaussian mechanism with noise ``sigma`` and ℓ2 sensitivity.

    >>> round(gaussian_delta(1.0, 1.0), 6)
    0.126937
    """
    mu = sensitivity / sigma
    a = _log_ndtr(mu / 2 - epsilon / mu)
    b = epsilon + _log_ndtr(-mu / 2 - epsilon / mu)
    return max(0.0, math.exp(a) - math.exp(b))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ such that the Gaussian mechanism is (ε, δ)-DP (Balle & Wang 2018).

    >>> s = analytic_gaussian_sigma(1.0, 1e-5)
    >>> round(s, 4)
    3.7306
    >>> gaussian_delta(s, 1.0) <= 1e-5
    True
    """
    if not (epsilon > 0 and 0 < delta < 1 and sensitivity > 0):
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")
    lo, hi = 1e-6 * sensitivity, sensitivity
    while gaussian_delta(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    from scipy import optimize

    def f(s: float) -> float:
        return gaussian_delta(s, epsilon, sensitivity) - delta

    sigma: float = optimize.brentq(f, lo, hi, xtol=1e-12 * sensitivity, rtol=1e-12, maxiter=500)
    # brentq may land a hair below the root; step up until the guarantee holds exactly.
    while gaussian_delta(sigma, epsilon, sensitivity) > delta:
        sigma = math.nextafter(sigma, math.inf) * (1 + 1e-12)
    return sigma


class GaussianMechanism:
    """Add N(0, σ²) noise to a value of declared ℓ2 sensitivity.

    Parameters
    ----------
    sensitivity
        Declared ℓ2 sensitivity Δ (enforced by the caller's clipping).
    epsilon, delta
        Target (ε, δ) for the ``analytic`` and ``classic`` calibrations.
    rho
        Target zCDP ρ for the ``zcdp`` calibration.
    calibration
        ``"analytic"`` (default), ``"classic"`` or ``"zcdp"``.
    noise_backend
        ``"fast"`` (default: continuous N(0, σ²)) or ``"secure"`` (discrete Gaussian on a grid,
        certified by its Rényi bound; :meth:`release` then needs a secure stream).
    dim
        Number of coordinates a release protects (the secure grid's rounding margin grows
        like √dim); a secure release of more coordinates is refused.

    Examples
    --------
    >>> mech = GaussianMechanism(sensitivity=1.0, rho=0.5, calibration="zcdp")
    >>> mech.sigma
    1.0
    >>> mech.rho_spent
    0.5
    >>> round(GaussianMechanism(1.0, epsilon=0.5, delta=1e-5, calibration="classic").sigma, 4)
    9.6896
    >>> sec = GaussianMechanism(1.0, epsilon=1.0, delta=1e-5, noise_backend="secure")
    >>> sec.accounting()["type"], sec.sigma > GaussianMechanism(1.0, 1.0, 1e-5).sigma
    ('discrete_gaussian', True)

    """

    def __init__(
        self,
        sensitivity: float,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        calibration: str = "analytic",
        noise_backend: str = "fast",
        dim: int = 1,
    ):
        self.sensitivity = sensitivity
        self.epsilon = epsilon
        self.delta = delta
        self.rho = rho
        self.calibration = calibration
        self.noise_backend = noise_backend
        self.dim = dim

    @property
    def rounding_margin(self) -> float:
        """√dim·2⁻³⁰: the secure grid's rounding shift in noise units (0 on the fast backend)."""
        if self.noise_backend == "fast":
            return 0.0
        if self.noise_backend != "secure":
            raise ValueError(
                f"noise backend must be 'fast' or 'secure', got {self.noise_backend!r}"
            )
        if not (int(self.dim) == self.dim and self.dim >= 1):
            raise ValueError("dim must be an integer ≥ 1")
        return math.sqrt(self.dim) * 2.0**-30

    def _secure_sigma(self) -> float:
        from .zcdp import rho_from_epsilon_delta_cks

        if self.calibration == "zcdp":
            if self.rho is None or not self.rho > 0:
                raise ValueError("the zcdp calibration needs rho > 0")
            rho = self.rho
        elif self.calibration == "analytic":
            if self.epsilon is None or self.delta is None:
                raise ValueError("the analytic calibration needs epsilon and delta")
            rho = rho_from_epsilon_delta_cks(self.epsilon, self.delta)
        else:
            raise ValueError(
                f"the {self.calibration!r} Gaussian calibration is proven for continuous noise "
                "only; on the secure backend use 'analytic' (CKS-certified) or 'zcdp'"
            )
        room = math.sqrt(2.0 * rho) - self.rounding_margin
        if not room > 0:
            raise ValueError("the privacy target is too small for the secure grid's rounding")
        return self.sensitivity / room

    @property
    def sigma(self) -> float:
        if not self.sensitivity > 0:
            raise ValueError("sensitivity must be positive")
        if self.noise_backend != "fast":
            return self._secure_sigma()
        if self.calibration == "zcdp":
            if self.rho is None or not self.rho > 0:
                raise ValueError("the zcdp calibration needs rho > 0")
            return self.sensitivity / math.sqrt(2.0 * self.rho)
        if self.epsilon is None or self.delta is None:
            raise ValueError(f"the {self.calibration} calibration needs epsilon and delta")
        if self.calibration == "analytic":
            return analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)
        if self.calibration == "classic":
            if not 0 < self.epsilon < 1:
                raise ValueError("the classic Gaussian calibration is only valid for 0 < ε < 1")
            return self.sensitivity * math.sqrt(2 * math.log(1.25 / self.delta)) / self.epsilon
        raise ValueError(f"unknown Gaussian calibration {self.calibration!r}")

    @property
    def rho_spent(self) -> float:
        """zCDP cost ρ = (Δ/σ + rounding margin)²/2 of one release (Δ²/2σ² on the fast backend)."""
        return (self.sensitivity / self.sigma + self.rounding_margin) ** 2 / 2.0

    def release(self, value: npt.ArrayLike, rng: NoiseGenerator) -> npt.NDArray[np.float64]:
        value = np.asarray(value, dtype=np.float64)
        backend = getattr(rng, "backend", "fast")
        if backend != self.noise_backend:
            # the ledger component follows the backend: continuous for fast, discrete for secure
            raise ValueError(
                f"a {self.noise_backend!r}-backend GaussianMechanism got a {backend!r} noise "
                "stream; build it with the stream's noise_backend"
            )
        if backend == "secure" and value.size > self.dim:
            raise ValueError(f"{value.size} coordinates exceed the mechanism's dim={self.dim}")
        # value as loc: a secure stream releases it on its grid (docs/privacy/secure-noise.md)
        return np.asarray(rng.normal(value, self.sigma, size=value.shape), dtype=np.float64)

    def accounting(self) -> dict[str, Any]:
        """The ledger component: continuous ``gaussian`` (fast backend) or ``discrete_gaussian``
        (secure backend; its sensitivity includes the rounding margin, ρ = Δ'²/2σ²)."""
        sigma = float(self.sigma)
        if self.noise_backend == "fast":
            return {
                "type": "gaussian",
                "sensitivity": float(self.sensitivity),
                "sigma": sigma,
                "count": 1,
            }
        margin = self.rounding_margin
        return {
            "type": "discrete_gaussian",
            "sensitivity": float(self.sensitivity) + margin * sigma,
            "sigma": sigma,
            "count": 1,
            "rounding_margin": margin,
        }
