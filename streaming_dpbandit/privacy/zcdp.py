"""Zero-concentrated DP (Bun & Steinke 2016): conversions and sums used for calibration.

PrivateLASSO spec §2 ("Accounting"):

* a pure ε0-DP mechanism is ε0²/2-zCDP; a Gaussian mechanism with ℓ2 sensitivity Δ and noise σ
  is Δ²/(2σ²)-zCDP; adaptive composition adds ρ;
* ρ-zCDP implies (ε(ρ, δ), δ)-DP with ε(ρ, δ) = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke, Prop. 1.3);
* calibration uses the exact inverse ρ(ε, δ) = (√(ln(1/δ) + ε) − √(ln(1/δ)))².

Tighter conversions (the PLD accountant of :mod:`.accountant`) may be *reported*; calibration
always uses the formula above, so that every σ of the product follows from (ε, δ) in closed form.
Sums of ρ round upwards (:func:`rho_sum`), so a reported spend is never below the exact one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = [
    "epsilon_from_rho",
    "rho_from_epsilon_delta",
    "rho_gaussian",
    "rho_pure",
    "rho_sum",
]


def rho_from_epsilon_delta(epsilon: float, delta: float) -> float:
    """The largest ρ whose conversion ε(ρ, δ) equals ``epsilon`` (spec §2 golden values).

    >>> round(rho_from_epsilon_delta(1.0, 1e-6), 6), round(rho_from_epsilon_delta(8.0, 1e-7), 5)
    (0.017469, 0.80332)
    >>> abs(epsilon_from_rho(rho_from_epsilon_delta(3.0, 1e-8), 1e-8) - 3.0) < 1e-12
    True
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    L = math.log(1.0 / delta)
    # (√(L+ε) − √L)² = ε² / (√(L+ε) + √L)²: the second form has no cancellation.
    return epsilon**2 / (math.sqrt(L + epsilon) + math.sqrt(L)) ** 2


def epsilon_from_rho(rho: float, delta: float) -> float:
    """ε(ρ, δ) = ρ + 2√(ρ ln(1/δ)).

    >>> round(epsilon_from_rho(0.5, 1e-6), 4)
    5.7565
    """
    if not (rho >= 0 and 0 < delta < 1):
        raise ValueError("need rho >= 0 and 0 < delta < 1")
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def rho_pure(epsilon0: float) -> float:
    """zCDP cost ε0²/2 of a pure ε0-DP mechanism.

    >>> rho_pure(1.0)
    0.5
    """
    return 0.5 * epsilon0 * epsilon0


def rho_gaussian(sensitivity: float, sigma: float) -> float:
    """zCDP cost Δ²/(2σ²) of a Gaussian mechanism.

    >>> rho_gaussian(1.0, 1.0)
    0.5
    """
    if not sigma > 0:
        raise ValueError("sigma must be positive")
    return sensitivity * sensitivity / (2.0 * sigma * sigma)


def rho_sum(values: Iterable[float]) -> float:
    """Σρ rounded upwards (one ulp per term): never below the exact sum.

    >>> rho_sum([0.1, 0.2]) >= 0.1 + 0.2
    True
    """
    total = 0.0
    for v in values:
        total = math.nextafter(total + float(v), math.inf)
    return total
