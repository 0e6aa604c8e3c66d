"""Calibration of the continual Gram release of DP-LinUCB: noise, shifts and accuracy bounds.

Everything here is a pure function of public configuration (DP-LinUCB spec §2–§4, §3.4, §7,
§11). The derivations of the ``certified`` calibration are in
``docs/privacy/dp-linucb-calibration.md``; the tests check every formula and the accountant's
independent composition.

Calibrations
------------
``certified`` (default)
    Gaussian: each tree node is a Gaussian mechanism with ℓ2 sensitivity L̃² in the rescaled
    coordinates (spec §3.2) and noise σ; a row enters at most m node releases and the pads are
    data-independent, so by the exact adaptive composition of Gaussian differential privacy the
    release sequence is μ-GDP with μ = √m·L̃²/σ (Dong, Roth & Su 2022, Cor. 3.3). σ is the
    smallest value with δ_μ(ε) ≤ δ, δ_μ being the exact privacy profile of the Gaussian
    mechanism (Balle & Wang 2018): ``analytic_gaussian_sigma(ε, δ, √m·L̃²)``.
    Wishart: Theorem 8 (Sheffet 2015, Thm 4.1) per node, composed over the m nodes by the exact
    optimal composition theorem for (ε₀, δ₀)-DP mechanisms (Kairouz, Oh & Viswanath 2015), with
    the δ₀ that minimises k and ε₀ the largest value < 1 whose composition is (ε, δ)-DP.
``paper``
    The paper's own formulas (spec §3.1, §3.3): σ = 4√m·L̃²·ln(4/δ)/ε and
    k = d + 1 + ⌈224·m·ε⁻²·ln(8m/δ)·ln(2/δ)⌉. Valid, but conservative: they spend only a
    fraction of ε (about 0.15·ε for the Gaussian at δ = 0.1). An explicit, labelled option.
``zcdp``
    Spec §3.2 (Gaussian only): ρ* = (√(ln(1/δ) + ε) − √ln(1/δ))², σ² = m·L̃⁴/(2ρ*). Labelled
    *not paper-faithful*; refused outside simulation until reviewed (spec §3.2).
``authors_code_2018``
    Spec §3.4: the authors' public code, for reproducing Experiment 2/3 (§12.2) only; with it
    the spec's ρ_min targets are met to 4 digits.

Accuracy bounds (spec §4, §3.4): ρ_min, ρ_max, γ and the shift added to H_t, such that with
probability ≥ 1 − α/(2n) per round λ_min(H_t) ≥ ρ_min, λ_max(H_t) ≤ ρ_max and
‖h_t‖_{H_t⁻¹} ≤ γ. They enter the confidence width of Prop. 4 (:meth:`GramCalibration.beta`).

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from .blt import blt_coefficients, blt_max_error, blt_parameters, blt_sensitivity
from .factorization import sqrt_toeplitz_coefficients, sqrt_toeplitz_norm
from .gaussian import analytic_gaussian_sigma
from .gram import record_bound
from .tree import tree_levels
from .zcdp import rho_from_epsilon_delta_cks

__all__ = [
    "CALIBRATIONS",
    "LABELS",
    "GramCalibration",
    "advanced_composition_epsilon",
    "calibrate_gram_release",
    "certified_wishart_budget",
    "gaussian_sigma",
    "optimal_composition_delta",
    "wishart_dof",
    "zcdp_rho_star",
]

CALIBRATIONS = ("certified", "paper", "zcdp", "authors_code_2018")
FORMULA = {
    "certified": "dp-linucb-certified-v1",
    "paper": "shariff-sheffet-2018-paper",
    "zcdp": "dp-linucb-zcdp-spec-3.2",
    "authors_code_2018": "shariff-sheffet-authors-code-2018",
}
LABELS = {
    "certified": None,
    "paper": (
        "paper calibration (Shariff & Sheffet 2018, §4.2 / Prop. 9 with Thm 8): a valid but "
        "conservative guarantee; explicit option, not the product default"
    ),
    "zcdp": (
        "zCDP calibration (Bun–Steinke 2016, spec §3.2): not paper-faithful; tighter option "
        "pending DP-specialist review; simulation only"
    ),
    "authors_code_2018": (
        "reproduction profile of the authors' 2018 code (spec §3.4): for reproducing the "
        "paper's Experiment 2/3 only; simulation only"
    ),
}
WISHART_THM8_CONSTANT = 28.0


# -- privacy calibrations ------------------------------------------------------------------------
def zcdp_rho_star(epsilon: float, delta: float) -> float:
    """ρ* with ρ* + 2√(ρ* ln(1/δ)) = ε (the Bun–Steinke conversion solved for ρ).

    >>> r = zcdp_rho_star(1.0, 0.1); round(r + 2 * math.sqrt(r * math.log(10)), 12)
    1.0
    """
    lg = math.log(1.0 / delta)
    return (math.sqrt(lg + epsilon) - math.sqrt(lg)) ** 2


def _secure_factor_sigma(
    calibration: str,
    epsilon: float,
    delta: float,
    Lt2: float,
    coeffs: npt.NDArray[np.float64],
    norm: float,
    d: int,
    T: int,
) -> tuple[float, list[dict[str, Any]], float, float]:
    """σ, ledger component, ρ and rounding margin of a secure factorisation step stream.

    docs/privacy/secure-noise.md, "Factorisations": the integer steps rint((C̃x)_j/γ) + Z_j
    shift by at most ‖C̃Δ‖/γ + 1 per coordinate that changes (≤ P·T of them), so in noise
    units ‖μ‖ ≤ L̃²‖C̃‖_{1→2}/σ + √(P·T)·2⁻³⁰ (γ ≤ σ·2⁻³⁰). ‖C̃‖ is the larger of the closed
    form and the float coefficients' own norm, rounded up; σ solves
    (L̃²‖C̃‖/σ + margin)²/2 = ρ*, ρ* from CKS (``certified``) or Bun–Steinke (``zcdp``).
    """
    from .symmetric import packing

    own = math.sqrt(math.fsum(float(c) ** 2 for c in coeffs))
    normc = max(norm, own) * (1.0 + 1e-9)
    margin = math.sqrt(packing(d + 1).size * T) * 2.0**-30
    if calibration == "certified":
        rho_star = rho_from_epsilon_delta_cks(epsilon, delta)
    else:
        rho_star = zcdp_rho_star(epsilon, delta)
    room = math.sqrt(2.0 * rho_star) - margin
    if not room > 0:
        raise ValueError("(ε, δ) too small for the secure grid's rounding margin")
    sens = Lt2 * normc
    sigma = sens / room
    comp = {
        "type": "discrete_gaussian",
        "sensitivity": sens + margin * sigma,  # ρ = (sens/σ + margin)²/2
        "sigma": sigma,
        "count": 1,
        "rounding_margin": margin,
    }
    return sigma, [comp], (sens / sigma + margin) ** 2 / 2, margin


def gaussian_sigma(
    calibration: str,
    m: int,
    L_tilde: float,
    epsilon: float,
    delta: float,
    noise_backend: str = "fast",
) -> float:
    """σ_noise of each (symmetrised) Gaussian tree node, for m levels.

    On the ``secure`` backend the nodes are *discrete* Gaussians, certified by their Rényi
    bound alone (docs/privacy/secure-noise.md, "Gram tree"): ``certified`` is then the
    smallest σ whose ρ = m·L̃⁴/2σ² converts to (ε, δ) by Canonne–Kamath–Steinke's formula.

    >>> s2 = gaussian_sigma("certified", 27, math.sqrt(2), 1.0, 0.1, "secure"); round(s2, 4)
    14.1865

    >>> round(gaussian_sigma("paper", 27, math.sqrt(2), 1.0, 0.1), 4)
    153.3438
    >>> s = gaussian_sigma("certified", 27, math.sqrt(2), 1.0, 0.1); round(s, 4)
    11.2848
    """
    Lt2 = L_tilde**2
    if noise_backend == "secure":
        if calibration == "certified":
            return math.sqrt(m * Lt2 * Lt2 / (2.0 * rho_from_epsilon_delta_cks(epsilon, delta)))
        if calibration != "zcdp":  # the paper's per-node (ε, δ) proofs are continuous-only
            raise ValueError(
                f"calibration={calibration!r} is proven for continuous Gaussian noise only; "
                "the secure backend supports calibration certified or zcdp"
            )
    if calibration == "certified":
        return analytic_gaussian_sigma(epsilon, delta, math.sqrt(m) * Lt2)
    if calibration in ("paper", "authors_code_2018"):
        return 4.0 * math.sqrt(m) * Lt2 * math.log(4.0 / delta) / epsilon
    if calibration == "zcdp":
        return math.sqrt(m * Lt2 * Lt2 / (2.0 * zcdp_rho_star(epsilon, delta)))
    raise ValueError(f"unknown calibration {calibration!r}; choose from {CALIBRATIONS}")


def advanced_composition_epsilon(eps0: float, m: int, delta_prime: float) -> float:
    """ε of the m-fold adaptive composition of (ε₀, δ₀)-DP mechanisms at slack δ′ (DRV 2010).

    >>> round(advanced_composition_epsilon(0.01, 100, 1e-6), 6)
    0.535702
    """
    return math.sqrt(2.0 * m * math.log(1.0 / delta_prime)) * eps0 + m * eps0 * math.expm1(eps0)


def optimal_composition_delta(eps0: float, delta0: float, m: int, epsilon: float) -> float:
    """Exact δ(ε) of the m-fold adaptive composition of (ε₀, δ₀)-DP mechanisms.

    Kairouz, Oh & Viswanath (2015), the optimal composition theorem: the worst case is
    randomised response with an extra δ₀, so
    δ(ε) = 1 − (1 − δ₀)^m·(1 − Σ_ℓ C(m, ℓ)[e^{(m−ℓ)ε₀} − e^{ε+ℓε₀}]₊ / (1 + e^{ε₀})^m).

    >>> round(optimal_composition_delta(0.1, 0.0, 1, 0.1), 12)
    0.0
    >>> optimal_composition_delta(0.01, 1e-6, 100, 0.5357) < 1e-6 + 1e-6 * 100  # ≤ advanced
    True
    """
    ell = np.arange(m + 1)
    a = (m - ell) * eps0
    b = epsilon + ell * eps0
    pos = a > b
    if pos.any():
        lc = special.gammaln(m + 1) - special.gammaln(ell + 1) - special.gammaln(m - ell + 1)
        logs = lc[pos] + a[pos] + np.log1p(-np.exp(b[pos] - a[pos])) - m * np.log1p(np.exp(eps0))
        d_rr = float(np.exp(logs).sum())
    else:
        d_rr = 0.0
    return 1.0 - (1.0 - delta0) ** m * (1.0 - d_rr)


def certified_wishart_budget(m: int, epsilon: float, delta: float) -> tuple[float, float, float]:
    """(ε₀, δ₀, achieved δ) minimising Theorem 8's k under the optimal composition theorem.

    For each δ₀ on a log grid below 1 − (1 − δ)^{1/m}, ε₀ is the largest value < 1 whose m-fold
    optimal composition is (ε, δ)-DP; the split with the smallest k = ⌈28·ln(4/δ₀)/ε₀²⌉ wins.

    >>> e0, d0, dl = certified_wishart_budget(27, 1.0, 0.1)
    >>> dl <= 0.1 and optimal_composition_delta(e0, d0, 27, 1.0) <= 0.1
    True
    """
    d_cap = -math.expm1(math.log1p(-delta) / m)  # (1 − δ₀)^m ≥ 1 − δ
    best: tuple[float, float, float] | None = None
    for frac in np.geomspace(1e-4, 0.999, 300):
        d0 = float(frac) * d_cap

        def f(e: float, d0: float = d0) -> float:
            return optimal_composition_delta(e, d0, m, epsilon) - delta

        hi = min(epsilon, math.nextafter(1.0, 0.0))  # Theorem 8 needs ε₀ < 1
        eps0: float
        if f(hi) <= 0:
            eps0 = hi
        else:
            eps0 = optimize.brentq(f, 1e-12, hi, xtol=1e-15, rtol=1e-13)
            while f(eps0) > 0:
                eps0 = math.nextafter(eps0, 0.0) * (1 - 1e-12)
        if not (0 < eps0 < 1 and d0 < 1 / math.e):
            continue
        need = WISHART_THM8_CONSTANT * math.log(4.0 / d0) / eps0**2
        if best is None or need < best[0]:
            best = (need, eps0, d0)
    if best is None:
        raise ValueError("no valid Wishart budget split (need a smaller ε or larger m)")
    _, eps0, d0 = best
    return eps0, d0, optimal_composition_delta(eps0, d0, m, epsilon)


def _wishart_budget(
    calibration: str, m: int, epsilon: float, delta: float
) -> tuple[float, float, float | None, int, bool]:
    """(ε₀, δ₀, δ′, k − (d+1), valid) of one Wishart tree node."""
    if calibration == "certified":
        e0, d0, _ = certified_wishart_budget(m, epsilon, delta)
        need = WISHART_THM8_CONSTANT * math.log(4.0 / d0) / e0**2
        return e0, d0, None, math.ceil(need), True
    if calibration == "paper":
        e0 = epsilon / math.sqrt(8.0 * m * math.log(2.0 / delta))
        d0 = delta / (2.0 * m)
        extra = math.ceil(
            224.0 * m * math.log(8.0 * m / delta) * math.log(2.0 / delta) / epsilon**2
        )
        return e0, d0, delta / 2.0, extra, True
    if calibration == "authors_code_2018":
        df = delta / (m + 1)
        e0 = epsilon / math.sqrt(8.0 * m * math.log(1.0 / df))
        d0 = (delta - df) / m
        need = WISHART_THM8_CONSTANT * math.log(4.0 / d0) / e0**2
        extra = math.floor(need)
        return e0, d0, df, extra, extra >= need
    if calibration == "zcdp":
        raise ValueError("the zcdp calibration exists for Gaussian noise only (spec §3.2)")
    raise ValueError(f"unknown calibration {calibration!r}; choose from {CALIBRATIONS}")


def wishart_dof(calibration: str, d: int, m: int, epsilon: float, delta: float) -> int:
    """k of each Wishart tree node W_{d+1}(L̃²I, k).

    >>> wishart_dof("paper", 5, 27, 1.0, 0.1), wishart_dof("authors_code_2018", 5, 27, 1.0, 0.1)
    (139115, 239278)
    """
    return d + 1 + _wishart_budget(calibration, m, epsilon, delta)[3]


# -- the calibration record ----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GramCalibration:
    """Every public constant of one tree epoch (spec §9 "Ledger"): noise, shift and bounds."""

    mechanism: str
    tree_impl: str
    calibration: str
    formula: str
    dp_valid: bool
    label: str | None
    d: int
    epsilon: float
    delta: float
    alpha: float
    n: int
    m: int
    epoch: int
    L: float
    B_tilde: float
    L_tilde: float
    noise_law: dict[str, Any]
    per_node: dict[str, Any]
    entry_std: float | None
    total_dof: int | None
    a8: float
    a2: float
    upsilon: float | None
    shift: float
    c: float | None
    rho_min: float
    rho_max: float
    gamma: float
    gamma_form: str
    checks: dict[str, bool]
    accounting: tuple[dict[str, Any], ...]
    rho_spent: float | None

    def beta(self, logdet_v: float, sigma: float, S: float) -> float:
        """Prop. 4: β = σ√(2 ln(2/α) + ln det V − d ln ρ_min) + S√ρ_max + γ (root guarded)."""
        inner = 2.0 * math.log(2.0 / self.alpha) + logdet_v - self.d * math.log(self.rho_min)
        return sigma * math.sqrt(max(0.0, inner)) + S * math.sqrt(self.rho_max) + self.gamma

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["accounting"] = [dict(c) for c in self.accounting]
        return out


def _gaussian_bounds(
    entry_std: float | None,
    d: int,
    n: int,
    alpha: float,
    a2: float | None,
    authors: bool,
    m: int | None = None,
    sigma: float | None = None,
) -> tuple[float, float, float, float, float]:
    if authors:
        assert m is not None and sigma is not None  # the authors' profile passes m and σ
        la = math.log(1.0 / alpha)  # α′ = α/n_tree is passed as alpha here
        ups = sigma * math.sqrt(2 * m) * (4 * math.sqrt(d) + 2 * la)
        gamma = sigma * math.sqrt(m / ups) * (math.sqrt(d) + math.sqrt(2 * la))
        return ups, 2 * ups, ups, 3 * ups, gamma
    assert entry_std is not None and a2 is not None  # the spec's bounds pass both
    ups = math.sqrt(2.0) * entry_std * (4 * math.sqrt(d) + 2 * math.log(2 * n / alpha))
    return ups, 2 * ups, ups, 3 * ups, entry_std * a2 / math.sqrt(ups)


@functools.lru_cache(maxsize=256)
def calibrate_gram_release(
    d: int,
    epsilon: float,
    delta: float,
    n_cap: int,
    noise: str = "gaussian",
    shift: bool = True,
    calibration: str = "certified",
    L: float = 1.0,
    B_tilde: float = 1.0,
    alpha: float | None = None,
    wishart_gamma: str = "printed",
    tree_impl: str = "binary",
    n_steps: int | None = None,
    horizon_mode: str = "fixed",
    n0: int | None = None,
    epoch: int = 0,
    noise_scale_multiplier: float = 1.0,
    noise_backend: str = "fast",
) -> GramCalibration:
    """The constants of tree epoch ``epoch`` (always 0 in ``fixed`` mode).

    A pure function of public configuration; results are cached (treat them as read-only).

    Parameters follow the policy's (spec §2). ``noise_backend="secure"`` (discrete Gaussian
    nodes on a grid, docs/privacy/secure-noise.md) supports the binary tree with Gaussian
    noise (binary tree, √Toeplitz or BLT) and calibration ``certified`` (Rényi-certified, CKS
    conversion) or ``zcdp``; Wishart noise is refused with one line saying why.

    In ``doubling`` mode epoch e has capacity n_e = n0·2^e, m_e = log2(n_e) + 1 and
    α_e = α·2^−(e+1); the bounds use the total noise of
    the frozen roots of earlier epochs plus the current tree (spec §7).

    Examples
    --------
    The spec's §12.2 targets (Experiment 2/3, profile ``authors_code_2018``):

    >>> g = calibrate_gram_release(5, 1.0, 0.1, 50_000_000, calibration="authors_code_2018")
    >>> g.m, round(g.rho_min, 1)
    (27, 92208.7)
    >>> w = calibrate_gram_release(5, 1.0, 0.1, 50_000_000, noise="wishart",
    ...                            calibration="authors_code_2018")
    >>> round(w.rho_min), w.checks["c_positive"]
    (222336, True)

    """
    if calibration not in CALIBRATIONS:
        raise ValueError(f"unknown calibration {calibration!r}; choose from {CALIBRATIONS}")
    if noise not in ("gaussian", "wishart"):
        raise ValueError("noise must be 'gaussian' or 'wishart'")
    if noise == "gaussian" and not shift:
        raise ValueError("Gaussian noise is not PSD: it needs the +2Υ shift (spec §4)")
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    if wishart_gamma not in ("printed", "tight"):
        raise ValueError("wishart_gamma must be 'printed' or 'tight'")
    if tree_impl not in ("binary", "sqrt_toeplitz", "blt"):
        raise ValueError("tree_impl must be 'binary', 'sqrt_toeplitz' or 'blt'")
    if tree_impl in ("sqrt_toeplitz", "blt"):
        if noise != "gaussian":
            raise ValueError("the factorisation mechanism is Gaussian-only (spec §11)")
        if calibration not in ("certified", "zcdp"):
            raise ValueError("the factorisation mechanism has calibrations certified and zcdp")
        if horizon_mode != "fixed":
            raise ValueError("the factorisation mechanism needs a fixed horizon (spec §11)")
    if horizon_mode not in ("fixed", "doubling"):
        raise ValueError("horizon_mode must be 'fixed' or 'doubling'")
    if noise_backend not in ("fast", "secure"):
        raise ValueError("noise_backend must be 'fast' or 'secure'")
    if noise_backend == "secure":
        if noise == "wishart":
            raise ValueError(
                "noise=wishart has no secure backend: its privacy proof needs the continuous "
                "Wishart density (docs/privacy/secure-noise.md); use noise=gaussian or "
                "noise_backend=fast"
            )

    if horizon_mode == "doubling":
        if calibration == "authors_code_2018":
            raise ValueError("the authors_code_2018 profile is fixed-horizon only")
        if n0 is None or n0 < 1 or n0 & (n0 - 1):
            raise ValueError("doubling mode needs n0, a power of two")
    # n0 is validated (a power of two) in doubling mode, the only mode with epochs > 0
    n0_ = n0 if n0 is not None else 0
    Lt2 = record_bound(L * L, B_tilde)  # ‖[x; y]‖² ≤ L² + B̃² (rows clipped by prepare_rows)
    Lt = math.sqrt(Lt2)
    authors = calibration == "authors_code_2018"

    # the epoch's capacity, levels and α
    if horizon_mode == "doubling":
        alpha0 = alpha if alpha is not None else 1.0 / (2.0 * n0_)
        n = n0_ << epoch
        m = n.bit_length()  # log2(n) + 1
        a_ep = alpha0 * 2.0 ** -(epoch + 1)
    else:
        if epoch != 0:
            raise ValueError("fixed mode has a single epoch 0")
        a_ep = alpha if alpha is not None else 1.0 / (2.0 * n_cap)
        if authors:
            n_tree = 1 << (n_cap - 1).bit_length()
            n, m = n_cap, n_tree.bit_length()
        else:
            n, m = n_cap, tree_levels(n_cap)
    if authors:
        n_tree = 1 << (n - 1).bit_length()
        alpha_prime = a_ep / n_tree
        a8 = math.sqrt(d) + math.sqrt(2 * math.log(4 / alpha_prime))  # the code's a
        a2 = math.sqrt(d) + math.sqrt(2 * math.log(1 / alpha_prime))
    else:
        a8 = math.sqrt(d) + math.sqrt(2 * math.log(8 * n / a_ep))
        a2 = math.sqrt(d) + math.sqrt(2 * math.log(2 * n / a_ep))

    label = LABELS[calibration]
    per_node: dict[str, Any] = {}
    checks: dict[str, bool] = {}
    accounting: list[dict[str, Any]] = []
    rho_spent: float | None = None
    entry_std: float | None = None
    total_dof: int | None = None
    upsilon: float | None = None
    c: float | None = None  # the Wishart shift constant (spec §4)
    mult = noise_scale_multiplier

    if noise == "gaussian":
        mech = "GAUSS"
        if tree_impl == "sqrt_toeplitz":
            T = int(n_steps) if n_steps else n
            norm = sqrt_toeplitz_norm(T)
            sens = Lt2 * norm
            if noise_backend == "secure":
                coeffs = sqrt_toeplitz_coefficients(T)
                sigma, accounting, rho_spent, margin = _secure_factor_sigma(
                    calibration, epsilon, delta, Lt2, coeffs, norm, d, T
                )
            elif calibration == "certified":
                sigma = analytic_gaussian_sigma(epsilon, delta, sens)
            else:
                sigma = sens / math.sqrt(2.0 * zcdp_rho_star(epsilon, delta))
            entry_std = sigma * norm * mult
            per_node = {"steps": T, "factor_norm": norm, "sensitivity": sens}
            if noise_backend != "secure":
                accounting = [{"type": "gaussian", "sensitivity": sens, "sigma": sigma, "count": 1}]
                rho_spent = sens**2 / (2 * sigma**2)
            noise_law = {"law": "symmetrised gaussian", "sigma": sigma, "factorisation": "sqrt"}
            if noise_backend == "secure":
                noise_law["law"] = "symmetrised discrete gaussian"
                per_node["rounding_margin"] = margin
        elif tree_impl == "blt":
            # docs/privacy/dp-linucb-blt.md: sensitivity bound valid for every horizon, error at T
            T = int(n_steps) if n_steps else n
            theta, omega = blt_parameters(T)
            norm = blt_sensitivity(theta, omega)
            row = blt_max_error(theta, omega, T)
            sens = Lt2 * norm
            if noise_backend == "secure":
                coeffs = blt_coefficients(theta, omega, T)
                sigma, sec_acc, sec_rho, margin = _secure_factor_sigma(
                    calibration, epsilon, delta, Lt2, coeffs, norm, d, T
                )
            elif calibration == "certified":
                sigma = analytic_gaussian_sigma(epsilon, delta, sens)
            else:
                sigma = sens / math.sqrt(2.0 * zcdp_rho_star(epsilon, delta))
            entry_std = sigma * row * mult
            per_node = {
                "steps": T,
                "buffers": len(theta),
                "theta": tuple(float(v) for v in theta),
                "omega": tuple(float(v) for v in omega),
                "factor_norm": norm,
                "sensitivity_horizon": "all",
                "max_row_norm": row,
                "sensitivity": sens,
            }
            accounting = [{"type": "gaussian", "sensitivity": sens, "sigma": sigma, "count": 1}]
            rho_spent = sens**2 / (2 * sigma**2)
            if noise_backend == "secure":
                accounting, rho_spent = sec_acc, sec_rho
            noise_law = {"law": "symmetrised gaussian", "sigma": sigma, "factorisation": "blt"}
            if noise_backend == "secure":
                noise_law["law"] = "symmetrised discrete gaussian"
                per_node["rounding_margin"] = margin
        else:
            sigma = gaussian_sigma(calibration, m, Lt, epsilon, delta, noise_backend)
            prior = 0.0
            for e in range(epoch):  # frozen roots of earlier doubling epochs: one node each
                m_e = (n0_ << e).bit_length()
                prior += gaussian_sigma(calibration, m_e, Lt, epsilon, delta, noise_backend) ** 2
            entry_std = math.sqrt(prior + m * sigma**2) * mult
            kind = "discrete_gaussian" if noise_backend == "secure" else "gaussian"
            accounting = [{"type": kind, "sensitivity": Lt2, "sigma": sigma, "count": m}]
            rho_spent = m * Lt2**2 / (2 * sigma**2)
            noise_law = {"law": "symmetrised gaussian", "sigma": sigma}
            if noise_backend == "secure":
                noise_law = {"law": "symmetrised discrete gaussian", "sigma": sigma}
            per_node = {"sensitivity": Lt2, "mu": Lt2 / sigma, "rho": Lt2**2 / (2 * sigma**2)}
            if calibration == "zcdp":
                per_node["rho_star"] = zcdp_rho_star(epsilon, delta)
            if calibration in ("paper", "authors_code_2018"):
                per_node["paper_node_target"] = {
                    "epsilon": epsilon / math.sqrt(8 * m * math.log(2 / delta)),
                    "delta": delta / 2,
                }
        if authors:
            upsilon, shift_val, rho_min, rho_max, gamma = _gaussian_bounds(
                None, d, n, alpha_prime, None, True, m=m, sigma=sigma * mult
            )
        else:
            upsilon, shift_val, rho_min, rho_max, gamma = _gaussian_bounds(
                entry_std, d, n, a_ep, a2, False
            )
        gamma_form = "exact (spec §4)"
    else:
        e0, d0, dprime, extra, valid_k = _wishart_budget(calibration, m, epsilon, delta)
        k = d + 1 + extra
        K = m * k
        for e in range(epoch):
            m_e = (n0_ << e).bit_length()
            K += d + 1 + _wishart_budget(calibration, m_e, epsilon, delta)[3]
        total_dof = K
        scale = Lt2 * mult
        r = math.sqrt(K)
        accounting = [{"type": "eps_delta", "epsilon": e0, "delta": d0, "count": m}]
        noise_law = {"law": "wishart", "scale": Lt2, "dof": k}
        per_node = {"epsilon0": e0, "delta0": d0, "dof": k}
        if dprime is None:
            per_node["composition"] = "optimal (Kairouz, Oh & Viswanath 2015)"
            per_node["composed_delta"] = optimal_composition_delta(e0, d0, m, epsilon)
        else:
            per_node["composition"] = "advanced (Dwork, Rothblum & Vadhan 2010)"
            per_node["delta_prime"] = dprime
        if not valid_k:
            per_node["thm8_violation"] = "k is floored below Theorem 8's requirement"
        # spec §4: unshifted bounds, then the shift −c
        lt = math.sqrt(scale)
        checks["r_gt_a8"] = r > a8
        rho_u_min = scale * (r - a8) ** 2
        rho_u_max = scale * (r + a8) ** 2
        gamma_u = lt * (
            a2 if not authors else math.sqrt(d) + math.sqrt(2 * math.log(1 / alpha_prime))
        )
        c = rho_u_min - 4 * scale * r * a8
        checks["c_positive"] = c > 0
        if shift:
            mech = "WISHART_SHIFTED"
            if not checks["r_gt_a8"] or not checks["c_positive"]:
                raise ValueError(
                    f"shifted Wishart needs √(mk) > (3 + 2√2)·a8 (spec §4): r = {r:.4g}, "
                    f"a8 = {a8:.4g}; use a larger k (smaller ε) or the unshifted variant"
                )
            rho_min = 4 * scale * r * a8
            shift_val = -c
            if authors:
                rho_max = rho_u_max - c
                gamma = gamma_u * math.sqrt(rho_u_min / rho_min)
                gamma_form = "authors' code: γᵘ·√(ρᵘ_min/ρ_min)"
            else:
                rho_max = 8 * scale * r * a8
                if wishart_gamma == "printed":
                    gamma = lt * math.sqrt(r * a2)
                    gamma_form = "printed: L̃·√(r·a2)"
                else:
                    gamma = lt * a2 * (r - a8) / (2 * math.sqrt(r * a8))
                    gamma_form = "tight: L̃·a2·(r − a8)/(2√(r·a8))"
        else:
            mech = "WISHART_UNSHIFTED"
            if not checks["r_gt_a8"]:
                raise ValueError("Wishart needs √(mk) > a8 (spec §4)")
            shift_val, rho_min, rho_max, gamma = 0.0, rho_u_min, rho_u_max, gamma_u
            gamma_form = "L̃·a2"
    dp_valid = mult == 1.0
    if noise == "wishart":
        dp_valid = dp_valid and valid_k
    return GramCalibration(
        mechanism=mech,
        tree_impl=tree_impl,
        calibration=calibration,
        formula=FORMULA[calibration],
        dp_valid=bool(dp_valid),
        label=label,
        d=d,
        epsilon=float(epsilon),
        delta=float(delta),
        alpha=float(a_ep),
        n=int(n),
        m=int(m),
        epoch=int(epoch),
        L=float(L),
        B_tilde=float(B_tilde),
        L_tilde=Lt,
        noise_law=noise_law,
        per_node=per_node,
        entry_std=entry_std,
        total_dof=total_dof,
        a8=a8,
        a2=a2,
        upsilon=upsilon,
        shift=float(shift_val),
        c=c,
        rho_min=float(rho_min),
        rho_max=float(rho_max),
        gamma=float(gamma),
        gamma_form=gamma_form,
        checks=checks,
        accounting=tuple(accounting),
        rho_spent=rho_spent,
    )
