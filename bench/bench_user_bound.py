"""Cost of user-level contribution bounding per learned event (issue 22 §2). Prints JSON.

Per event (Zipf-distributed users, batches of 256 rows as the service learns them): the keyed
user-id hash, the admission, and — for scale — FLIPHAT's own ``learn`` (d = 100) with and
without the ``UserLevel`` wrapper in front, alternated ``--repeats`` times (medians).

Usage: python bench/bench_user_bound.py [--events N] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from streaming_dpbandit.policies import REGISTRY
from streaming_dpbandit.policies.user_level import UserLevel
from streaming_dpbandit.privacy.user_bound import UserContributionBound


def _users(n: int, n_users: int = 100_000, a: float = 1.1) -> np.ndarray:
    w = (np.arange(n_users) + 1.0) ** -a
    rng = np.random.default_rng(0)
    return rng.choice(n_users, size=n, p=w / w.sum()).astype(str)


def _bounder_run(users, E):
    ub = UserContributionBound(5, E, seed=1)
    t0 = time.perf_counter()
    h = np.concatenate([ub.hash_users(users[i : i + 256]) for i in range(0, users.size, 256)])
    t1 = time.perf_counter()
    win = np.arange(users.size) // 16_384
    for i in range(0, users.size, 256):
        ub.close_below(int(win[i]))
        ub.admit(h[i : i + 256], win[i : i + 256])
    t2 = time.perf_counter()
    return (t1 - t0) / users.size, (t2 - t1) / users.size


def _learn_run(users, wrapped: bool, d: int = 100):
    rng = np.random.default_rng(1)
    pol = REGISTRY["fliphat"](d=d, s=10, epsilon=1.0, delta=1e-6, seed=0, first_episode_len=1024)
    if wrapped:
        pol = UserLevel(pol, 5, seed=2)
    n = users.size
    X = rng.normal(size=(n, d))
    y = rng.normal(size=n)
    t, spent = 0, 0.0
    while t < n:
        if pol.refit_due():
            pol.refit()
        m = min(pol.max_decide_batch(), n - t, 256)
        dec = pol.decide(np.zeros((m, 2, d)))
        t0 = time.perf_counter()
        if wrapped:
            pol.learn(X[t : t + m], y[t : t + m], dec.rounds, user_ids=users[t : t + m])
        else:
            pol.learn(X[t : t + m], y[t : t + m], dec.rounds)
        spent += time.perf_counter() - t0
        t += m
    return spent / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    users = _users(args.events)
    res = {"hash": [], "admit": [], "admit_E": [], "learn": [], "learn_user_level": []}
    for _ in range(args.repeats):
        h, a = _bounder_run(users, None)
        res["hash"].append(h)
        res["admit"].append(a)
        res["admit_E"].append(_bounder_run(users, 10)[1])
        res["learn"].append(_learn_run(users, False))
        res["learn_user_level"].append(_learn_run(users, True))
    out = {
        "events": args.events,
        "repeats": args.repeats,
        "median_us_per_event": {k: 1e6 * statistics.median(v) for k, v in res.items()},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
