"""Privacy audits of PrivateLASSO-R's mechanisms (DESIGN §7; PrivateLASSO spec §11.5).

Run ``python -m streaming_dpbandit.experiments.private_lasso_audits`` for the table (``--json``
for JSON); ``tests/experiments/test_private_lasso_audit.py`` runs the same functions and
``docs/privacy/private-lasso-audits.md`` reports and explains the results.

Which claims are audited, and why (the honest-analysis rule of ``experiments/audits.py``):

``svt``
    One AboveThreshold run (c = 1) of :class:`~..privacy.svt.SparseVector` on the tight pair
    q = (0,…,0, Δ) vs q′ = (Δ,…,Δ, 0) (m = 10 leading queries, τ = 0), scored by the exact
    log-likelihood ratio of the transcript (numerical integration over the threshold noise).
    Claim: pure ε0 = 2Δ/σ. This pair attains ≈ 0.99·ε0 on its most likely "halt at the last
    query" outcome, so the audit is sharp (ε_lb ≈ 0.9·ε0) and a halved σ (true ε = 2ε0 on the
    pair) is caught.
``gram``
    The Gaussian support-Gram release (M3) of a real forgetful boundary (``support="oracle"``),
    on records that attain the sensitivity bound L̃² exactly: v = (1, 1, √2) vs (−1, −1, √2)
    (orthogonal, ‖v‖² = L̃² = b_x²c + C_r² with b_x = 1, c = 2, C_r = √2), fed unclipped (×10)
    through ``learn``. Claim: the Gaussian privacy profile implied by the ledger's ρ_ls (ρ-zCDP of
    a Gaussian mechanism ⇔ its exact (ε, δ(ε)) curve with μ = √(2ρ)), audited at ε = 1.
``selection``
    End to end: records (×10 beyond the bounds) through ``learn`` → clipping → the certified
    elastic net (M1) → the SVT (M2) with the boundary's σ, τ and c. Claim: pure c·ε0 (the ledger's
    ρ_svt = c·ε0²/2 is its zCDP form). The neighbouring pair moves two queries by ≈ 0.2·Δ only —
    the strong-convexity bound Δ = (1 + 2γ)·2L/(μN) is an ℓ2 bound driven by the worst gradient
    L = 2B_x(C_r + B_xC_θ), which one record cannot realise on one coordinate — so this audit
    cannot catch a halved σ (like Peeling's end-to-end claim); it does catch missing clipping.
``paper-selection``
    The literal SparseEstimation (``calibration="paper"``): a record whose presence moves one
    coordinate over the non-private pre-filter 4λ_t makes it queried (⊤ with probability ≈ 1/2)
    versus never selected — an unbounded privacy loss, far above the claimed ε (spec D2).
"""

from __future__ import annotations

import math

import numpy as np

from ..estimators.lasso import lasso_gram
from ..policies.private_lasso import PrivateLASSO
from ..policies.private_lasso_paper import paper_constants, paper_svt
from ..privacy.audit import AuditResult, audit
from ..privacy.gaussian import analytic_gaussian_sigma, gaussian_delta
from ..privacy.gram import sym_gauss, u_vector
from ..privacy.svt import SparseVector, svt_epsilon0
from ..privacy.zcdp import epsilon_from_rho
from .audit_cli import audit_main

__all__ = [
    "audit_gram",
    "audit_paper_selection",
    "audit_selection",
    "audit_svt",
    "run_all",
    "svt_outcome_probabilities",
]


def _lap_cdf(x: np.ndarray, b: float) -> np.ndarray:
    return np.where(
        x < 0, 0.5 * np.exp(np.minimum(x, 0) / b), 1 - 0.5 * np.exp(-np.maximum(x, 0) / b)
    )


def svt_outcome_probabilities(q: np.ndarray, tau: float, sigma: float) -> np.ndarray:
    """Exact P(halt at query i) for i < m and P(no ⊤) of one AboveThreshold run (c = 1).

    P(i) = ∫ f_σ(z) Π_{j<i} F_j(τ+z)(1 − F_i(τ+z)) dz, F_j the Lap(2σ) CDF shifted by q_j.

    >>> p = svt_outcome_probabilities(np.zeros(3), 0.0, 1.0)
    >>> round(float(p.sum()), 6), round(float(p[0]), 4)
    (1.0, 0.5)
    """
    z = np.linspace(-60 * sigma, 60 * sigma, 120_001)
    dz = z[1] - z[0]
    f = np.exp(-np.abs(z) / sigma) / (2 * sigma)
    t = tau + z
    below = np.ones_like(z)
    out = []
    for qi in np.asarray(q, dtype=np.float64):
        Fi = _lap_cdf(t - qi, 2 * sigma)
        out.append(float(np.sum(f * below * (1 - Fi)) * dz))
        below = below * Fi
    out.append(float(np.sum(f * below) * dz))
    return np.array(out)


