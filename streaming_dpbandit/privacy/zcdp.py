"""Zero-concentrated DP (Bun & Steinke 2016): conversions and sums used for calibration.

PrivateLASSO spec §2 ("Accounting"):

* a pure ε0-DP mechanism is ε0²/2-zCDP; a Gaussian mechanism with ℓ2 sensitivity Δ and noise σ
  is Δ²/(2σ²)-zCDP; adaptive composition adds ρ;
* ρ-zCDP implies (ε(ρ, δ), δ)-DP with ε(ρ, δ) = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke, Prop. 1.3);
* calibration uses the exact inverse ρ(ε, δ) = (√(ln(1/δ) + ε) − √(ln(1/δ)))².

Tighter conversions (the PLD accountant of :mod:`.accountant`) may be *reported*; calibration
always uses the formula above, so that every σ of the product follows from (ε, δ) in closed form.
Sums of ρ round upwards (:func:`rho_sum`), so a reported spend is never below the exact one.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

__all__ = [
    "delta_from_rho_cks",
    "epsilon_from_rho",
    "epsilon_from_rho_cks",
    "rho_from_epsilon_delta",
    "rho_from_epsilon_delta_cks",
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


def _log_delta_cks(alpha: float, rho: float, epsilon: float) -> float:
    a1 = alpha - 1.0
    return a1 * (alpha * rho - epsilon) - math.log(a1) + alpha * math.log1p(-1.0 / alpha)


def delta_from_rho_cks(rho: float, epsilon: float) -> float:
    """δ at ``epsilon`` of a ρ-zCDP mechanism by Canonne, Kamath & Steinke's conversion.

    CKS (NeurIPS 2020) Corollary 13: ρ-zCDP implies (ε, δ)-DP with
    δ = inf_{α>1} exp((α−1)(αρ−ε))/(α−1)·(1 − 1/α)^α. *Every* α > 1 gives a valid δ, so a
    numerical minimiser can only be loose, never unsound. Tighter than Bun–Steinke's
    ε = ρ + 2√(ρ ln 1/δ); unlike the analytic-Gaussian profile it needs nothing but the Rényi
    bound, so it certifies the *discrete* Gaussian (whose Rényi divergences are those of the
    continuous one, CKS Prop. 5) — the secure noise backend's accounting
    (``docs/privacy/secure-noise.md``). Agrees with OpenDP's ``make_zCDP_to_approxDP``.

    >>> round(delta_from_rho_cks(0.5, 2.753049548325312), 6)
    0.01
    """
    if not (rho > 0 and epsilon >= 0):
        raise ValueError("need rho > 0 and epsilon >= 0")
    from scipy import optimize

    # α* solves d/dα: near (ε + ρ)/(2ρ) for small ρ; search log(α − 1) over a wide bracket
    def f(t: float) -> float:
        return _log_delta_cks(1.0 + math.exp(t), rho, epsilon)

    res = optimize.minimize_scalar(
        f, bounds=(-30.0, 30.0), method="bounded", options={"xatol": 1e-10}
    )
    best = min(float(res.fun), f(math.log(max((epsilon + rho) / (2 * rho) - 1.0, 1e-12))))
    return min(1.0, math.exp(best))


def _bisect(ok: Callable[[float], bool], good: float, bad: float, rel: float) -> float:
    """Bisect between ``good`` (kept: returned if nothing better is verified) and ``bad`` down
    to a relative width ``rel``; return the verified end, so the result always satisfies
    ``ok`` (or is ``good``, valid on its own)."""
    while abs(bad - good) > rel * max(1.0, abs(good)):
        mid = 0.5 * (good + bad)
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def epsilon_from_rho_cks(rho: float, delta: float) -> float:
    """The smallest ε (to 10⁻¹⁰, rounded up) with :func:`delta_from_rho_cks` ≤ ``delta``.

    >>> round(epsilon_from_rho_cks(0.5, 1e-6), 6)
    5.221534
    """
    if not (rho >= 0 and 0 < delta < 1):
        raise ValueError("need rho >= 0 and 0 < delta < 1")
    if rho == 0:
        return 0.0
    # Bun–Steinke's ε is always enough; the returned end always satisfies the predicate
    ok = lambda e: delta_from_rho_cks(rho, e) <= delta  # noqa: E731
    return _bisect(ok, epsilon_from_rho(rho, delta), 0.0, 1e-10)


def rho_from_epsilon_delta_cks(epsilon: float, delta: float) -> float:
    """The largest ρ (to 10⁻¹², rounded down) whose CKS conversion is (ε, δ)-DP.

    >>> r = rho_from_epsilon_delta_cks(1.0, 1e-6)
    >>> delta_from_rho_cks(r, 1.0) <= 1e-6 < delta_from_rho_cks(r * 1.001, 1.0)
    True
    >>> r > rho_from_epsilon_delta(1.0, 1e-6)  # tighter than Bun–Steinke
    True
    """
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    lo = rho_from_epsilon_delta(epsilon, delta)  # valid by Bun–Steinke whatever CKS says
    ok = lambda r: delta_from_rho_cks(r, epsilon) <= delta  # noqa: E731
    return _bisect(ok, lo, 4.0 * lo + epsilon, 1e-12)
