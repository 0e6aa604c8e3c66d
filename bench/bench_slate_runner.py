"""The slate runner's batched path against the round-by-round protocol (issue 20, item 3).

One repetition of the frontier's slate setting (the DP-matroid synthetic instance; OMM and
DPUCB-MAT / DPTS-MAT at ε ∈ {0.5, 1, 2, 5}) through
:func:`~streaming_dpbandit.experiments.matroid_runner.run_matroid_repetition` with
``batched=True`` (the default: a quiet stretch per decide/learn call for the private policies)
and ``batched=False`` (one decide/learn per round, as before), alternated, CPU time
(``time.process_time``) per policy group; medians over the repetitions. Both paths give the
same curves (``tests/experiments/test_matroid_runner_batched.py``). Prints one JSON document.

Usage: python bench/bench_slate_runner.py [--horizon 5000] [--reps 3]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import statistics
import time

import numpy as np

from streaming_dpbandit.experiments.frontier import _env
from streaming_dpbandit.experiments.matroid_runner import (
    MatroidRunSpec,
    log_grid,
    run_matroid_repetition,
)


def _groups(T: int) -> dict[str, list[MatroidRunSpec]]:
    private = [
        MatroidRunSpec(f"{algo} ε={eps:g}", algo, {"epsilon": eps}, T, eps, "private")
        for eps in (0.5, 1.0, 2.0, 5.0)
        for algo in ("dpucb-mat", "dpts-mat")
    ]
    return {"omm": [MatroidRunSpec("omm", "omm", {}, T, None, "baseline")], "private": private}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--horizon", type=int, default=5000)
    p.add_argument("--reps", type=int, default=3)
    a = p.parse_args(argv)
    env, T = _env("slate"), a.horizon
    grid = log_grid(T)
    times: dict[str, list[float]] = {}
    same = True
    for rep in range(a.reps):
        for name, specs in _groups(T).items():
            out = {}
            for batched in (True, False):  # alternated within each repetition
                t0 = time.process_time()
                out[batched] = run_matroid_repetition(env, specs, rep, 0, grid, batched=batched)
                times.setdefault(f"{name} batched={batched}", []).append(time.process_time() - t0)
            same &= all(
                np.array_equal(out[True][k]["regret"], out[False][k]["regret"]) for k in out[True]
            )
    med = {k: statistics.median(v) for k, v in times.items()}
    per_round_us = {k: 1e6 * v / T for k, v in med.items()}
    print(
        json.dumps(
            {
                "horizon": T,
                "reps": a.reps,
                "cpu_s_median": {k: round(v, 3) for k, v in med.items()},
                "cpu_us_per_round_median": {k: round(v, 1) for k, v in per_round_us.items()},
                "private_speedup": round(
                    med["private batched=False"] / med["private batched=True"], 1
                ),
                "identical_curves": bool(same),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
