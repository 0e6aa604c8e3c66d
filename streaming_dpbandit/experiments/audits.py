"""Named privacy audits of the product's mechanisms (DESIGN §7).

Run ``python -m streaming_dpbandit.experiments.audits`` to print every audit as a table (and
``--json`` for machine-readable output); ``tests/privacy/test_privacy_audit.py`` runs the same
functions and ``docs/privacy/audits.md`` reports their results.

Worst-case pairs
----------------
*Laplace / Gaussian*: scalar queries f(D) = 0, f(D′) = Δ.

*Peeling, N-IHT*: the s largest coordinates are far above the rest (so the selection is the same
under D and D′) and every coordinate moves by the full ℓ∞ sensitivity λ between D and D′. For
one N-IHT fit (M = 1, θ⁰ = 0) this is the spec §5.1 construction: n − 1 identical rows
x = x_max·(1,…,1,0,…,0), y = R, and one row that is x = x_max·1, y = R in D and x = −x_max·1,
y = R in D′, which moves (2η/n)·h by exactly λ₀ = 4η·x_max·R/n in every coordinate. The rows are
fed *unclipped* (×10 beyond the bounds) through FLIPHAT's learning path, so missing clipping
would be caught too. With per-row contribution clipping (``grad_clip=G``, spec §14.1) the same
pair attains the clipped sensitivity 4ηG/n: every product x·y of the pair is ±100·x_max·R,
far beyond G, so the changed row's contribution moves from +G to −G in every coordinate.

The exact (PLD) accountant of Peeling (spec §14.2) is audited with the same pairs and claims;
its per-release (values) claim s·λ/ξ is tight whatever accountant chose ξ, so a halved scale
is caught for it too.

Two claims are audited for Peeling and N-IHT:

* **end to end**: the (ε, δ) guarantee of the release;
* **per release** (pure DP): given the support, the s released values form a Laplace mechanism
  with ℓ1 sensitivity s·λ and scale ξ, hence (s·λ/ξ)-DP. This is one of the two pieces
  Lemma A.2 composes. It is tight, so it catches an under-noised scale that the end-to-end
  claim cannot: the closed form 2√(3 s ln(1/δ))/ε is so conservative that half its noise is still
  (ε, δ)-DP on every pair we know (see ``docs/privacy/audits.md``).

*DP-LinUCB Gram releases* (docs/privacy/dp-linucb-calibration.md): the pair is one round with the
same action and opposite rewards, a = [x; +B̃], b = [x; −B̃] with ‖x‖ = L, fed 10× beyond the
bounds through DP-LinUCB's own clipping: a ⊥ b and ‖a‖ = ‖b‖ = L̃, so aaᵀ − bbᵀ attains the
sensitivity L̃² (rescaled coordinates). Three mechanisms:

* **tree (Gaussian)**: the m node releases that contain the first row (one per level) — a
  stronger output than the releases, which are post-processing of them and of data-independent
  pads. The ``certified`` calibration is exact GDP composition, so its end-to-end (ε, δ) claim is
  tight and a halved σ is caught directly.
* **square-root factorisation**: the T releases R = A·x + B·z, scored through B⁻¹R = C·x + z;
  certified = exact GDP with sensitivity L̃²‖C‖_{1→2}; tight, halving caught.
* **BLT**: T releases R = A·x + A·C⁻¹·z produced by the buffer recursion (θ̂, ω̂) from the
  production sampler, scored through C·(ΔR) = C·x + z computed by C's own buffer recursion
  (θ, ω); certified = exact GDP with the all-horizon sensitivity L̃²‖C‖_{1→2}. The audit
  horizon is long enough for the first column to carry ≥ 99.9 % of that norm, so the claim is
  tight and a halved σ is caught.
* **Wishart node**: Theorem 8's claim is ~8× conservative in ε here, so a halved noise scale
  (scale matrix ×½) still satisfies it. The tight component claim is the node's *exact* privacy
  profile for this pair, δ(ε*), which reduces to a 2×2 Wishart (the inverse-Wishart marginal of
  span{a, b}) and is evaluated by an independent Monte Carlo; that claim catches the halving.

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import functools
import math
from typing import Literal

import numpy as np

from ..estimators.niht import NIHT, niht_sensitivity
from ..policies.dp_linucb import DPLinUCB
from ..policies.fliphat import FLIPHAT
from ..policies.types import NoiseBackend
from ..privacy.audit import AuditResult, audit
from ..privacy.blt import BLTAggregator, blt_coefficients, blt_inverse
from ..privacy.factorization import sqrt_toeplitz_coefficients
from ..privacy.gaussian import GaussianMechanism
from ..privacy.gram_calibration import WISHART_THM8_CONSTANT
from ..privacy.laplace import LaplaceMechanism
from ..privacy.matrix_noise import WishartNoise
from ..privacy.noise import NoiseSource
from ..privacy.peeling import Peeling
from ..privacy.rows import prepare_rows
from ..privacy.symmetric import packing
from .audit_cli import audit_main

__all__ = [
    "audit_blt",
    "audit_factorisation",
    "audit_gaussian",
    "audit_gram_tree",
    "audit_laplace",
    "audit_niht",
    "audit_peeling",
    "audit_wishart_node",
    "gram_pair",
    "niht_pair",
    "run_all",
    "wishart_exact_delta",
]


def _backend_rng(backend: str, seed: int, name: str):
    """``rng -> stream`` for the samplers: the audit's own numpy generator (``"fast"``), or a
    fresh secure stream per call keyed by ``seed`` (``"secure"``: grid-valued exact noise)."""
    if backend == "fast":
        return lambda rng: rng
    src = NoiseSource(seed, backend=backend)
    calls = iter(range(1 << 62))
    return lambda rng: src.generator("audit", name, next(calls))


def audit_laplace(
    multiplier: float = 1.0, n: int = 200_000, seed: int = 1, backend: str = "fast"
) -> AuditResult:
    """Laplace mechanism, ε = 1, Δ = 1; ``multiplier`` scales the noise (0.5 = halved).

    ``backend="secure"`` runs the mechanism's release on the secure noise backend (the value
    rounded to the public grid plus exact discrete Laplace noise).
    """
    mech = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    scale = mech.scale * multiplier
    stream = _backend_rng(backend, seed, "laplace")

    def sampler(which, k, rng):
        return stream(rng).laplace(np.full(k, which * mech.sensitivity), scale, k)

    name = f"laplace ε=1 (noise ×{multiplier:g}, {backend})"
    return audit(sampler, 1.0, 0.0, n, np.random.default_rng(seed), name=name)


def audit_gaussian(
    multiplier: float = 1.0, n: int = 400_000, seed: int = 2, backend: str = "fast"
) -> AuditResult:
    """Analytic Gaussian mechanism, ε = 1, δ = 1e-2, Δ = 1 (``backend`` as for Laplace)."""
    mech = GaussianMechanism(sensitivity=1.0, epsilon=1.0, delta=1e-2)
    sigma = mech.sigma * multiplier
    stream = _backend_rng(backend, seed, "gaussian")

    def sampler(which, k, rng):
        return stream(rng).normal(np.full(k, float(which)), sigma, k)

    name = f"gaussian ε=1 δ=1e-2 (noise ×{multiplier:g}, {backend})"
    return audit(sampler, 1.0, 1e-2, n, np.random.default_rng(seed), name=name)


def _values_llr(values: np.ndarray, m0: np.ndarray, m1: np.ndarray, scale: float) -> np.ndarray:
    """Privacy loss ln p_D/p_D′ of released Laplace values with means m0 (D) and m1 (D′)."""
    return (np.abs(values - m1) - np.abs(values - m0)).sum(axis=-1) / scale


def audit_peeling(
    claim: str = "values",
    multiplier: float = 1.0,
    s: int = 2,
    epsilon: float = 5.0,
    delta: float = 0.01,
    d: int = 8,
    n: int = 200_000,
    seed: int = 3,
    accountant: str = "closed_form",
    backend: str = "fast",
) -> AuditResult:
    """Peeling on the values-only worst-case pair (λ = 1).

    ``claim="values"`` audits the pure (s·λ/ξ)-DP of the released values; ``claim="end-to-end"``
    audits the (ε, δ) guarantee. ``accountant`` calibrates ξ (closed form or PLD); ``backend``
    as for :func:`audit_laplace`.
    """
    stream = _backend_rng(backend, seed, "peeling")
    lam = 1.0
    peel = Peeling(s, epsilon, delta, lam, scale_multiplier=multiplier, accountant=accountant)
    nominal = Peeling(s, epsilon, delta, lam, accountant=accountant)
    v0 = np.zeros(d)
    v0[:s] = 1000.0 * lam * (1 + np.arange(s))  # top-s far above the rest
    v1 = v0 + lam  # every coordinate moves by λ

    def sampler(which, k, rng):
        V = np.broadcast_to(v1 if which else v0, (k, d))
        idx, vals = peel.release_many(V, stream(rng))
        return _values_llr(vals, v0[idx], v1[idx], nominal.scale)

    if claim == "values":
        eps, dl = s * lam / nominal.scale, 0.0
    else:
        eps, dl = epsilon, delta
    name = (
        f"peeling {claim} {accountant} s={s} ε={epsilon:g} δ={delta:g} "
        f"(noise ×{multiplier:g}, {backend})"
    )
    return audit(sampler, eps, dl, n, np.random.default_rng(seed), name=name)


def niht_pair(d: int, s: int, n_rows: int, x_max: float, R: float):
    """Rows of the worst-case neighbouring datasets for one N-IHT fit (unclipped by 10×)."""
    base = np.zeros((n_rows - 1, d))
    base[:, :s] = 10.0 * x_max
    X0 = np.vstack([base, np.full((1, d), 10.0 * x_max)])
    X1 = np.vstack([base, np.full((1, d), -10.0 * x_max)])
    y = np.full(n_rows, 10.0 * R)
    return X0, X1, y


def niht_values_sampler(est, accs, n_rows: int, R: float, m0, m1, xi: float):
    """The audit's sampler for N-IHT fits (one iteration) of the accumulators ``accs`` (D, D′):
    each sample is a full ``est.fit`` with fresh noise, scored by the exact privacy-loss
    statistic of its s released values (Laplace of scale ``xi`` around ``m0`` / ``m1`` on the
    selected support)."""

    def sampler(which, k, rng):
        src = NoiseSource(seed=int(rng.integers(1 << 62)))
        out = np.empty(k)
        for i in range(k):
            fit = est.fit(
                accs[which], n=n_rows, reward_clip=R, iterations=1, noise=src, label=("audit", i)
            )
            out[i] = _values_llr(fit.values, m0[fit.indices], m1[fit.indices], xi)
        return out

    return sampler


def audit_niht(
    claim: str = "values",
    calibration: Literal["certified", "paper"] = "certified",
    multiplier: float = 1.0,
    s: int = 2,
    epsilon: float = 5.0,
    delta: float = 0.01,
    d: int = 20,
    n: int = 20_000,
    seed: int = 4,
    setting: str = "unit",
    grad_clip: float | None = None,
    accountant: Literal["auto", "pld", "closed_form"] = "closed_form",
) -> AuditResult:
    """One N-IHT fit (M = 1, θ⁰ = 0) of FLIPHAT on the spec §5.1 worst-case pair.

    The two datasets go through FLIPHAT's own clipping and accumulation; every sample is a
    full ``NIHT.fit`` with fresh noise. ``setting="unit"`` uses x_max = b_max = 1, η = 0.1;
    ``setting="paper"`` the paper's d = 400, x_max = √(2 ln 400), b_max = 3.436219, η = 1e-4.
    ``grad_clip`` (G, or None for none) and ``accountant`` select the spec §14 options.
    """
    if setting == "paper":
        d, x_max, b_max, eta = 400, math.sqrt(2 * math.log(400)), 3.436219, 1e-4
    else:
        x_max, b_max, eta = 1.0, 1.0, 0.1
    n_rows = 1024
    accs = []
    R = 0.0  # the reward clip the policy calibrates for n_rows (the same for both datasets)
    for which in (0, 1):
        pol = FLIPHAT(
            d=d,
            s=s,
            epsilon=epsilon,
            delta=delta,
            eta=eta,
            b_max=b_max,
            x_max=x_max,
            l1_radius=1e9,
            sigma_prior=0.1,
            calibration=calibration,
            seed=0,
            first_episode_len=n_rows,
            clip_contexts=True,
            grad_clip="off" if grad_clip is None else grad_clip,
            accountant=accountant,
        )
        R = pol.reward_clip_for(n_rows)
        rows = niht_pair(d, s, n_rows, x_max, R)
        pol.decide(np.zeros((n_rows, 2, d)))
        pol.learn(rows[which], rows[2], np.arange(1, n_rows + 1))
        accs.append(pol._acc[0])

    def niht(multiplier: float = 1.0) -> NIHT:  # the audited fit (nominal: multiplier 1)
        return NIHT(
            s=s,
            epsilon=epsilon,
            delta=delta,
            eta=eta,
            l1_radius=1e9,
            x_max=x_max,
            b_max=b_max,
            calibration=calibration,
            scale_multiplier=multiplier,
            grad_clip=grad_clip,
            accountant=accountant,
        )

    est = niht(multiplier)
    lam0 = niht_sensitivity(
        0,
        "certified",
        eta=eta,
        n=n_rows,
        x_max=x_max,
        reward_clip=R,
        l1_radius=1e9,
        grad_clip=grad_clip,
    )
    nominal = niht().calibrate(n_rows, R, 1)[0]
    m0 = (2 * eta / n_rows) * accs[0].h
    m1 = (2 * eta / n_rows) * accs[1].h
    shift = np.abs(m1 - m0)
    # the pair attains λ₀ up to the 2⁻¹⁶ grid of the clipped bounds, and never exceeds it
    assert np.all(shift <= lam0 * (1 + 1e-12)) and np.all(shift >= lam0 * (1 - 1e-4)), shift

    sampler = niht_values_sampler(est, accs, n_rows, R, m0, m1, nominal["scale"])
    if claim == "values":
        eps, dl = s * nominal["sensitivity"] / nominal["scale"], 0.0
    else:
        eps, dl = epsilon, delta
    opts = ("" if grad_clip is None else f" G={grad_clip:g}") + (
        "" if accountant == "closed_form" else f" {accountant}"
    )
    name = (
        f"n-iht fit {claim} {calibration}{opts} [{setting}] s={s} ε={epsilon:g} δ={delta:g} "
        f"(noise ×{multiplier:g})"
    )
    return audit(sampler, eps, dl, n, np.random.default_rng(seed), name=name)


# -- DP-LinUCB -----------------------------------------------------------------------------------
def gram_pair(d: int = 2, L: float = 1.0, B_tilde: float = 1.0, n_rows: int = 4):
    """Worst-case neighbouring row sequences: row 1 is [x; +B̃] in D and [x; −B̃] in D′.

    Returned *unclipped* (10× beyond the bounds); the other rows are identical.
    """
    X = np.zeros((n_rows, d))
    X[:, 0] = 10.0 * L
    X[1:, 1] = 0.0
    y0 = np.full(n_rows, 0.5 * B_tilde)
    y0[0] = 10.0 * B_tilde
    y1 = y0.copy()
    y1[0] = -10.0 * B_tilde
    return X, y0, y1


def _rescaled_weights(p: int) -> np.ndarray:
    """1/variance factor per packed coordinate of symmetrised noise: 1 off-diagonal, ½ on it."""
    return packing(p).rescale ** 2


def node_loss_sampler(sampler, m0: np.ndarray, m1: np.ndarray, w: np.ndarray):
    """The audit's sampler for m Gaussian nodes released at means ``m0`` (D) or ``m1`` (D′):
    draws the nodes and returns ⟨V − m1, (m0 − m1)·w⟩, proportional to the exact privacy-loss
    statistic in the rescaled coordinates ``w``."""
    diff = m0 - m1
    n_nodes = diff.shape[0]

    def sampler_fn(which, k, rng):
        Z = sampler.sample_many(rng, k * n_nodes).reshape(k, n_nodes, -1)
        V = Z + (m0 if which == 0 else m1)
        return ((V - m1) * diff * w).sum(axis=(1, 2))

    return sampler_fn


def _linucb(
    tree_impl: Literal["binary", "sqrt_toeplitz", "blt"],
    multiplier: float,
    calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"],
    epsilon: float,
    delta: float,
    d: int,
    n_cap: int,
    n_steps: int | None = None,
    backend: NoiseBackend = "auto",
) -> DPLinUCB:
    """DP-LinUCB as the tree audits build it (seed 0, its noise × ``multiplier``; ``backend``
    "fast": the fast backend's audit, the secure one's is testing/secure_audit_helpers)."""
    return DPLinUCB(
        d=d,
        epsilon=epsilon,
        delta=delta,
        n_cap=n_cap,
        calibration=calibration,
        tree_impl=tree_impl,
        n_steps=n_steps,
        seed=0,
        noise_scale_multiplier=multiplier,
        noise_backend=backend,
    )


def audit_gram_tree(
    multiplier: float = 1.0,
    calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"] = "certified",
    epsilon: float = 1.0,
    delta: float = 1e-2,
    d: int = 2,
    n_cap: int = 4,
    n: int = 400_000,
    seed: int = 5,
) -> AuditResult:
    """The Gaussian padded tree's node releases containing the first row (end-to-end claim).

    The rows go through DP-LinUCB's clipping; the node sums are read from its tree after each
    insertion; the node noise comes from the tree's own sampler (σ × ``multiplier``).
    """
    X, y0, y1 = gram_pair(d, n_rows=n_cap)
    sums = []
    sampler = None
    for y in (y0, y1):
        pol = _linucb("binary", multiplier, calibration, epsilon, delta, d, n_cap, backend="fast")
        pol.refit()
        tree = pol._agg.aggregator
        sampler = tree.sampler
        per_level = []
        for t in range(n_cap):
            pol.decide(np.zeros((1, 1, d)))
            pol.learn(X[t : t + 1], y[t : t + 1], np.array([t + 1]))
            pol.refit()
            s = t + 1
            if s & (s - 1) == 0:  # s = 2^ℓ completes the level-ℓ node over rows 1..2^ℓ
                per_level.append(tree.exact_sum())
        sums.append(np.array(per_level))
    m0, m1 = sums
    diff = m0 - m1
    w = _rescaled_weights(d + 1)
    cal = pol.calibration_constants()
    lt2 = cal.L_tilde**2
    norms = np.sqrt((diff**2 * w).sum(axis=1))  # ‖Δ‖ in the rescaled coordinates
    assert np.all(norms <= lt2 * (1 + 1e-12)) and np.all(norms >= lt2 * (1 - 1e-3)), norms
    m = diff.shape[0]
    assert m == cal.m

    name = (
        f"dp-linucb tree gaussian {calibration} ε={epsilon:g} δ={delta:g} "
        f"m={m} (noise ×{multiplier:g})"
    )
    return audit(
        node_loss_sampler(sampler, m0, m1, w),
        epsilon,
        delta,
        n,
        np.random.default_rng(seed),
        name=name,
    )


def audit_factorisation(
    multiplier: float = 1.0,
    calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"] = "certified",
    epsilon: float = 1.0,
    delta: float = 1e-2,
    d: int = 2,
    steps: int = 8,
    n: int = 400_000,
    seed: int = 6,
) -> AuditResult:
    """The square-root factorisation's T releases, row 1 differing (the longest column of C)."""
    X, y0, y1 = gram_pair(d, n_rows=1)
    pol = _linucb("sqrt_toeplitz", multiplier, calibration, epsilon, delta, d, steps, steps)
    agg = pol._state()._agg.aggregator
    sampler = agg.sampler
    pk = packing(d + 1)
    r0, _, _ = prepare_rows(X, y0, pol.L, pol.B_tilde)
    r1, _, _ = prepare_rows(X, y1, pol.L, pol.B_tilde)
    diff = pk.outer_sum(r0) - pk.outer_sum(r1)
    w = _rescaled_weights(d + 1)
    f = sqrt_toeplitz_coefficients(steps)
    B = np.array([[f[i - j] if i >= j else 0.0 for j in range(steps)] for i in range(steps)])
    Binv = np.linalg.inv(B)
    prefix0 = np.broadcast_to(pk.outer_sum(r0), (steps, pk.size))  # row 1 in step 1, no more
    prefix1 = np.broadcast_to(pk.outer_sum(r1), (steps, pk.size))
    # C·x differs by f_{t−1}·Δ at step t: the mechanism the proof analyses
    cdiff = f[:, None] * diff[None, :]

    def sampler_fn(which, k, rng):
        Z = sampler.sample_many(rng, k * steps).reshape(k, steps, -1)
        R = (prefix0 if which == 0 else prefix1) + np.matmul(B, Z)  # the releases A x + B z
        obs = np.matmul(Binv, R - prefix1)  # B⁻¹(R − A x′) = C(x − x′) + z
        return (obs * cdiff * w).sum(axis=(1, 2))

    name = (
        f"dp-linucb sqrt-toeplitz {calibration} ε={epsilon:g} δ={delta:g} "
        f"T={steps} (noise ×{multiplier:g})"
    )
    return audit(sampler_fn, epsilon, delta, n, np.random.default_rng(seed), name=name)


