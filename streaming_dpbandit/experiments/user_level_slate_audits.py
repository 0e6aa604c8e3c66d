"""Privacy audit of user-level bounding for the slate policies (docs/privacy/user-level-slates.md).

The neighbouring pair differs in **every** event of one user u, and u has more events than the
bound k, so the bounding itself is under test. A uniform matroid with L = K = 3 serves every
item every round; u's k + 2 slates are rounds 8–12, all inside batch 3 (rounds 8–15, size 8) of
every item — the case the derivation singles out: a user's k events hit **the same** batch
mean k times. Every other round belongs to a distinct other user. The rows go through
:class:`~streaming_dpbandit.policies.user_level.UserLevel` (keyed-hash admission, k per user;
the slates' K per-item rewards kept as rows) into DPUCB-MAT configured at the group calibration
ε/k (:func:`~streaming_dpbandit.policies.user_level.group_params`); u's rewards are +10 in D
and −10 in D′ (beyond the bounds: the policy's intake clips them to 1 and 0).

Claim: one batch mean (item 0, batch 3) is pure (k·ε0)-DP for the user (ε0 = ε/(2Kk), the
Laplace mechanism's group privacy; tight, since u's k admitted rewards move the sum by exactly
k). Mutants: noise ×½ (loss 2kε0) and bounding off (all k + 2 rewards enter: loss (k + 2)ε0).
The score is the exact privacy-loss statistic of the pair, as in
:mod:`~streaming_dpbandit.experiments.dp_matroid_audits`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

from ..estimators.batch_means import UNIT
from ..policies.dpucb_mat import DPUCBMAT
from ..policies.user_level import UserLevel, group_params
from ..privacy.audit import AuditResult, audit
from ..privacy.user_level import group_component
from .dp_matroid_audits import _llr

if TYPE_CHECKING:
    from ..policies.base import Policy

__all__ = ["audit_user_slate_release", "user_slate_pair"]

K = 3
BATCH = 3  # size 8, from round 8 on (each item is served every round)
ROUNDS = 17  # batch 3 still fills (8 rows) when u's 2 extra slates are bounded out
FIRST = 8  # u's first round


def user_slate_pair(
    k: int = 3, epsilon: float = 1.0, multiplier: float = 1.0, bound: bool = True, seed: int = 31
) -> tuple[np.ndarray, np.ndarray, DPUCBMAT]:
    """Sealed exact batch-3 sums of the K items under D and D′, rows through ``UserLevel``."""
    users = [f"v{t}" for t in range(1, ROUNDS + 1)]
    users[FIRST - 1 : FIRST - 1 + k + 2] = ["u"] * (k + 2)
    is_u = np.array([x == "u" for x in users])
    eps_inner = group_params("dpucb-mat", {}, k, epsilon, 0.0)["epsilon"]
    sums: list[np.ndarray] = []
    pol = None
    for which in (0, 1):
        pol = DPUCBMAT(
            {"type": "uniform", "n_items": K, "k": K},
            epsilon=eps_inner,
            update_every=ROUNDS,
            seed=0,
            noise_scale_multiplier=multiplier,
        )
        dec = pol.decide_slates(ROUNDS)
        rewards = np.full((ROUNDS, K), 0.5)
        rewards[is_u] = 10.0 if which == 0 else -10.0
        if bound:
            # (UserLevel is typed for single-arm policies; it forwards slates' rows unchanged)
            UserLevel(cast("Policy", pol), k, seed=seed).learn(
                dec.slates, rewards, dec.rounds, user_ids=users
            )
        else:  # the mutant: every event of u enters
            pol.learn(dec.slates, rewards, dec.rounds)
        sealed = {(e, s): total for e, s, _size, total, _t in pol._est._sealed}
        sums.append(np.array([sealed[(e, BATCH)] / UNIT for e in range(K)]))
    assert pol is not None
    return sums[0], sums[1], pol


def audit_user_slate_release(
    multiplier: float = 1.0,
    k: int = 3,
    epsilon: float = 1.0,
    bound: bool = True,
    n: int = 200_000,
    seed: int = 23,
) -> AuditResult:
    """One batch mean (item 0, batch 3) against the user-level release claim k·ε0."""
    s0, s1, pol = user_slate_pair(k, epsilon, multiplier, bound)
    scale = pol._est.laplace_scale
    nominal = 1.0 / pol.epsilon0
    # the release's event-level accounting (sensitivity 1, scale 1/ε0), grouped by k
    comp = group_component({"type": "laplace", "sensitivity": 1.0, "scale": nominal}, k)
    claim = comp["sensitivity"] / comp["scale"]

    def sampler(which, m, rng):
        base = s0[0] if which == 0 else s1[0]
        noisy = rng.laplace(np.full((m, 1), base), scale, size=(m, 1))
        return _llr(noisy, s0[:1], s1[:1], nominal)

    name = (
        f"user-level dp-matroid batch mean k={k} ε={epsilon:g} (claim k·ε0 = {claim:.4g}, "
        f"noise ×{multiplier:g}, {'bounded' if bound else 'unbounded'})"
    )
    return audit(sampler, claim, 0.0, n, np.random.default_rng(seed), name=name)