def audit_svt(
    multiplier: float = 1.0, n: int = 1_000_000, m: int = 10, seed: int = 11
) -> AuditResult:
    """AboveThreshold (c = 1), Δ = 1, σ = 2 (ε0 = 1) on the tight pair; scored by the exact LLR."""
    sens, sigma, tau = 1.0, 2.0, 0.0
    q = np.r_[np.zeros(m), sens]
    qp = np.r_[np.full(m, sens), 0.0]
    llr = np.log(
        svt_outcome_probabilities(q, tau, sigma) / svt_outcome_probabilities(qp, tau, sigma)
    )
    svt = SparseVector(tau=tau, sigma=sigma * multiplier, cap=1)

    def sampler(which, k, rng):
        pos, _ = svt.run_many(np.broadcast_to(qp if which else q, (k, m + 1)), rng)
        outcome = np.where(pos[:, 0] >= 0, pos[:, 0], m + 1)
        return llr[outcome]

    claim = svt_epsilon0(sens, sigma)
    name = f"svt c=1 ε0=1 (noise ×{multiplier:g})"
    return audit(sampler, claim, 0.0, n, np.random.default_rng(seed), name=name)


def _gram_policy(epsilon: float, multiplier: float) -> PrivateLASSO:
    return PrivateLASSO(
        d=4,
        s0=1,
        horizon=8,
        epsilon=epsilon,
        delta=1e-8,
        l_min=2,
        clip_coord=1.0,
        clip_l2=math.sqrt(2.0),
        reward_bound=math.sqrt(2.0),
        support="oracle",
        oracle_support=[0, 1],
        support_cap=2,
        seed=0,
        noise_scale_multiplier=multiplier,
    )


def audit_gram(multiplier: float = 1.0, n: int = 200_000, seed: int = 12) -> AuditResult:
    """Gaussian support-Gram release of a forgetful boundary on a sensitivity-attaining pair."""
    sens_target = 1.0
    s_a = analytic_gaussian_sigma(1.0, 1e-2, sens_target)  # σ/L̃² at which (1, 1e-2) is tight
    rho_ls = 1.0 / (2.0 * s_a**2)
    epsilon = epsilon_from_rho(rho_ls / 0.25, 1e-8)
    V = []
    sigma = 0.0  # the policy's calibrated Gram noise (the same for both datasets)
    for sign in (1.0, -1.0):
        pol = _gram_policy(epsilon, multiplier)
        pol.decide(np.zeros((4, 2, 4)))
        X = np.zeros((4, 4))
        X[0, :2] = 10.0 * sign  # clipped to (±1, ±1): ‖x‖₂ = √2 = B_x
        y = np.array([10.0, 0.0, 0.0, 0.0])  # clipped to C_r = √2
        pol.learn(X, y, np.arange(1, 5))
        store = pol._stores[2]
        V.append(store.units_to_float(store.support_gram(np.array([0, 1]))))
        sigma = pol.boundary_constants(2)["gram_sigma"]
        nominal = _gram_policy(epsilon, 1.0).boundary_constants(2)["gram_sigma"]
    l2sq = pol.gram_l2sq
    u0, u1 = u_vector(V[0]), u_vector(V[1])
    du = u1 - u0
    dist = float(np.linalg.norm(du))
    assert l2sq * (1 - 1e-4) <= dist <= l2sq * (1 + 1e-12), (dist, l2sq)

    def sampler(which, k, rng):
        G = (V[which] + sym_gauss(3, sigma, rng, size=k)).reshape(k, 3, 3)
        return (u_vector(G) - u0) @ du / dist  # N(0, σ²) under D, N(dist, σ²) under D′

    claim_delta = gaussian_delta(nominal, 1.0, l2sq)
    name = f"gram gaussian ρ_ls={rho_ls:.3g} at ε=1, δ={claim_delta:.3g} (noise ×{multiplier:g})"
    return audit(sampler, 1.0, claim_delta, n, np.random.default_rng(seed), name=name)


def _selection_policy(multiplier: float) -> PrivateLASSO:
    # ρ_sel = 1 at split 0.75: ρ_svt = 2cΔ²/σ² = c·ε0²/2 = 1 with c = 2, i.e. ε0 = 1
    return PrivateLASSO(
        d=8,
        s0=1,
        horizon=32,
        epsilon=epsilon_from_rho(1.0 / 0.75, 1e-8),
        delta=1e-8,
        l_min=4,
        clip_coord=1.0,
        clip_l2=1.0,
        reward_bound=1.0,
        lambda0=1e-3,  # a small penalty, so the soft threshold does not absorb the change
        support_cap=2,
        seed=0,
        noise_scale_multiplier=multiplier,
    )


