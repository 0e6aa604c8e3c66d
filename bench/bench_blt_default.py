"""BLT against the binary tree as DP-LinUCB's default (issue 20, item 2): regret and noise.

For each configuration, DP-LinUCB (certified Gaussian) with ``tree_impl="binary"`` (the old
default) and ``tree_impl="blt"`` runs on the same streams (common random numbers:
``experiments.runner.simulate``, base seed 0; each run draws its own DP noise), ≥ 20
repetitions. Prints one JSON line per configuration as it finishes: per ε, the final regret
(mean, s.e.), the paired difference BLT − tree (mean, s.e.) and the per-release noise standard
deviation of one Gram entry from the calibration (``entry_std``; its square is the variance).

Configurations: the frontier's (unit-action environment d = 5, K = 25 and d = 20, K = 20;
batches of 256, n_cap = horizon) and the service's defaults (batch_size = 1,
n_cap = 2²⁰, a shorter horizon since every round is a release).

Usage: python bench/bench_blt_default.py [--seeds 20] [--horizon 100000] [--service-horizon 3000]
[--configs d5,d20,service] [--jobs 2] [--quick]

Spec: docs/specs/dp_linucb_tree.md.
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
#: key -> (tree_impl, calibration): BLT against the tree under the certified calibration (the
#: old default) and the tree's other Gaussian calibrations (spec §11: the paper-calibrated and
#: the zCDP tree)
VARIANTS = {
    "blt": ("blt", "certified"),
    "tree": ("binary", "certified"),
    "tree-paper": ("binary", "paper"),
    "tree-zcdp": ("binary", "zcdp"),
}
#: the spec §9 ratios of ``track_bounds`` (worst over repetitions: min for the first)
RATIOS = (
    ("sim_min_lambda_min_over_rho_min", min),
    ("sim_max_lambda_max_over_rho_max", max),
    ("sim_max_h_norm_over_gamma", max),
    ("sim_non_pd_H", max),
)


def _specs(d: int, horizon: int, n_cap: int, batch: int, epsilons) -> list[RunSpec]:
    specs = []
    for eps in epsilons:
        for name, (impl, cal) in VARIANTS.items():
            params = {
                "d": d,
                "epsilon": float(eps),
                "delta": DELTA,
                "n_cap": n_cap,
                "batch_size": batch,
                "tree_impl": impl,
                "calibration": cal,
                "track_bounds": True,
                "release_records": False,
            }
            specs.append(
                RunSpec(f"{name} ε={eps:g}", "dp-linucb", params, horizon, eps, DELTA, "private")
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
        blt = res.finals[f"blt ε={eps:g}"]
        row = {"epsilon": eps}
        for vname, (impl, cal) in VARIANTS.items():
            key = f"{vname} ε={eps:g}"
            row[f"regret_{vname}"] = _mean_se(res.finals[key])
            if vname != "blt":
                row[f"paired_blt_minus_{vname}"] = _mean_se(blt - res.finals[key])
            row[f"entry_std_{vname}"] = calibrate_gram_release(
                env.d,
                float(eps),
                DELTA,
                n_cap,
                calibration=cal,
                tree_impl=impl,
                n_steps=None if impl == "binary" else steps,
            ).entry_std
            reps = res.counters_by_rep[key]
            row[f"ratios_{vname}"] = {k: agg(c[k] for c in reps) for k, agg in RATIOS}
        row["variance_ratio_blt_over_tree"] = (row["entry_std_blt"] / row["entry_std_tree"]) ** 2
        rows.append(row)
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


CONFIGS = ("d5", "d20", "service")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--horizon", type=int, default=100_000)
    p.add_argument("--service-horizon", type=int, default=3_000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--configs", default=",".join(CONFIGS), help="subset of " + ",".join(CONFIGS))
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon, a.service_horizon = 3, 5_000, 1_000
    eps = (1.0, 5.0)
    runs = {
        "d5": lambda: run_config(
            "frontier d=5", ShariffSheffetEnv(d=5), a.horizon, a.horizon, 256, eps, a.seeds, a.jobs
        ),
        "d20": lambda: run_config(
            "frontier d=20",
            ShariffSheffetEnv(d=20, K=20),
            a.horizon,
            a.horizon,
            256,
            eps,
            a.seeds,
            a.jobs,
        ),
        "service": lambda: run_config(
            "service defaults d=5",
            ShariffSheffetEnv(d=5),
            a.service_horizon,
            1 << 20,
            1,
            (1.0,),
            a.seeds,
            a.jobs,
        ),
    }
    for name in a.configs.split(","):
        # one JSON document per line, as each configuration finishes
        print(json.dumps(runs[name]()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
