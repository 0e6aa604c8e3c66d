"""Slate policies on a matroid environment, event level or behind a user bound (issue 22 §2).

The DP-matroid synthetic instance (the frontier's ``slate`` setting: a linear matroid over 7
items, rank 3, Bernoulli rewards) — or any ``envs.MATROID_REGISTRY`` environment — served to
returning users: each round is a visit of one of ``n_users`` users with Zipf popularity
(exponent 1.1, as :class:`~streaming_dpbandit.experiments.user_level.ReturningUsers`). Matroid
rewards do not depend on the user; the users only decide which rounds may be learned from. A
user-level run configures the policy so that **the whole run costs ε for the k slates of one
user** (ε/k at the policy: docs/privacy/user-level-slates.md) behind
:class:`~streaming_dpbandit.policies.user_level.UserLevel`; ``k = None`` is today's event-level
run at ε (no bounding). Synchronous protocol, a quiet stretch per decide/learn call as in
:func:`~streaming_dpbandit.experiments.matroid_runner.run_matroid_repetition` (with bounding,
fewer rows are learned, so a batch completes no earlier than the unbounded preview predicts).
``dpbandit simulate --env dp-matroid-synthetic --policy dpucb-mat,dpts-mat`` runs this.

Usage::

    from streaming_dpbandit.experiments.user_level_slates import run, table
    print(table(run(horizon=20_000, seeds=5, jobs=2)))
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import multiprocessing as mp
from typing import Any

import numpy as np

from ..envs import MATROID_REGISTRY
from ..policies import REGISTRY
from ..policies.user_level import UserLevel, group_params
from ..privacy.ledger import ReleaseRecord
from ..privacy.user_level import user_level_of_records
from .matroid_runner import _seed
from .runner import REPRODUCTION_NOISE_BACKEND
from .user_level import zipf_popularity

__all__ = ["SlateRun", "run", "run_slates", "table"]

KS = (1, 2, 5, 10, None)
LOOK = 256


@dataclasses.dataclass
class SlateRun:
    """One configuration: ``policy`` (dpucb-mat, dpts-mat) at ``epsilon`` (one release for the
    k slates of one user when ``k`` is set, else per event), other constructor ``params``."""

    key: str
    policy: str
    epsilon: float
    k: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)


def _one(args) -> dict:
    env_name, runs, horizon, n_users, rep, base_seed = args
    env = MATROID_REGISTRY[env_name]()
    opt = env.optimal_return()
    users = np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "users"))).choice(
        n_users, size=horizon, p=zipf_popularity(n_users, 1.1)
    )
    W = env.draw(np.random.Generator(np.random.PCG64(_seed(base_seed, rep, "env"))), horizon)
    out = {}
    for r in runs:
        pseed = int(_seed(base_seed, rep, "policy", r.key).generate_state(1, np.uint32)[0])
        eps = group_params(r.policy, {}, r.k, r.epsilon, 0.0)["epsilon"]
        params = {**r.params, "epsilon": eps, "update_every": horizon}
        inner = REGISTRY[r.policy](env.matroid, **params, seed=pseed)
        pol = inner if r.k is None else UserLevel(inner, r.k, seed=pseed ^ 0x5EED)
        regret, t = 0.0, 0
        records: list[ReleaseRecord] = []
        while t < horizon:
            if inner.refit_due():
                records += pol.refit()
            look = min(LOOK, horizon - t)
            q = inner.quiet_rounds(inner.preview_slates(look).slates)
            dec = inner.decide_slates(q)
            rows = np.arange(t, t + q)
            rewards = W[rows[:, None], dec.slates]
            if r.k is None:
                inner.learn(dec.slates, rewards, dec.rounds)
            else:
                pol.learn(dec.slates, rewards, dec.rounds, user_ids=users[rows])
            regret += float(q * opt - env.means[dec.slates].sum())
            t += q
        if inner.refit_due():
            records += pol.refit()
        admitted = pol.user_counters()["admitted"] if r.k is not None else horizon
        ul = user_level_of_records(records, "default") if r.k is not None else None
        out[r.key] = {
            "regret": regret,
            "admitted": admitted / horizon,
            "statement": None if ul is None else ul.statement(),
            "of_record": None if ul is None else ul.of_record(),
        }
    return out


def run_slates(
    env_name: str,
    runs: list[SlateRun],
    horizon: int,
    n_users: int = 2000,
    seeds: int = 5,
    base_seed: int = 0,
    jobs: int = 2,
) -> list[dict]:
    """Final pseudo-regret per run: mean, standard error, per-repetition values, the share of
    rounds learned from, and (user level) the whole-run statement per user of repetition 0."""
    tasks = [(env_name, runs, horizon, n_users, rep, base_seed) for rep in range(seeds)]
    if jobs > 1 and seeds > 1:
        with cf.ProcessPoolExecutor(min(jobs, seeds), mp_context=mp.get_context("spawn")) as ex:
            parts = list(ex.map(_one, tasks))
    else:
        parts = [_one(t) for t in tasks]
    rows = []
    for r in runs:
        vals = [part[r.key] for part in parts]
        reg = np.array([v["regret"] for v in vals])
        rows.append(
            {
                "key": r.key,
                "policy": r.policy,
                "epsilon": r.epsilon,
                "k": r.k,
                "horizon": horizon,
                "n_users": n_users,
                "regret_mean": float(reg.mean()),
                "regret_se": float(reg.std(ddof=1) / np.sqrt(reg.size)) if reg.size > 1 else None,
                "regret": reg.tolist(),
                "admitted": float(np.mean([v["admitted"] for v in vals])),
                "user_level": vals[0]["statement"],
                "of_record": vals[0]["of_record"],
            }
        )
    return rows


def run(
    policies=("dpucb-mat", "dpts-mat"),
    ks=KS,
    epsilon: float = 1.0,
    horizon: int = 20_000,
    n_users: int = 2000,
    seeds: int = 5,
    base_seed: int = 0,
    jobs: int = 2,
    env_name: str = "dp-matroid-synthetic",
) -> list[dict]:
    """Every policy at every k of ``ks`` (None: event level) on ``env_name``."""
    runs = [
        SlateRun(
            f"{p} {'event' if k is None else f'k={k}'}",
            p,
            epsilon,
            k,
            {"noise_backend": REPRODUCTION_NOISE_BACKEND},  # the study's figures, labelled
        )
        for p in policies
        for k in ks
    ]
    return run_slates(env_name, runs, horizon, n_users, seeds, base_seed, jobs)


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
