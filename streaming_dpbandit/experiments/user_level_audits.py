"""Privacy audits of user-level contribution bounding (``docs/privacy/user-level.md``).

The neighbouring pair differs in **every** event of one user u — more events than the bound k,
so the bounding itself is under test — and the mechanism is calibrated by the derivation
(sensitivity k·Δ). Each audit takes ``multiplier`` (noise × multiplier; 0.5 = the halved-noise
mutant) and the Laplace one also ``bound=False`` (the mutant without contribution bounding).

* :func:`audit_user_laplace` — a Laplace-noised sum of the admitted rewards of one window
  (pure ε: group privacy kε, tight: u's k admitted rows move the sum by exactly k·Δ);
* :func:`audit_user_tree` — DP-LinUCB's Gaussian tree driven through
  :class:`~streaming_dpbandit.policies.user_level.UserLevel`, every node release of the epoch,
  at the ε′ that :func:`~streaming_dpbandit.privacy.user_level.calibrate_for_group` derives;
* :func:`audit_user_lasso_gram` — PrivateLASSO-R's Gaussian Gram release of a real forgetful
  block, the rows fed through :class:`UserLevel`, at the ε′ of
  :func:`~streaming_dpbandit.policies.user_level.private_lasso_group_epsilon`; the claim is the
  Gaussian profile of the ledger's component grouped by k (ρ → k²ρ);
* :func:`audit_user_niht` — one N-IHT fit of FLIPHAT at its group calibration
  (ε/k, δ/(k·e^{(k−1)ε/k})), the rows fed through :class:`UserLevel`; the claim is the sharp
  per-release (values) part k·s·λ/ξ′ for the user's k admitted rows.
"""

from __future__ import annotations

import math

import numpy as np

from ..policies.dp_linucb import DPLinUCB
from ..policies.fliphat import FLIPHAT
from ..policies.private_lasso import PrivateLASSO
from ..policies.user_level import UserLevel, group_params
from ..privacy.audit import AuditResult, audit
from ..privacy.gaussian import analytic_gaussian_sigma, gaussian_delta
from ..privacy.gram import sym_gauss, u_vector
from ..privacy.laplace import LaplaceMechanism
from ..privacy.user_bound import UserContributionBound
from ..privacy.user_level import calibrate_for_group, group_component
from ..privacy.zcdp import epsilon_from_rho
from .audits import (
    _rescaled_weights,
    gram_pair,
    niht_pair,
    niht_values_sampler,
    node_loss_sampler,
)

__all__ = [
    "LASSO_AUDIT_DELTA",
    "audit_user_laplace",
    "audit_user_lasso_gram",
    "audit_user_niht",
    "audit_user_tree",
    "lasso_user_policy",
    "lasso_user_target",
    "user_stream",
]


def user_stream(k: int, extra: int, others: int) -> list[str]:
    """u's k + ``extra`` events first, then ``others`` events of distinct other users."""
    return ["u"] * (k + extra) + [f"v{i}" for i in range(others)]


def audit_user_laplace(
    multiplier: float = 1.0,
    k: int = 3,
    epsilon: float = 1.0,
    bound: bool = True,
    n: int = 100_000,
    seed: int = 11,
) -> AuditResult:
    """Sum of the admitted rewards (clipped to [−1, 1], Δ = 2 per replaced row) + Laplace
    noise of scale k·Δ/ε. D: u's rewards are +1, D′: −1 (u has k + 2 events)."""
    users = user_stream(k, 2, 4)
    ub = UserContributionBound(k, seed=seed)
    mask = ub.admit(ub.hash_users(users), np.zeros(len(users), dtype=np.int64))
    if not bound:
        mask[:] = True
    is_u = np.array([x == "u" for x in users])
    y0 = np.where(is_u, 1.0, 0.25)
    y1 = np.where(is_u, -1.0, 0.25)
    s0, s1 = float(y0[mask].sum()), float(y1[mask].sum())
    comp = group_component(LaplaceMechanism(epsilon, 2.0).accounting(), k)
    scale = comp["sensitivity"] / epsilon * multiplier

    def sampler(which, m, rng):
        return rng.laplace(s0 if which == 0 else s1, scale, m)

    name = (
        f"user-level laplace sum k={k} ε={epsilon:g} (noise ×{multiplier:g}, "
        f"{'bounded' if bound else 'unbounded'})"
    )
    return audit(sampler, epsilon, 0.0, n, np.random.default_rng(seed), name=name)