def audit_blt(
    multiplier: float = 1.0,
    calibration: Literal["certified", "paper", "zcdp", "authors_code_2018"] = "certified",
    epsilon: float = 1.0,
    delta: float = 1e-2,
    d: int = 2,
    n_cap: int = 15,
    steps: int = 48,
    n: int = 400_000,
    seed: int = 7,
) -> AuditResult:
    """The BLT's first ``steps`` releases, row 1 differing (the first, longest column of C).

    DP-LinUCB with ``tree_impl="blt"`` and horizon ``n_cap`` supplies the calibration, the
    parameters and the sampler; the releases are generated by the production recursion
    (buffers θ̂, ω̂), chunked, projected on the pair's difference only after C is applied.
    """
    X, y0, y1 = gram_pair(d, n_rows=1)
    pol = _linucb("blt", multiplier, calibration, epsilon, delta, d, n_cap)
    agg = pol._state()._agg.aggregator
    assert isinstance(agg, BLTAggregator)  # tree_impl="blt"
    sampler = agg.sampler
    th, om = np.asarray(agg.theta), np.asarray(agg.omega)
    th_hat, om_hat = blt_inverse(th, om)
    pk = packing(d + 1)
    r0, _, _ = prepare_rows(X, y0, pol.L, pol.B_tilde)
    r1, _, _ = prepare_rows(X, y1, pol.L, pol.B_tilde)
    x0, x1 = pk.outer_sum(r0), pk.outer_sum(r1)
    diff = x0 - x1
    w = _rescaled_weights(d + 1)
    c = blt_coefficients(th, om, steps)  # C·(x − x′) at step t is c_{t−1}·Δ

    u = diff * w  # the score is linear: project each draw on the pair's direction at once
    mean0, mean1 = float(x0 @ u), float(x1 @ u)

    def sampler_fn(which, k, rng):
        out = np.empty(k)
        for lo in range(0, k, 50_000):
            m = min(50_000, k - lo)
            S_hat = np.zeros((th.size, m))  # noise buffers (the mechanism's recursion)
            S = np.zeros((th.size, m))  # C's buffers (the analysis)
            N = np.zeros(m)
            prev = np.zeros(m)
            score = np.zeros(m)
            for t in range(steps):
                z = sampler.sample_many(rng, m) @ u
                N = N + z + om_hat @ S_hat
                S_hat = th_hat[:, None] * S_hat + z
                R = N + (mean0 if which == 0 else mean1)  # row 1 in step 1, no more
                v = R - prev - (mean1 if t == 0 else 0.0)  # ΔR − X′ = C⁻¹z + (X − X′)
                prev = R
                score += c[t] * (v + om @ S)  # (C·v)_t = c_{t−1}Δ + z_t, projected
                S = th[:, None] * S + v
            out[lo : lo + m] = score
        return out

    name = (
        f"dp-linucb blt {calibration} ε={epsilon:g} δ={delta:g} "
        f"T={agg.n_steps} audited {steps} steps (noise ×{multiplier:g})"
    )
    return audit(sampler_fn, epsilon, delta, n, np.random.default_rng(seed), name=name)


