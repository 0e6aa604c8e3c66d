"""Privacy audits of the two local randomizers of LDP-GLB (DESIGN §7; docs/privacy/ldp-glb.md).

Every sample goes through the client SDK's production path — :func:`normalise_contexts`,
:func:`clip_rewards` and :func:`build_payloads` (gradient, clipping, mechanism) — with inputs fed
10× beyond the public bounds, so a missing normalisation or clip is caught too. The
under-noised variants are subclasses of the production mechanisms, injected through
``build_payloads``'s mechanism cache: nothing in the SDK can weaken a mechanism.

Worst-case pairs and scores
---------------------------
*ℓ2-ball (LDP-SGD)*: one round with context x = 10·e₁ (normalised to e₁), θ̂ = 0 and reward +10
vs −10 (clipped to ±c_r = ±1), R = 1: the clipped gradients are g = ∓e₁ with ‖g‖ = R, the pair
where the sign coin is deterministic. The output density is e^ε/(1 + e^ε) vs 1/(1 + e^ε) on the
hemispheres {zᵀe₁ > 0} and {zᵀe₁ ≤ 0}, so sign(z₁) is the exact privacy-loss statistic and the
pure ε claim is **tight**. The mechanism's randomisation is the far-hemisphere probability
1/(1 + e^ε); "noise ×½" halves it (the radius r_{ε,d} controls unbiasedness, not privacy, and is
checked by the unbiasedness test). Halved, the true level is ln((1 − q/2)/(q/2)) ≈ 1.86 at ε = 1.

*Gaussian (LDP-OLS)*: context x = 10·(e₁ + e₂)/√2 (normalised to the unit sphere) and reward +10
vs −10 (clipped to ±c_r): the matrix blocks are equal and the vector blocks differ by 2c_r·x, the
limit x′ → x, r′ = −r where the whitened sensitivity attains 2/τ (spec §3.2). The score is the
Gaussian privacy-loss statistic of the vector block. With the ``analytic`` calibration the
(ε, δ) claim is exact, so a halved σ is caught directly. The ``classical`` σ is about 2×
conservative at (1, 0.01) (half of it still has ε(0.01) ≈ 1.3), so the tight component claim is
audited too: the exact privacy profile of the nominal mechanism, (ε*, δ(ε*)) with ε* = 0.25
(Balle & Wang's δ(ε) for sensitivity 2/τ and unit noise), which a halved σ violates.

Spec: docs/specs/ldp_glb.md.
"""

from __future__ import annotations

import math

import numpy as np

from ..ldp.gaussian import GaussianOLSMechanism, gaussian_delta
from ..ldp.l2_ball import L2BallMechanism
from ..ldp.links import get_link
from ..ldp.model import ModelSpec
from ..ldp.preprocess import clip_rewards, normalise_contexts
from ..ldp.randomizers import build_payloads, l2_mechanism, ols_mechanism
from ..privacy.audit import AuditResult, audit
from .audit_cli import audit_main

__all__ = ["audit_gaussian_report", "audit_l2_ball", "audit_multi_sgd_report", "run_all"]


class _UnderNoisedBall(L2BallMechanism):
    """The production sampler with its far-hemisphere probability scaled (audit only)."""

    def __init__(self, base: L2BallMechanism, multiplier: float):
        super().__init__(base.epsilon, base.R, base.d, base.radius)
        self.multiplier = multiplier

    @property
    def flip_probability(self) -> float:
        return self.multiplier / (1.0 + math.exp(self.epsilon))


def _client_inputs(spec: ModelSpec, contexts: np.ndarray, rewards: np.ndarray):
    """The device's pre-processing, exactly as :class:`~streaming_dpbandit.ldp.LDPClient`."""
    X = normalise_contexts(contexts, spec.context_scale)
    r = clip_rewards(rewards, get_link(spec.link), spec.c_r)
    return X, r


def audit_l2_ball(
    multiplier: float = 1.0, epsilon: float = 1.0, d: int = 3, n: int = 200_000, seed: int = 11
) -> AuditResult:
    """The single-parameter LDP-SGD report (pure ε claim, tight)."""
    spec = ModelSpec(variant="sgd", setting="single", d=d, K=1, epsilon=epsilon, R=1.0, c_r=1.0)
    base = l2_mechanism(spec, "main")
    mechs = {("sgd", "main"): base if multiplier == 1.0 else _UnderNoisedBall(base, multiplier)}
    x = np.zeros(d)
    x[0] = 10.0  # 10× beyond the unit ball

    def sampler(which, k, rng):
        X, r = _client_inputs(spec, np.tile(x, (k, 1)), np.full(k, 10.0 if which == 0 else -10.0))
        Z = build_payloads(spec, "main", np.zeros(d), None, X, r, rng, mechs)
        return np.sign(Z[:, 0])  # the exact privacy-loss statistic (±ε)

    name = f"ldp l2-ball (sgd report) ε={epsilon:g} d={d} (noise ×{multiplier:g})"
    return audit(sampler, epsilon, 0.0, n, np.random.default_rng(seed), name=name)