def audit_user_tree(
    multiplier: float = 1.0,
    k: int = 2,
    epsilon: float = 1.0,
    delta: float = 1e-2,
    d: int = 2,
    n_cap: int = 4,
    n: int = 150_000,
    seed: int = 12,
) -> AuditResult:
    """Every node of DP-LinUCB's Gaussian tree over one epoch, the rows fed through
    :class:`UserLevel` (k per user): u's k + 1 events come first (rewards +B̃ in D, −B̃ in D′,
    sent 10× beyond the clip), then distinct other users fill the epoch."""

    def acc(e):
        pol = DPLinUCB(
            d=d, epsilon=e, delta=delta, n_cap=n_cap, tree_impl="binary", noise_backend="fast"
        )
        return pol.explain()["constants"]["accounting"]

    eps_inner = calibrate_for_group(acc, k, epsilon, delta)
    users = user_stream(k, 1, n_cap - k)
    X, y0, _ = gram_pair(d, n_rows=len(users))
    X[:] = X[0]
    is_u = np.array([x == "u" for x in users])
    y0 = np.where(is_u, 10.0, 0.5)
    y1 = np.where(is_u, -10.0, 0.5)
    prefixes, sampler, pol = [], None, None
    for y in (y0, y1):
        pol = DPLinUCB(
            d=d,
            epsilon=eps_inner,
            delta=delta,
            n_cap=n_cap,
            seed=0,
            noise_scale_multiplier=multiplier,
            tree_impl="binary",  # the audit reads the tree's nodes
            noise_backend="fast",  # and samples them with the tree's (numpy) node sampler
        )
        wrapped = UserLevel(pol, k, seed=seed)
        pol.refit()
        tree = pol._agg.aggregator
        sampler = tree.sampler
        P = [np.zeros_like(tree.exact_sum())]
        for t in range(len(users)):
            pol.decide(np.zeros((1, 1, d)))
            before = pol.counters["rows_inserted"]
            wrapped.learn(X[t : t + 1], y[t : t + 1], np.array([t + 1]), user_ids=users[t : t + 1])
            pol.refit()
            if pol.counters["rows_inserted"] > before:
                P.append(tree.exact_sum())
        assert len(P) == n_cap + 1, "the bound must admit exactly n_cap rows"
        # every dyadic node [a, b) of the epoch: P_b − P_a
        nodes = []
        size = 1
        while size <= n_cap:
            nodes += [P[a + size] - P[a] for a in range(0, n_cap, size)]
            size *= 2
        prefixes.append(np.array(nodes))
    m0, m1 = prefixes
    name = (
        f"user-level dp-linucb tree k={k} ε={epsilon:g} δ={delta:g} ε′={eps_inner:.4g} "
        f"(noise ×{multiplier:g})"
    )
    return audit(
        node_loss_sampler(sampler, m0, m1, _rescaled_weights(d + 1)),
        epsilon,
        delta,
        n,
        np.random.default_rng(seed),
        name=name,
    )


#: The user-level target of :func:`audit_user_lasso_gram`: k rows cost ρ_k = 1/(2s²)-zCDP with
#: s = σ/(kL̃²) the Gaussian noise at which (1, 10⁻²) is tight, i.e. (ε_t, 10⁻⁸) by the zCDP
#: conversion the policy calibrates with.
LASSO_AUDIT_DELTA = 1e-8


