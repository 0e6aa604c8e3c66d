"""Regret of the private slate policies against the user bound k (issue 22 §2).

The DP-matroid synthetic instance (the frontier's ``slate`` setting: a linear matroid over 7
items, rank 3, Bernoulli rewards) served to returning users: each round is a visit of one of
``n_users`` users with Zipf popularity (exponent 1.1, as
:class:`~streaming_dpbandit.experiments.user_level.ReturningUsers`). Matroid rewards do not depend
on the user; the users only decide which rounds may be learned from. Each private policy is
configured so that **the whole run costs ε for the k slates of one user** (ε/k at the policy:
docs/privacy/user-level-slates.md) behind
:class:`~streaming_dpbandit.policies.user_level.UserLevel`; ``event`` is today's event-level run
at ε (no bounding). Synchronous protocol, a quiet stretch per decide/learn call as in
:func:`~streaming_dpbandit.experiments.matroid_runner.run_matroid_repetition` (with bounding,
fewer rows are learned, so a batch completes no earlier than the unbounded preview predicts).

Usage::

    from streaming_dpbandit.experiments.user_level_slates import run, table
    print(table(run(horizon=20_000, seeds=5, jobs=2)))
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp

import numpy as np

from ..envs import MatroidSyntheticEnv
from ..policies import REGISTRY
from ..policies.user_level import UserLevel, group_params
from .matroid_runner import _seed

__all__ = ["run", "table"]

KS = (1, 2, 5, 10, None)
LOOK = 256


def _one(args) -> dict:
    policy, ks, epsilon, horizon, n_users, rep, base_seed = args
    env = MatroidSyntheticEnv()
    opt = env.optimal_return()
    w = (np.arange(n_users) + 1.0) ** -1.1
    users = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "users"))).choice(
        n_users, size=horizon, p=w / w.sum()
    )
    W = env.draw(np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "env"))), horizon)
    out = {}
    for k in ks:
        key = f"{policy} {'event' if k is None else f'k={k}'}"
        pseed = int(_seed(base_seed, rep, "policy", key).generate_state(1, np.uint32)[0])
        eps = group_params(policy, {}, k, epsilon, 0.0)["epsilon"]
        inner = REGISTRY[policy](env.matroid, epsilon=eps, update_every=horizon, seed=pseed)
        pol = inner if k is None else UserLevel(inner, k, seed=pseed ^ 0x5EED)
        regret, t = 0.0, 0
        while t < horizon:
            if inner.refit_due():
                pol.refit()
            look = min(LOOK, horizon - t)
            q = inner.quiet_rounds(inner.preview_slates(look).slates)
            dec = inner.decide_slates(q)
            rows = np.arange(t, t + q)
            rewards = W[rows[:, None], dec.slates]
            if k is None:
                inner.learn(dec.slates, rewards, dec.rounds)
            else:
                pol.learn(dec.slates, rewards, dec.rounds, user_ids=users[rows])
            regret += float(q * opt - env.means[dec.slates].sum())
            t += q
        c = pol.user_counters() if k is not None else {"admitted": horizon}
        out[key] = {"regret": regret, "admitted": c["admitted"] / horizon}
    return out


def run(
    policies=("dpucb-mat", "dpts-mat"),
    ks=KS,
    epsilon: float = 1.0,
    horizon: int = 20_000,
    n_users: int = 2000,
    seeds: int = 5,
    base_seed: int = 0,
    jobs: int = 2,
) -> list[dict]:
    """Final pseudo-regret per (policy, k): mean, standard error, per-repetition values."""
    tasks = [
        (p, ks, epsilon, horizon, n_users, r, base_seed) for p in policies for r in range(seeds)
    ]
    if jobs > 1:
        with cf.ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            parts = list(ex.map(_one, tasks))
    else:
        parts = [_one(t) for t in tasks]
    rows = []
    for p in policies:
        for k in ks:
            key = f"{p} {'event' if k is None else f'k={k}'}"
            vals = [part[key] for part in parts if key in part]
            reg = np.array([v["regret"] for v in vals])
            rows.append(
                {
                    "policy": p,
                    "k": k,
                    "epsilon": epsilon,
                    "horizon": horizon,
                    "n_users": n_users,
                    "regret_mean": float(reg.mean()),
                    "regret_se": float(reg.std(ddof=1) / np.sqrt(reg.size))
                    if reg.size > 1
                    else None,
                    "regret": reg.tolist(),
                    "admitted": float(np.mean([v["admitted"] for v in vals])),
                }
            )
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: one row per policy, one column per k (mean ± se), then the admitted share."""
    ks = list(dict.fromkeys(r["k"] for r in rows))
    head = ["policy", *("event level" if k is None else f"k = {k}" for k in ks)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in dict.fromkeys(r["policy"] for r in rows):
        mine = {r["k"]: r for r in rows if r["policy"] == p}
        cells = [f"{mine[k]['regret_mean']:,.0f} ± {mine[k]['regret_se'] or 0:,.0f}" for k in ks]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
        lines.append("| admitted | " + " | ".join(f"{mine[k]['admitted']:.0%}" for k in ks) + " |")
    return "\n".join(lines)