def audit_multi_sgd_report(
    multiplier: float = 1.0,
    epsilon: float = 1.0,
    d: int = 2,
    K: int = 3,
    n: int = 200_000,
    seed: int = 12,
) -> AuditResult:
    """A multi-parameter main-phase report (K blocks at ε/2): arm 0 pulled vs arm 1 pulled.

    The claim is the spec's ε (composition of the two differing blocks). The exact loss of
    this pair is at most ε/2 (docs/privacy/ldp-glb.md): the audit documents the slack.
    """
    spec = ModelSpec(variant="sgd", setting="multi", d=d, K=K, epsilon=epsilon, R=1.0, c_r=1.0)
    base = l2_mechanism(spec, "main")
    mechs = {("sgd", "main"): base if multiplier == 1.0 else _UnderNoisedBall(base, multiplier)}
    x = np.zeros(d)
    x[0] = 10.0

    def sampler(which, k, rng):
        X, r = _client_inputs(spec, np.tile(x, (k, 1)), np.full(k, -10.0))
        arms = np.full(k, which, dtype=np.int64)
        Z = build_payloads(spec, "main", np.zeros((K, d)), arms, X, r, rng, mechs)
        B = Z.reshape(k, K, d)
        return np.sign(B[:, 0, 0]) - np.sign(B[:, 1, 0])  # blocks 0 and 1 carry the evidence

    name = f"ldp multi-param sgd report K={K} ε={epsilon:g} (noise ×{multiplier:g})"
    return audit(sampler, epsilon, 0.0, n, np.random.default_rng(seed), name=name)


def audit_gaussian_report(
    claim: str = "end-to-end",
    gaussian: str = "analytic",
    multiplier: float = 1.0,
    epsilon: float = 1.0,
    delta: float = 0.01,
    eps_star: float = 0.25,
    d: int = 3,
    n: int = 400_000,
    seed: int = 13,
) -> AuditResult:
    """The single-parameter LDP-OLS report; ``claim`` is ``end-to-end`` (ε, δ) or ``exact``."""
    spec = ModelSpec(
        variant="ols",
        setting="single",
        d=d,
        K=1,
        epsilon=epsilon,
        delta=delta,
        c_r=1.0,
        gaussian=gaussian,
    )
    base = ols_mechanism(spec, "main")
    mech = GaussianOLSMechanism(d, base.matrix_std * multiplier, base.vector_std * multiplier)
    mechs = {("ols", "main"): mech}
    x = np.zeros(d)
    x[:2] = 10.0 / math.sqrt(2.0)
    xn = normalise_contexts(x[None, :])[0]
    m0, m1 = spec.c_r * xn, -spec.c_r * xn
    diff = (m0 - m1) / base.vector_std**2
    p = spec.p

    def sampler(which, k, rng):
        X, r = _client_inputs(spec, np.tile(x, (k, 1)), np.full(k, 10.0 if which == 0 else -10.0))
        P = build_payloads(spec, "main", np.zeros(d), None, X, r, rng, mechs)
        return (P[:, p:] - (m0 + m1) / 2) @ diff  # ∝ the privacy-loss statistic

    if claim == "exact":
        sens = 2.0 / spec.tau("main")  # whitened sensitivity, unit noise
        eps, dl = eps_star, gaussian_delta(1.0, eps_star, sens)
    else:
        eps, dl = epsilon, delta
    name = (
        f"ldp gaussian (ols report) {gaussian} {claim} ε={eps:g} δ={dl:.3g} (noise ×{multiplier:g})"
    )
    return audit(sampler, eps, dl, n, np.random.default_rng(seed), name=name)


def run_all(quick: bool = False) -> list[AuditResult]:
    k = 4 if quick else 1
    out = []
    for mult in (1.0, 0.5):
        out.append(audit_l2_ball(mult, n=200_000 // k))
        out.append(audit_l2_ball(mult, epsilon=0.5, d=20, n=200_000 // k, seed=21))
        out.append(audit_multi_sgd_report(mult, n=200_000 // k))
        out.append(audit_gaussian_report("end-to-end", "analytic", mult, n=400_000 // k))
        out.append(audit_gaussian_report("end-to-end", "classical", mult, n=400_000 // k))
        out.append(audit_gaussian_report("exact", "classical", mult, n=400_000 // k))
    return out


def main(argv=None) -> int:
    return audit_main(
        "Privacy audits of the LDP-GLB local randomizers.",
        run_all,
        argv,
        delta=".3g",
        quick_help=None,
    )


if __name__ == "__main__":
    raise SystemExit(main())