def _wishart_loss_2x2(rng, n: int, k: int, p: int, r: float) -> np.ndarray:
    """Privacy loss of the Wishart node for the pair (reduced form, see the module docstring).

    L = −((k − p − 1)/2)·ln det(I₂ + D·S⁻¹), D = r·diag(1, −1), S ~ W₂(I, k − p + 2);
    +∞ where W + Δ is not positive definite (an output impossible under D′).
    """
    kp = k - p + 2
    a11 = np.sqrt(rng.chisquare(kp, n))
    a22 = np.sqrt(rng.chisquare(kp - 1, n))
    a21 = rng.standard_normal(n)
    s11, s21, s22 = a11 * a11, a11 * a21, a21 * a21 + a22 * a22
    det_s = s11 * s22 - s21 * s21
    det_sd = (s11 + r) * (s22 - r) - s21 * s21
    out = np.full(n, np.inf)
    ok = det_sd > 0
    out[ok] = -0.5 * (k - p - 1) * (np.log(det_sd[ok]) - np.log(det_s[ok]))
    return out


@functools.lru_cache(maxsize=16)
def wishart_exact_delta(
    epsilon: float, k: int, p: int, r: float = 1.0, n: int = 4_000_000, seed: int = 99
) -> tuple[float, float]:
    """(δ̂(ε), standard error) of the Wishart node's exact privacy profile for the audit pair.

    δ(ε) = E_D[(1 − e^{ε − L})₊] by Monte Carlo on the 2×2 reduction (independent of the
    production sampler); r = L̃²/scale (1 nominal).
    """
    rng = np.random.default_rng(seed)
    vals = np.clip(1.0 - np.exp(epsilon - _wishart_loss_2x2(rng, n, k, p, r)), 0.0, None)
    return float(vals.mean()), float(vals.std(ddof=1) / math.sqrt(n))


