"""DP-matroid benchmarks (issue 6). Prints one JSON document.

* ``decide``: slate decisions per second of DPUCB-MAT and DPTS-MAT for L = 100, 1,000 and
  10,000 items, K = 10, on a uniform matroid (any 10 of L) and a partition matroid (10
  categories of L/10 items, one item each), in steady state (every item played, so no
  never-played +∞ keys), deciding a batch of B rounds per call as the service does. The
  baseline is a bare numpy top-K selection (``np.argpartition(keys, L − K)``) over the *same*
  index vectors, timed in the same process, interleaved with the policy; ``ratio`` = policy
  time / baseline time per decision, each the minimum over 9 interleaved repeats (the machine
  is shared; the minimum is the least disturbed); target: within 3×. ``ratio_to_fastest_bare_
  topk`` divides by the faster of that and ``argpartition`` with kth = (L−K−1, L−K), which
  numpy runs faster for L ≤ 150 (the uniform matroid's fast path uses it there). The bare
  selections cycle through 16 fresh key matrices of the policy (a repeated matrix trains the
  branch predictor and flatters them). ``keys_only`` is the index
  computation alone (for DPTS-MAT it includes drawing L Gaussians per decision), so ``ratio``
  splits into "compute the indices" and "select the slate".
* ``single``: one decision per call (B = 1; the synchronous simulation's path).
* ``memory``: bytes per item of the policy's per-item arrays (state and derived index arrays)
  and of the matroid description.
* ``learn``: cost per finalized slate of the intake (learn + refit with releases) at L = 1,000.

Usage: python bench/bench_matroid.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from streaming_dpbandit.policies import DPTSMAT, DPUCBMAT

K = 10


def matroid(kind: str, L: int) -> dict:
    if kind == "uniform":
        return {"type": "uniform", "n_items": L, "k": K}
    return {"type": "partition", "categories": [i % K for i in range(L)], "capacities": [1] * K}


def steady_policy(cls, kind: str, L: int, seed: int = 0):
    """A policy whose every item has a released batch (T ≥ 1), as after a warm-up."""
    pol = cls(matroid(kind, L), epsilon=1.0, update_every=1 << 40, seed=seed)
    pol._state()
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 12, L)
    pol._est.s[:] = s
    pol._est.T[:] = 1 << s
    pol._est.mean[:] = rng.random(L)
    pol._refresh()
    pol._t = 10_000
    return pol


def _time(fn, reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def bench_decide(L: int, kind: str, cls, B: int, rounds: int) -> dict:
    pol = steady_policy(cls, kind, L)
    # the same kind of index vectors, fresh for every call as the policy's are: selecting from
    # one repeated matrix lets the CPU's branch predictor learn it (argpartition with two kth
    # values then runs 2× faster on DPTS-MAT's keys than on fresh ones)
    pool = [pol._keys(np.arange(pol.t + 1 + i * B, pol.t + 1 + (i + 1) * B)) for i in range(16)]
    turn = [0]

    def keys_next():
        turn[0] += 1
        return pool[turn[0] % len(pool)]

    def ours():
        pol.decide_slates(B)

    ahead = [pol.t]

    def keys_only():  # advancing rounds, as deciding does (Thompson draws come per round)
        pol._keys(np.arange(ahead[0] + 1, ahead[0] + B + 1))
        ahead[0] += B

    def bare():
        np.argpartition(keys_next(), L - K, axis=1)[:, L - K :]

    def bare2():  # the same top-K with kth = (L−K−1, L−K): faster for L ≤ 150 here
        np.argpartition(keys_next(), (L - K - 1, L - K), axis=1)[:, L - K :]

    reps = max(1, rounds // B)
    ours(), bare(), bare2(), keys_only()  # warm caches
    t_ours, t_bare, t_bare2, t_keys = [], [], [], []
    for _ in range(9):  # interleaved; the minimum is the least disturbed by other load
        t_ours.append(_time(ours, reps) / B)
        t_bare.append(_time(bare, reps) / B)
        t_bare2.append(_time(bare2, reps) / B)
        t_keys.append(_time(keys_only, reps) / B)
    o, b, b2, k = (min(x) for x in (t_ours, t_bare, t_bare2, t_keys))
    return {
        "policy": cls.name,
        "matroid": kind,
        "L": L,
        "K": K,
        "batch": B,
        "decisions_per_s": 1.0 / o,
        "bare_topk_per_s": 1.0 / b,
        "ratio": o / b,
        "keys_only_ratio": k / b,
        "ratio_to_fastest_bare_topk": o / min(b, b2),
        "us_per_decision": o * 1e6,
        "us_bare_topk": b * 1e6,
        "us_bare_topk_two_kth": b2 * 1e6,
    }


def bench_single(L: int, kind: str, cls, n: int) -> dict:
    pol = steady_policy(cls, kind, L)
    t = _time(lambda: pol.decide_slates(1), n)
    return {"policy": cls.name, "matroid": kind, "L": L, "us_per_decision": t * 1e6}


def memory(L: int) -> dict:
    out = {}
    for kind in ("uniform", "partition"):
        pol = steady_policy(DPTSMAT, kind, L)
        est = pol._est
        state = sum(a.nbytes for a in (est.s, est.T, est.mean, est.buf, est.cnt))
        derived = sum(a.nbytes for a in (pol._base, pol._a, pol._b))
        m = pol.structure
        desc = m.categories.nbytes if kind == "partition" else 0
        out[kind] = {
            "state_numbers_per_item": 5,
            "state_bytes_per_item": state / L,
            "derived_index_bytes_per_item": derived / L,
            "matroid_bytes_per_item": desc / L,
            "total_bytes_per_item": (state + derived + desc) / L,
        }
    return out


def bench_learn(L: int, n: int) -> dict:
    pol = DPTSMAT(matroid("uniform", L), epsilon=1.0, update_every=1, seed=0)
    rng = np.random.default_rng(0)
    t_learn = t_refit = 0.0
    for _ in range(n):
        if pol.refit_due():
            a = time.perf_counter()
            pol.refit()
            t_refit += time.perf_counter() - a
        dec = pol.decide_slates(1)
        a = time.perf_counter()
        pol.learn(dec.slates, rng.random((1, K)), dec.rounds)
        t_learn += time.perf_counter() - a
    return {
        "L": L,
        "rounds": n,
        "us_learn_per_slate": t_learn / n * 1e6,
        "us_refit_per_round": t_refit / n * 1e6,
        "releases": int(pol._est.releases),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds per measurement")
    args = p.parse_args(argv)
    rounds = 20_000 if args.quick else 200_000
    results = {"python": platform.python_version(), "numpy": np.__version__, "decide": []}
    for L in (100, 1_000, 10_000):
        B = 256 if L <= 1000 else 64
        for kind in ("uniform", "partition"):
            for cls in (DPUCBMAT, DPTSMAT):
                results["decide"].append(
                    bench_decide(L, kind, cls, B, rounds if L < 10_000 else rounds // 4)
                )
    results["single"] = [
        bench_single(L, "uniform", cls, 200 if args.quick else 2000)
        for L in (100, 1_000, 10_000)
        for cls in (DPUCBMAT, DPTSMAT)
    ]
    results["memory"] = {str(L): memory(L) for L in (100, 10_000)}
    results["learn"] = bench_learn(1_000, 2_000 if args.quick else 20_000)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
