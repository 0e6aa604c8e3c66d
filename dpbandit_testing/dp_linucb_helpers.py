"""A small DP-LinUCB and a fixed stream to run it on (the DP-LinUCB and BLT tests share them).

>>> pol, records = make(), []
>>> run(pol, fixed_stream(64), 64, records)
>>> pol.t
64
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streaming_dpbandit.envs import ShariffSheffetEnv
from streaming_dpbandit.policies.dp_linucb import DPLinUCB
from streaming_dpbandit.privacy.ledger import ReleaseRecord

ENV = ShariffSheffetEnv(d=4, gap=0.1)


def make(**kw: Any) -> DPLinUCB:
    """DP-LinUCB at d = 4 on the binary tree unless ``tree_impl`` says otherwise (BLT is
    tested in tests/privacy/test_blt.py), on the fast noise backend unless ``noise_backend``
    says otherwise: these tests are about the mechanism's calibration, ledger and state (the
    secure backend's are tests/privacy/test_secure_gram_tree.py)."""
    params: dict[str, Any] = dict(
        d=4,
        epsilon=1.0,
        delta=0.1,
        n_cap=1 << 14,
        batch_size=32,
        seed=11,
        tree_impl="binary",
        noise_backend="fast",
    )
    params.update(kw)
    return DPLinUCB(**params)


def fixed_stream(n: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """n rounds of contexts, mean rewards and reward coins of :data:`ENV`."""
    rng = np.random.default_rng(seed)
    X = ENV.contexts(rng, n)
    return X, ENV.mean_rewards(X), ENV.reward_noise(rng, n)


def run(
    pol: DPLinUCB, stream: tuple[Any, Any, Any], until: int, records: list[ReleaseRecord]
) -> None:
    """Decide and learn up to round ``until``, refitting when due; releases go to ``records``."""
    X, mu, coins = stream
    while pol.t < until:
        if pol.refit_due():
            records.extend(pol.refit())
        t0 = pol.t
        n = min(pol.max_decide_batch(), until - t0)
        dec = pol.decide(X[t0 : t0 + n], event_ids=np.arange(t0 + 1, t0 + n + 1))
        rows = np.arange(t0, t0 + n)
        a = dec.arms
        y = ENV.rewards(mu[rows, a], coins[rows, a])
        pol.learn(X[rows, a], y, dec.rounds, ids=dec.rounds)
