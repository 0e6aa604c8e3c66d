"""BLT against the binary tree as DP-LinUCB's default (issue 20, item 2): regret and noise.

For each configuration, DP-LinUCB (certified Gaussian) with ``tree_impl="binary"`` (the old
default) and ``tree_impl="blt"`` runs on the same streams (common random numbers:
``experiments.runner.simulate``, base seed 0; each run draws its own DP noise), ≥ 20
repetitions. Prints one JSON document: per configuration and ε, the final regret (mean, s.e.),
the paired difference BLT − tree (mean, s.e.) and the per-release noise standard deviation of
one Gram entry from the calibration (``entry_std``; its square is the noise variance).

Configurations: the frontier's (unit-action environment d = 5, K = 25 and d = 20, K = 20;
batches of 256, n_cap = horizon) and the service's defaults (batch_size = 1,
n_cap = 2²⁰, a shorter horizon since every round is a release).

Usage: python bench/bench_blt_default.py [--seeds 20] [--horizon 100000] [--jobs 2] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import math
import time

from streaming_dpbandit.envs import ShariffSheffetEnv
from streaming_dpbandit.experiments.runner import RunSpec, simulate
from streaming_dpbandit.privacy.gram_calibration import calibrate_gram_release

DELTA = 1e-6
IMPLS = ("binary", "blt")


def _specs(d: int, horizon: int, n_cap: int, batch: int, epsilons) -> list[RunSpec]:
    specs = []
    for eps in epsilons:
        for impl in IMPLS:
            params = {
                "d": d,
                "epsilon": float(eps),
                "delta": DELTA,
                "n_cap": n_cap,
                "batch_size": batch,
                "tree_impl": impl,
                "release_records": False,
            }
            specs.append(
                RunSpec(f"{impl} ε={eps:g}", "dp-linucb", params, horizon, eps, DELTA, "private")
            )
    return specs


def _mean_se(v) -> tuple[float, float]:
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def run_config(name, env, horizon, n_cap, batch, epsilons, seeds, jobs) -> dict:
    specs = _specs(env.d, horizon, n_cap, batch, epsilons)
    start = time.perf_counter()
    res = simulate(env, specs, seeds, base_seed=0, jobs=jobs)
    wall = time.perf_counter() - start
    steps = 1 - (-n_cap // batch)  # the policy's release horizon for the factorisations
    rows = []
    for eps in epsilons:
        tree, blt = res.finals[f"binary ε={eps:g}"], res.finals[f"blt ε={eps:g}"]
        std = {
            impl: calibrate_gram_release(
                env.d,
                float(eps),
                DELTA,
                n_cap,
                tree_impl=impl,
                n_steps=None if impl == "binary" else steps,
            ).entry_std
            for impl in IMPLS
        }
        rows.append(
            {
                "epsilon": eps,
                "regret_tree": _mean_se(tree),
                "regret_blt": _mean_se(blt),
                "paired_blt_minus_tree": _mean_se(blt - tree),
                "entry_std_tree": std["binary"],
                "entry_std_blt": std["blt"],
                "variance_ratio_blt_over_tree": (std["blt"] / std["binary"]) ** 2,
            }
        )
    return {
        "config": name,
        "env": res.env,
        "horizon": horizon,
        "n_cap": n_cap,
        "batch_size": batch,
        "seeds": seeds,
        "wall_s": round(wall, 1),
        "rows": rows,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--horizon", type=int, default=100_000)
    p.add_argument("--service-horizon", type=int, default=20_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon, a.service_horizon = 3, 5_000, 2_000
    eps = (1.0, 5.0)
    out = [
        run_config(
            "frontier d=5", ShariffSheffetEnv(d=5), a.horizon, a.horizon, 256, eps, a.seeds, a.jobs
        ),
        run_config(
            "frontier d=20",
            ShariffSheffetEnv(d=20, K=20),
            a.horizon,
            a.horizon,
            256,
            eps,
            a.seeds,
            a.jobs,
        ),
        run_config(
            "service defaults d=5",
            ShariffSheffetEnv(d=5),
            a.service_horizon,
            1 << 20,
            1,
            (1.0,),
            a.seeds,
            a.jobs,
        ),
    ]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
