"""Privacy audits of user-level local DP (``docs/privacy/user-level-ldp.md``; DESIGN §7).

The neighbouring pair differs in **every** report of one user u; u has k + ``extra`` events,
so the client-side bound itself is under test. The pipeline is the product's: the events go
through :class:`~streaming_dpbandit.policies.user_level.UserLevel` in front of an
:class:`~streaming_dpbandit.policies.ldp_glb.LDPGLB` configured by the user-level group
calibration (:func:`~streaming_dpbandit.policies.user_level.group_params`: the per-report ε′),
which decides which of u's events the (simulated) device sends — the admission mask, a function
of the stream's shape only (user-level.md, Lemma 1), so it is computed once — and each sent
report is built by the SDK's production path (:func:`~streaming_dpbandit.ldp.randomizers.
build_payloads`, inputs 10× beyond the public bounds). The score is the exact privacy-loss
statistic of the pair, summed over u's sent reports.

Mutants: ``multiplier=0.5`` halves every report's noise (the ℓ2 ball's far-hemisphere
probability; the Gaussian's stds); ``bound=False`` is a client that does not bound (all k + extra
reports are sent).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..ldp.gaussian import GaussianOLSMechanism
from ..ldp.randomizers import build_payloads, l2_mechanism, ols_mechanism
from ..policies.ldp_glb import LDPGLB
from ..policies.user_level import UserLevel, group_params
from ..privacy.audit import AuditResult, audit
from .ldp_audits import _client_inputs, _UnderNoisedBall
from .user_level_audits import user_stream

__all__ = ["audit_user_ldp_gaussian", "audit_user_ldp_l2_ball", "sent_reports"]


def sent_reports(policy: LDPGLB, k: int, extra: int, bound: bool = True, seed: int = 5) -> int:
    """How many of u's k + ``extra`` reports the simulated clients send (u's events first,
    then 4 other users), decided by :class:`UserLevel`'s client-side bound."""
    users = user_stream(k, extra, 4)
    if not bound:
        return k + extra
    ul = UserLevel(policy, k, seed=seed)
    mask = ul.admit(np.arange(1, len(users) + 1), user_ids=users)
    return int(mask[np.array([x == "u" for x in users])].sum())


def _policy(params: dict, k: int, epsilon: float, delta: float) -> LDPGLB:
    p = group_params("ldp-glb", params, k, epsilon, delta)
    return LDPGLB(**{**p, "delta": delta}, seed=0)


def audit_user_ldp_l2_ball(
    multiplier: float = 1.0,
    k: int = 3,
    extra: int = 2,
    epsilon: float = 1.0,
    bound: bool = True,
    d: int = 3,
    n: int = 60_000,
    seed: int = 31,
) -> AuditResult:
    """u's sent LDP-SGD reports at ε/k each; claim: pure ε for the user (tight).

    Pair: context 10·e₁ (→ e₁), θ̂ = 0, reward +10 vs −10 (→ ±1), R = 1: gradients ∓e₁, where
    each report's sign(z₁) is its exact privacy-loss statistic (±ε/k); the score is their sum.
    """
    params = {"d": d, "n_arms": 2, "variant": "sgd", "R": 1.0, "c_r": 1.0}
    pol = _policy(params, k, epsilon, 0.0)
    spec = pol.model_spec()
    m = sent_reports(pol, k, extra, bound)
    base = l2_mechanism(spec, "main")
    mechs = {("sgd", "main"): base if multiplier == 1.0 else _UnderNoisedBall(base, multiplier)}
    x = np.zeros(d)
    x[0] = 10.0

    def scores(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        X, r = _client_inputs(spec, np.tile(x, (y.size, 1)), y)
        Z = build_payloads(spec, "main", np.zeros(d), None, X, r, rng, mechs)
        out: np.ndarray = np.sign(Z[:, 0])
        return out

    name = f"user-level ldp l2-ball k={k} sent={m} ε={epsilon:g} per report ε/k"
    return _audit_sent(scores, m, epsilon, 0.0, n, seed, f"{name} (noise ×{multiplier:g})")


def audit_user_ldp_gaussian(
    multiplier: float = 1.0,
    k: int = 2,
    extra: int = 2,
    epsilon: float = 1.0,
    delta: float = 0.01,
    bound: bool = True,
    gaussian: str = "analytic",
    d: int = 3,
    n: int = 100_000,
    seed: int = 32,
) -> AuditResult:
    """u's sent LDP-OLS reports at τ′ = √k·τ(ε, δ) each; claim: (ε, δ) for the user.

    Pair: context 10·(e₁ + e₂)/√2 (→ unit), reward +10 vs −10: equal matrix blocks, vector
    blocks 2c_r·x apart (the whitened sensitivity 2/τ′ is attained). The privacy loss of the
    sent reports is the sum of their vector blocks' Gaussian loss statistics.
    """
    params = {"d": d, "n_arms": 2, "variant": "ols", "c_r": 1.0, "gaussian": gaussian}
    pol = _policy(params, k, epsilon, delta)
    spec = pol.model_spec()
    m = sent_reports(pol, k, extra, bound)
    base = ols_mechanism(spec, "main")
    mech = GaussianOLSMechanism(d, base.matrix_std * multiplier, base.vector_std * multiplier)
    mechs = {("ols", "main"): mech}
    x = np.zeros(d)
    x[:2] = 10.0 / math.sqrt(2.0)
    X1, _ = _client_inputs(spec, x[None, :], np.zeros(1))
    m0, m1 = spec.c_r * X1[0], -spec.c_r * X1[0]
    diff = (m0 - m1) / base.vector_std**2
    p = spec.p

    def scores(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        X, r = _client_inputs(spec, np.tile(x, (y.size, 1)), y)
        P = build_payloads(spec, "main", np.zeros(d), None, X, r, rng, mechs)
        out: np.ndarray = (P[:, p:] - (m0 + m1) / 2) @ diff
        return out

    name = f"user-level ldp gaussian {gaussian} k={k} sent={m} ε={epsilon:g} δ={delta:g}"
    return _audit_sent(scores, m, epsilon, delta, n, seed, f"{name} (noise ×{multiplier:g})")


def _audit_sent(
    scores: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    m: int,
    epsilon: float,
    delta: float,
    n: int,
    seed: int,
    name: str,
) -> AuditResult:
    """Audit u's m sent reports: ``scores(rewards, rng)`` runs the device's production path on
    one report per reward (+10 on D, −10 on D′) and returns each report's loss statistic; a
    run's score is the sum over its m reports."""

    def sampler(which: int, size: int, rng: np.random.Generator) -> np.ndarray:
        y = np.full(size * m, 10.0 if which == 0 else -10.0)
        out: np.ndarray = scores(y, rng).reshape(size, m).sum(axis=1)
        return out

    return audit(sampler, epsilon, delta, n, np.random.default_rng(seed), name=name)
