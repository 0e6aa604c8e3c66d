"""Exact (PLD) accounting of Peeling: the smallest Laplace scale that certifies (ε, δ).

FLIPHAT spec §14.2; derivation in ``docs/privacy/fliphat-noise-reduction.md``. One N-IHT fit
with M iterations runs Peeling M times; each run makes s noisy-max selections and releases s
noisy values, all with Laplace scale ξ_m on an input whose ℓ∞ sensitivity is λ_m. Writing
ρ = λ_m/ξ_m (the same ratio in every iteration),

* each selection is report-noisy-max with Laplace noise on |v| (every |v_j| moves by ≤ λ_m,
  not necessarily in one direction), hence pure (2ρ)-DP (:func:`selection_epsilon`; the
  end-to-end audit attains it);
* each released value is a Laplace mechanism with sensitivity λ_m and scale ξ_m, i.e. the
  Laplace privacy-loss distribution with sensitivity 1 and scale 1/ρ.

The fit is the adaptive composition of these s·M + s·M mechanisms. ``dp-accounting``'s
privacy-loss distributions (PLD, pessimistic discretisation: the ε they report is an upper
bound) compose the dominating pairs — the generic pure-DP pair for a selection, the exact
Laplace pair for a value — and :func:`peeling_pld_ratio` binary-searches the largest ρ whose
composition still meets (ε, δ). The ratio depends only on public (s·M, ε, δ), so it is cached.

Compared with the closed form ξ = λ·2√(3 s ln(M/δ))·M/ε (advanced composition plus a basic
split over iterations), the PLD scale is ≈ 0.47 / 0.56 / 0.65 / 0.81 of it at s = 10,
δ = 0.01 and ε = 0.5 / 1 / 2 / 5 (M = 1).

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = [
    "ACCOUNTANTS",
    "PLD_DISCRETIZATION",
    "PLD_TOLERANCE",
    "accountant_record",
    "closed_form_ratio",
    "peeling_pld_epsilon",
    "peeling_pld_ratio",
    "selection_epsilon",
]

ACCOUNTANTS = ("closed_form", "pld")
#: Value discretisation interval of the privacy-loss distributions (pessimistic rounding).
PLD_DISCRETIZATION = 1e-3
#: Relative width at which the binary search on ρ stops (the returned ρ is the lower end).
PLD_TOLERANCE = 1e-3


def selection_epsilon(ratio: float) -> float:
    """Pure ε of one Peeling selection at ρ = λ/ξ: 2ρ.

    Report-noisy-max with Laplace(ξ) noise on |v| is (2λ/ξ)-DP when every |v_j| may move by λ
    in either direction (a selected coordinate falling by λ while all others rise by λ moves the
    comparison by 2λ); the end-to-end audit attains it (``experiments/end_to_end_audits.py``).

    >>> selection_epsilon(0.25)
    0.5
    """
    return 2.0 * ratio


def closed_form_ratio(
    s: int, iterations: int, epsilon: float, delta: float, extra_pure: float = 0.0
) -> float:
    """ρ = λ/ξ of the closed form, ε/(2√(3 s ln(M/δ))·M) (spec §3.3); with ``extra_pure`` = ε′
    (one more pure ε′-DP release on the same rows) the fit gets ε − ε′ (basic composition).

    >>> round(1 / closed_form_ratio(10, 1, 1.0, 0.01), 4)
    23.5079
    """
    M = iterations
    eps = epsilon - extra_pure
    if not eps > 0:
        raise ValueError("extra_pure must be below epsilon")
    return eps / (2.0 * math.sqrt(3.0 * s * math.log(M / delta)) * M)


@functools.lru_cache(maxsize=1024)
def peeling_pld_epsilon(
    ratio: float,
    steps: int,
    delta: float,
    discretization: float = PLD_DISCRETIZATION,
    extra_pure: float = 0.0,
) -> float:
    """ε at ``delta`` of ``steps`` Peeling steps (one selection + one value each) at ρ = λ/ξ.

    An upper bound (pessimistic PLD). ``steps`` is s·M for an N-IHT fit. ``extra_pure``: one
    more pure ε′-DP mechanism on the same rows, composed in (FLIPHAT's private clip scale, a
    report-noisy-max release; its dominating pair is the generic pure-DP one).

    The closed form's scale for (ε, δ) = (1, 0.01) at s = 10 spends less than half of ε:

    >>> round(peeling_pld_epsilon(1 / 23.5079, 10, 0.01), 2)
    0.47
    """
    # dp-accounting ships no type information (no py.typed)
    from dp_accounting.pld import common  # type: ignore[import-untyped]
    from dp_accounting.pld import privacy_loss_distribution as pld

    if not (ratio > 0 and steps >= 1 and 0 < delta < 1):
        raise ValueError("need ratio > 0, steps >= 1 and 0 < delta < 1")
    selection = pld.from_privacy_parameters(
        common.DifferentialPrivacyParameters(selection_epsilon(ratio), 0.0),
        value_discretization_interval=discretization,
    )
    value = pld.from_laplace_mechanism(
        1.0 / ratio, sensitivity=1.0, value_discretization_interval=discretization
    )
    one = selection.compose(value)
    total = one if steps == 1 else one.self_compose(steps)
    if extra_pure > 0:
        total = total.compose(
            pld.from_privacy_parameters(
                common.DifferentialPrivacyParameters(float(extra_pure), 0.0),
                value_discretization_interval=discretization,
            )
        )
    return float(total.get_epsilon_for_delta(delta))


@functools.lru_cache(maxsize=256)
def peeling_pld_ratio(
    s: int,
    iterations: int,
    epsilon: float,
    delta: float,
    discretization: float = PLD_DISCRETIZATION,
    extra_pure: float = 0.0,
) -> float:
    """The largest ρ = λ/ξ (up to :data:`PLD_TOLERANCE`) whose s·M-step PLD meets (ε, δ)
    (with one more pure ``extra_pure``-DP release composed in, when given).

    The search starts from the closed form's ratio, which always meets (ε, δ), so the result is
    never noisier than the closed form. Cached: it depends on public parameters only.

    >>> rho = peeling_pld_ratio(10, 1, 1.0, 0.01)
    >>> round(closed_form_ratio(10, 1, 1.0, 0.01) / rho, 2)  # ξ_pld / ξ_closed
    0.56
    >>> peeling_pld_epsilon(rho, 10, 0.01) <= 1.0
    True
    """
    if not (s >= 1 and iterations >= 1 and epsilon > 0 and 0 < delta < 1):
        raise ValueError("need s >= 1, iterations >= 1, epsilon > 0 and 0 < delta < 1")
    steps = s * iterations
    x = float(extra_pure)
    lo = closed_form_ratio(s, iterations, epsilon, delta, x)
    if peeling_pld_epsilon(lo, steps, delta, discretization, x) > epsilon:
        return lo  # cannot happen for the valid closed form; never return a larger ratio
    # double until the composition exceeds ε (it does: ε(δ) grows without bound in ρ)
    hi = lo * 2.0
    while peeling_pld_epsilon(hi, steps, delta, discretization, x) <= epsilon:
        lo, hi = hi, hi * 2.0
    while hi / lo > 1.0 + PLD_TOLERANCE:
        mid = math.sqrt(lo * hi)
        if peeling_pld_epsilon(mid, steps, delta, discretization, x) <= epsilon:
            lo = mid
        else:
            hi = mid
    return lo


def accountant_record(accountant: str) -> dict[str, Any]:
    """What the ledger records about the accountant that calibrated a fit.

    >>> accountant_record("closed_form")["name"]
    'closed-form advanced composition (Dwork, Su & Zhang 2021, Lemma A.2)'
    >>> sorted(accountant_record("pld"))
    ['discretization', 'library', 'name', 'tolerance', 'version']
    """
    if accountant == "closed_form":
        return {"name": "closed-form advanced composition (Dwork, Su & Zhang 2021, Lemma A.2)"}
    if accountant == "pld":
        import importlib.metadata  # (≈ 20 ms: imported when a ledger record names the library)

        return {
            "name": "privacy-loss distributions, pessimistic (s·M selections as pure 2λ/ξ-DP, "
            "s·M Laplace values)",
            "library": "dp-accounting",
            "version": importlib.metadata.version("dp-accounting"),
            "discretization": PLD_DISCRETIZATION,
            "tolerance": PLD_TOLERANCE,
        }
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