def lasso_user_target(delta: float = LASSO_AUDIT_DELTA) -> tuple[float, float]:
    """(ρ_k, ε_t): the grouped ρ the audit's release is calibrated to and its (ε_t, δ) target."""
    s_a = analytic_gaussian_sigma(1.0, 1e-2, 1.0)
    rho_k = 1.0 / (2.0 * s_a**2)
    return rho_k, epsilon_from_rho(rho_k, delta)


def lasso_user_policy(k: int, multiplier: float = 1.0) -> PrivateLASSO:
    """PrivateLASSO-R at the group calibration for k of the audit's target (d = 2, full
    support: the whole ρ goes to the Gram release of the one block [1, 4])."""
    _rho_k, eps_t = lasso_user_target()
    eps = group_params("private-lasso", {}, k, eps_t, LASSO_AUDIT_DELTA)["epsilon"]
    return PrivateLASSO(
        d=2,
        s0=1,
        horizon=8,
        epsilon=eps,
        delta=LASSO_AUDIT_DELTA,
        l_min=2,
        clip_coord=1.0,
        clip_l2=math.sqrt(2.0),
        reward_bound=math.sqrt(2.0),
        support="full",
        seed=0,
        noise_scale_multiplier=multiplier,
    )


def audit_user_lasso_gram(
    multiplier: float = 1.0,
    k: int = 2,
    bound: bool = True,
    n: int = 200_000,
    seed: int = 15,
) -> AuditResult:
    """PrivateLASSO-R's Gram release (M3) of one forgetful block [1, 4], rows fed through
    :class:`UserLevel` (k per user): u's k + 1 events come first, each v = (1, 1, √2) in D and
    (−1, −1, √2) in D′ (orthogonal, ‖v‖² = L̃², sent 10× beyond the clip), so u's k admitted
    rows attain the group sensitivity k·L̃² exactly; one other user fills the block.

    Claim: ε = 1 at the δ of the Gaussian profile of the release's ledger component grouped by
    k (``group_component``: ρ → k²ρ, μ = √(2k²ρ)). ``bound=False`` learns every row (u's
    k + 1 rows enter: the mutant without bounding).
    """
    users = user_stream(k, 1, 4 - (k + 1))
    is_u = np.array([x == "u" for x in users])
    V, sigma, comps = [], 0.0, []
    pol = None
    for sign in (1.0, -1.0):
        pol = lasso_user_policy(k, multiplier)
        pol.decide(np.zeros((len(users), 2, 2)))
        X = np.where(is_u[:, None], 10.0 * sign, np.array([0.5, 0.0]))
        y = np.where(is_u, 10.0, 0.5)
        rounds = np.arange(1, len(users) + 1)
        if bound:
            UserLevel(pol, k, seed=seed).learn(X, y, rounds, user_ids=users)
        else:
            pol.learn(X, y, rounds)
        store = pol._stores[2]
        V.append(store.units_to_float(store.support_gram(np.arange(2))))
        sigma = pol.boundary_constants(2)["gram_sigma"]
        comps = [c for r in pol.refit() for c in r.accounting if c["mechanism"] == "gram_gauss"]
    assert pol is not None and len(comps) == 1
    rho_k = group_component(comps[0], k)["rho"]
    u0, u1 = u_vector(V[0]), u_vector(V[1])
    du = u1 - u0
    dist = float(np.linalg.norm(du))

    def sampler(which, m, rng):
        G = (V[which] + sym_gauss(3, sigma, rng, size=m)).reshape(m, 3, 3)
        return (u_vector(G) - u0) @ du / dist  # N(0, σ²) under D, N(dist, σ²) under D′

    claim_delta = gaussian_delta(1.0, 1.0, math.sqrt(2.0 * rho_k))
    name = (
        f"user-level private-lasso gram k={k} ε=1 δ={claim_delta:.3g} "
        f"(‖Δu‖/L̃² = {dist / pol.gram_l2sq:.4g}, noise ×{multiplier:g}, "
        f"{'bounded' if bound else 'unbounded'})"
    )
    return audit(sampler, 1.0, claim_delta, n, np.random.default_rng(seed), name=name)