def audit_wishart_node(
    claim: str = "exact",
    multiplier: float = 1.0,
    eps0: float = 0.9,
    delta0: float = 1e-3,
    eps_star: float = 0.1,
    d: int = 2,
    n: int = 400_000,
    seed: int = 7,
) -> AuditResult:
    """One Wishart tree node W_p(L̃²I, k), k from Theorem 8 at (ε₀, δ₀), on the pair.

    ``claim="thm8"`` audits Theorem 8's (ε₀, δ₀); ``claim="exact"`` audits the exact profile
    (ε*, δ̂(ε*) + 5 s.e.), tight enough to catch a halved noise scale.
    """
    p = d + 1
    k = p + math.ceil(WISHART_THM8_CONSTANT * math.log(4.0 / delta0) / eps0**2)
    X, y0, y1 = gram_pair(d, n_rows=1)
    r0, _, _ = prepare_rows(X, y0, 1.0, 1.0)
    r1, _, _ = prepare_rows(X, y1, 1.0, 1.0)
    lt2 = 2.0
    S0, S1 = r0.T @ r0, r1.T @ r1
    noise = WishartNoise(p, lt2, k, scale_multiplier=multiplier)
    pk = packing(p)

    def sampler_fn(which, kk, rng):
        W = pk.unpack(noise.sample_many(rng, kk))
        out = W + (S0 if which == 0 else S1)
        s0, l0 = np.linalg.slogdet(out - S0)
        s1, l1 = np.linalg.slogdet(out - S1)
        score = 0.5 * (k - p - 1) * (l0 - l1)  # ln p_D/p_D′ (tr Δ = 0)
        score = np.where(s1 <= 0, np.inf, score)
        return np.where(s0 <= 0, -np.inf, score)

    if claim == "thm8":
        eps, dl = eps0, delta0
    else:
        dhat, se = wishart_exact_delta(eps_star, k, p, r=lt2 / lt2)
        eps, dl = eps_star, dhat + 5 * se
    name = f"dp-linucb wishart node {claim} k={k} (ε*={eps:g}, δ*={dl:.2e}) (noise ×{multiplier:g})"
    return audit(sampler_fn, eps, dl, n, np.random.default_rng(seed), name=name)


