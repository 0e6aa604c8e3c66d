"""Privacy audits of user-level contribution bounding (``docs/privacy/user-level.md``).

The neighbouring pair differs in **every** event of one user u — more events than the bound k,
so the bounding itself is under test — and the mechanism is calibrated by the derivation
(sensitivity k·Δ). Each audit takes ``multiplier`` (noise × multiplier; 0.5 = the halved-noise
mutant) and the Laplace one also ``bound=False`` (the mutant without contribution bounding).

* :func:`audit_user_laplace` — a Laplace-noised sum of the admitted rewards of one window
  (pure ε: group privacy kε, tight: u's k admitted rows move the sum by exactly k·Δ);
* :func:`audit_user_tree` — DP-LinUCB's Gaussian tree driven through
  :class:`~streaming_dpbandit.policies.user_level.UserLevel`, every node release of the epoch,
  at the ε′ that :func:`~streaming_dpbandit.privacy.user_level.calibrate_for_group` derives.
"""

from __future__ import annotations

import numpy as np

from ..policies.dp_linucb import DPLinUCB
from ..policies.user_level import UserLevel
from ..privacy.audit import AuditResult, audit
from ..privacy.laplace import LaplaceMechanism
from ..privacy.user_bound import UserContributionBound
from ..privacy.user_level import calibrate_for_group, group_component
from .audits import _rescaled_weights, gram_pair, node_loss_sampler

__all__ = ["audit_user_laplace", "audit_user_tree", "user_stream"]


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

    return audit(
        sampler,
        epsilon,
        0.0,
        n,
        np.random.default_rng(seed),
        name=f"user-level laplace sum k={k} ε={epsilon:g} (noise ×{multiplier:g}, "
        f"{'bounded' if bound else 'unbounded'})",
    )


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
        return DPLinUCB(d=d, epsilon=e, delta=delta, n_cap=n_cap, tree_impl="binary").explain()[
            "constants"
        ]["accounting"]

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
    return audit(
        node_loss_sampler(sampler, m0, m1, _rescaled_weights(d + 1)),
        epsilon,
        delta,
        n,
        np.random.default_rng(seed),
        name=f"user-level dp-linucb tree k={k} ε={epsilon:g} δ={delta:g} ε′={eps_inner:.4g} "
        f"(noise ×{multiplier:g})",
    )