def selection_scores(pol: PrivateLASSO, ell: int) -> np.ndarray:
    """|θ̃| of boundary ℓ from the policy's own store and elastic net (secret; audits only)."""
    k = pol.boundary_constants(ell)
    _, Z, y = pol._stores[ell].matrix()
    return np.abs(pol.elastic_net().fit(Z, y, N=k["N"], lam=k["lambda_N"]).theta)


def audit_selection(multiplier: float = 1.0, n: int = 200_000, seed: int = 13) -> AuditResult:
    """End to end: learn (clipping) → elastic net → SVT, on records ×10 beyond the bounds."""
    Q = []
    for coord in (0, 1):
        pol = _selection_policy(multiplier)
        pol.decide(np.zeros((16, 2, 8)))
        X = np.zeros((1, 8))
        X[0, coord] = 10.0
        pol.learn(X, np.array([10.0]), np.array([1]))  # the other 15 slots are absent
        Q.append(selection_scores(pol, 4))
    k = pol.boundary_constants(4)
    order = np.r_[1, 0, np.arange(2, 8)]  # a fixed, data-independent order
    svt = SparseVector(tau=k["tau"], sigma=k["svt_sigma"], cap=pol.cap)
    nominal = _selection_policy(1.0).boundary_constants(4)
    claim = pol.cap * svt_epsilon0(nominal["sensitivity"], nominal["svt_sigma"])
    # score: evidence for D (coordinate 0 large) over D′ (coordinate 1 large) in the transcript
    gain = np.zeros(9)
    gain[0], gain[1] = 1.0, -1.0

    def sampler(which, size, rng):
        pos, _ = svt.run_many(np.broadcast_to(Q[which][order], (size, 8)), rng)
        sel = np.where(pos >= 0, order[np.maximum(pos, 0)], 8)
        return gain[sel].sum(axis=1)

    name = f"selection end-to-end c=2 (noise ×{multiplier:g})"
    return audit(sampler, claim, 0.0, n, np.random.default_rng(seed), name=name)


def audit_paper_selection(n: int = 20_000, epsilon: float = 1.0, seed: int = 14) -> AuditResult:
    """The literal SparseEstimation leaks membership through its non-private pre-filter S0."""
    d, T, delta = 20, 2**16, 1e-5
    k = paper_constants(T, delta, d, 5, epsilon, reward_bound=1.0, clip_l2=1.0)
    n_rows = 2**10
    lam = math.sqrt(2 * math.log(n_rows) * math.log(d) / n_rows)  # λ_t with λ0 = 1
    thetas = []
    for present in (True, False):
        G = np.zeros((d + 1, d + 1))
        for i in range(n_rows - 1):  # a common background: coordinate 1 carries the signal
            w = np.zeros(d + 1)
            w[1 + i % 5], w[d] = 1.0, 0.5
            G += np.outer(w, w)
        if present:  # the differing record: x = (λ_t/C_r)·e_0, r = C_r (inside the bounds)
            w = np.zeros(d + 1)
            w[0], w[d] = lam, 1.0
            G += np.outer(w, w)
        th = lasso_gram(G[:d, :d], G[:d, d], float(G[d, d]), n_rows, lam / (2 * n_rows), tol=1e-8)
        thetas.append(th)
    S0s = [np.nonzero(np.abs(th) > 4 * lam)[0] for th in thetas]
    assert 0 in S0s[0] and 0 not in S0s[1], S0s

    def sampler(which, size, rng):
        out = np.empty(size)
        for i in range(size):
            S = paper_svt(thetas[which], S0s[which], k.threshold(lam), k.xi, k.cap, rng)[0]
            out[i] = float(0 in S)
        return out

    name = f"paper SparseEstimation (claims ε={epsilon:g} for the whole run)"
    return audit(sampler, epsilon, delta, n, np.random.default_rng(seed), name=name)


def run_all(quick: bool = False) -> list[AuditResult]:
    k = 4 if quick else 1
    return [
        audit_svt(1.0, n=1_000_000 // k),
        audit_svt(0.5, n=1_000_000 // k),
        audit_gram(1.0, n=400_000 // k),
        audit_gram(0.5, n=400_000 // k),
        audit_selection(1.0, n=400_000 // k),
        audit_selection(0.5, n=400_000 // k),
        audit_paper_selection(n=20_000 // k),
    ]


def main(argv=None) -> int:
    return audit_main("Run the privacy audits of PrivateLASSO-R.", run_all, argv, delta=".3g")


if __name__ == "__main__":
    raise SystemExit(main())