def audit_user_niht(
    multiplier: float = 1.0,
    k: int = 2,
    bound: bool = True,
    s: int = 2,
    epsilon: float = 5.0,
    delta: float = 0.01,
    d: int = 20,
    n: int = 5_000,
    seed: int = 16,
) -> AuditResult:
    """One N-IHT fit (M = 1, θ⁰ = 0) of FLIPHAT at its group calibration for k, on the
    event-level worst-case pair (:func:`~streaming_dpbandit.experiments.audits.niht_pair`)
    with u's k + 1 events first: each is x = +10·x_max·1 in D and −10·x_max·1 in D′ (y = 10R),
    distinct other users send the n − k − 1 base rows; every row goes through :class:`UserLevel`
    and FLIPHAT's own clipping and accumulation, so u's k admitted rows move every coordinate
    of (2η/n)·h by exactly k·λ.

    Claim (docs/privacy/user-level.md §6): given the support, the s released values are a
    Laplace mechanism of scale ξ′ (the policy's, at (ε/k, δ′)) whose ℓ1 sensitivity for k rows
    is k·s·λ: pure (k·s·λ/ξ′)-DP, tight. ``bound=False`` learns every row (u's k + 1 rows move
    each coordinate by (k + 1)·λ: the mutant without bounding).
    """
    x_max, b_max, eta, n_rows = 1.0, 1.0, 0.1, 1024

    def policy(mult: float) -> FLIPHAT:
        params: dict[str, object] = dict(
            d=d,
            s=s,
            eta=eta,
            b_max=b_max,
            x_max=x_max,
            l1_radius=1e9,
            sigma_prior=0.1,
            seed=0,
            first_episode_len=n_rows,
            clip_contexts=True,
            noise_scale_multiplier=mult,  # grad_clip and accountant: the product's "auto"
        )
        return FLIPHAT(**group_params("fliphat", params, k, epsilon, delta))

    users = user_stream(k, 1, n_rows - (k + 1))
    is_u = np.array([x == "u" for x in users])
    accs, pol = [], policy(multiplier)
    R = pol.reward_clip_for(n_rows)
    X0, X1, y = niht_pair(d, s, n_rows, x_max, R)
    for X_odd in (X0[-1], X1[-1]):  # the changed row of the event-level pair is u's row here
        pol = policy(multiplier)
        X = np.where(is_u[:, None], X_odd, X0[0])
        pol.decide(np.zeros((n_rows, 2, d)))
        rounds = np.arange(1, n_rows + 1)
        if bound:
            UserLevel(pol, k, seed=seed).learn(X, y, rounds, user_ids=users)
        else:
            pol.learn(X, y, rounds)
        accs.append(pol._acc[0])
    est = pol._estimator()
    nominal = policy(1.0)._estimator().calibrate(n_rows, R, 1)[0]
    lam, xi = nominal["sensitivity"], nominal["scale"]
    m0, m1 = ((2 * eta / n_rows) * a.h for a in accs)
    rows_u = k if bound else k + 1
    shift = np.abs(m1 - m0)
    # u's admitted rows attain rows_u·λ up to the 2⁻¹⁶ grid of the clipped bounds, never more
    assert np.all(shift <= rows_u * lam * (1 + 1e-12)), shift
    assert np.all(shift >= rows_u * lam * (1 - 1e-4)), shift

    sampler = niht_values_sampler(est, accs, n_rows, R, m0, m1, xi)
    claim = k * s * lam / xi
    name = (
        f"user-level n-iht fit values k={k} s={s} ε={epsilon:g} δ={delta:g} "
        f"ε′={pol.epsilon:g} δ′={pol.delta:.3g} (noise ×{multiplier:g}, "
        f"{'bounded' if bound else 'unbounded'})"
    )
    return audit(sampler, claim, 0.0, n, np.random.default_rng(seed), name=name)
