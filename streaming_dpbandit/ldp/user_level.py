"""User-level local DP: the per-report calibration of k reports of one user (issue 22 §2).

In the local model the device randomizes each report, so a user-level guarantee means that
**all the reports one user sends** (at most k in a window) together meet the target (ε, δ).
The per-report calibration that achieves it, per randomizer (derivation:
``docs/privacy/user-level-ldp.md``):

* ℓ2-ball (LDP-SGD, pure ε-LDP): the k reports compose to the sum of their ε (tight for a pure
  target: k aligned worst-case reports attain it), so each report runs at **ε/k**;
* Gaussian (LDP-OLS): each report is one Gaussian mechanism with whitened ℓ2 sensitivity
  ≤ 2/τ; k independent reports at noise √k·τ compose to a Gaussian of sensitivity
  √k·2/(√k·τ) = 2/τ — exactly the privacy profile of one report at τ. Each report therefore
  runs at the ε′ whose τ(ε′, δ) is **√k·τ(ε, δ)** (same δ): ε/√k for the classical
  calibration (τ ∝ 1/ε), a bisection on the exact profile for the analytic one. That is
  tighter than ε/k (and than (ε/k, δ/k)) because Gaussian composition is exact in μ = Δ/σ.

Numpy and the standard library only (the client SDK's rule).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .model import ModelSpec

__all__ = [
    "USER_LEVEL_GAUSSIANS",
    "report_components",
    "report_epsilon",
]

#: Gaussian calibrations with a user-level split (``discrete`` is certified through its Rényi
#: bound and a CKS conversion that the ledger's accountant does not reproduce: not yet).
USER_LEVEL_GAUSSIANS = ("classical", "analytic")


def report_epsilon(spec_at: Callable[[float], ModelSpec], k: int, epsilon: float) -> float:
    """The per-report ε′ of a model whose k reports of one user must cost (ε, δ) together.

    ``spec_at(e)`` is the model configured at per-report ε = e (δ, the variant and every other
    setting fixed). Pure (ℓ2-ball) models: ε/k. Gaussian (OLS) models: the largest ε′ with
    τ(ε′) ≥ √k·τ(ε) in every phase (ε/√k for ``classical``; bisection for ``analytic``).

    >>> from functools import partial
    >>> sgd = partial(ModelSpec, "sgd", "single", 3, 5)
    >>> report_epsilon(lambda e: sgd(epsilon=e), 4, 1.0)
    0.25
    >>> ols = lambda e: ModelSpec("ols", "single", 3, 5, epsilon=e, delta=1e-2)
    >>> round(report_epsilon(ols, 4, 1.0), 12)                   # classical: ε/√k
    0.5
    >>> ana = lambda e: ModelSpec("ols", "single", 3, 5, epsilon=e, delta=1e-2,
    ...                           gaussian="analytic")
    >>> e1 = report_epsilon(ana, 4, 1.0)
    >>> ana(e1).tau() >= 2 * ana(1.0).tau(), 0.25 < e1 < 0.5
    (True, True)
    """
    if int(k) != k or k < 1:
        raise ValueError(f"reports per user must be an integer ≥ 1, got {k!r}")
    k = int(k)
    if k == 1:
        return float(epsilon)
    target = spec_at(epsilon)
    variants = {target.block_variant(ph) for ph in target.phases()}
    if variants == {"sgd"}:
        return epsilon / k
    if target.gaussian not in USER_LEVEL_GAUSSIANS:
        raise ValueError(
            f"no user-level split for gaussian={target.gaussian!r} yet "
            f"(have: {', '.join(USER_LEVEL_GAUSSIANS)})"
        )
    need = {ph: math.sqrt(k) * target.tau(ph) for ph in target.phases()}

    def ok(e: float) -> bool:
        s = spec_at(e)
        return all(
            s.block_privacy(ph)[0] <= target.block_privacy(ph)[0] / k
            if s.block_variant(ph) == "sgd"
            else s.tau(ph) >= need[ph]
            for ph in s.phases()
        )

    if target.gaussian == "classical" and variants == {"ols"}:
        e1 = epsilon / math.sqrt(k)  # τ ∝ 1/ε exactly; nudged for rounding
        while not ok(e1):
            e1 = math.nextafter(e1, 0.0)
        return e1
    lo, hi = epsilon / k, epsilon  # τ(ε/k) ≥ √k τ(ε) for any calibration that is ≥ 1/ε-ish
    while not ok(lo):
        lo /= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return lo


def report_components(spec: ModelSpec, reports: int) -> list[dict[str, float | int | str]]:
    """Accounting components of ``reports`` reports of one user at the model's calibration.

    ℓ2-ball: ``pure`` ε per report, ``count`` = reports. Gaussian: one ``gaussian`` component
    per block that can differ between two inputs of a report (1 single-parameter; 2 in the
    multi-parameter main phase: the two pulled arms' blocks), sensitivity 2 at noise τ in the
    whitened coordinates (docs/privacy/ldp-glb.md §2, §3), ``count`` = blocks × reports. The
    PLD of the Gaussian components is exact; their composition is the user's privacy loss.

    >>> s = ModelSpec("ols", "single", 3, 5, epsilon=0.5, delta=1e-2)
    >>> c = report_components(s, 4)[0]
    >>> c["type"], c["count"], round(c["sigma"] / s.tau(), 12)
    ('gaussian', 4, 1.0)
    """
    out: list[dict[str, float | int | str]] = []
    for ph in spec.phases()[-1:]:  # the main phase: warm-up blocks are never costlier
        blocks = 2 if spec.setting == "multi" and not spec.joint(ph) else 1
        if spec.block_variant(ph) == "sgd":
            out.append({"type": "pure", "epsilon": spec.report_guarantee()[0], "count": reports})
        else:
            out.append(
                {
                    "type": "gaussian",
                    "sensitivity": 2.0,
                    "sigma": spec.tau(ph),
                    "count": blocks * reports,
                }
            )
    return out