def run_all(quick: bool = False) -> list[AuditResult]:
    k = 4 if quick else 1
    out = [
        audit_laplace(1.0, n=200_000 // k),
        audit_laplace(0.5, n=200_000 // k),
        audit_gaussian(1.0, n=400_000 // k),
        audit_gaussian(0.5, n=400_000 // k),
        audit_peeling("values", 1.0, n=200_000 // k),
        audit_peeling("values", 0.5, n=200_000 // k),
        audit_peeling("end-to-end", 1.0, n=200_000 // k),
        audit_peeling("end-to-end", 0.5, n=200_000 // k),
        audit_niht("values", "certified", 1.0, n=20_000 // k),
        audit_niht("values", "certified", 0.5, n=20_000 // k),
        audit_niht("end-to-end", "certified", 1.0, n=20_000 // k),
        audit_niht("end-to-end", "certified", 0.5, n=20_000 // k),
        audit_peeling("values", 1.0, n=200_000 // k, accountant="pld"),
        audit_peeling("values", 0.5, n=200_000 // k, accountant="pld"),
        audit_peeling("end-to-end", 1.0, n=200_000 // k, accountant="pld"),
    ]
    for mult in (1.0, 0.5):  # the product's defaults: contribution clip G and the PLD accountant
        for claim in ("values", "end-to-end"):
            out.append(
                audit_niht(claim, "certified", mult, n=20_000 // k, grad_clip=0.3, accountant="pld")
            )
    for eps in (0.5, 1.0, 2.0, 5.0):  # the paper calibration at the paper's own setting
        out.append(
            audit_niht(
                "end-to-end", "paper", 1.0, s=10, epsilon=eps, n=20_000 // k, setting="paper"
            )
        )
        out.append(
            audit_niht(
                "end-to-end", "certified", 1.0, s=10, epsilon=eps, n=20_000 // k, setting="paper"
            )
        )
    out.append(
        audit_niht("values", "paper", 1.0, s=10, epsilon=1.0, n=20_000 // k, setting="paper")
    )
    for mult in (1.0, 0.5):
        out.append(audit_gram_tree(mult, n=400_000 // k))
        out.append(audit_factorisation(mult, n=400_000 // k))
        out.append(audit_blt(mult, n=400_000 // k))
        out.append(audit_wishart_node("exact", mult, n=400_000 // k))
        out.append(audit_wishart_node("thm8", mult, n=400_000 // k))
    out.append(audit_gram_tree(1.0, calibration="paper", n=400_000 // k))
    out.append(audit_gram_tree(1.0, calibration="zcdp", n=400_000 // k))
    return out


def main(argv=None) -> int:
    return audit_main("Run the privacy audits of every mechanism.", run_all, argv)


if __name__ == "__main__":
    raise SystemExit(main())
