"""BLT continual release vs the tree, the square-root factorisation and the lower bound (issue 20).

Prints one JSON document:

1. ``noise``: the maximum per-release noise standard deviation (per off-diagonal Gram entry)
   of DP-LinUCB's certified Gaussian release at ε = 1, δ = 10⁻⁶, L̃² = 2, for T = 10⁴, 2²⁰
   (the service's default n_cap) and 10⁶ releases: binary tree, square-root factorisation,
   BLT (5 buffers, all-horizon sensitivity), and the lower bound σ₁·‖A_T‖_tr/T that holds for
   every factorisation A = BC at the same (ε, δ) (σ₁ = the analytic-Gaussian σ of sensitivity
   L̃²). Closed forms from the calibration itself; also the BLT with the sensitivity capped at T
   (for reference: the product uses the all-horizon bound).
2. ``memory``: bytes of the noise state at T steps, d = 20 (BLT measured, the dense
   factorisation T·(d+1)(d+2)/2 doubles, the tree (m + 2)·(d+1)(d+2)/2).
3. ``throughput``: decide + learn events/s of LinUCB, DP-LinUCB (tree) and DP-LinUCB (BLT),
   d = 20, K = 10, batches of 256, BLAS on one thread; alternated runs, medians reported.

``--refit`` re-runs :func:`~streaming_dpbandit.privacy.blt.fit_blt` for the tabulated horizons
(from the default start and from the current entry, keeping the better) and prints the table
(tens of minutes of CPU).

Usage: python bench/bench_blt.py [--quick] [--refit]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_linucb import Stream, run_policy

from streaming_dpbandit.policies import DPLinUCB, LinUCB
from streaming_dpbandit.privacy.blt import (
    _TABLE,
    blt_max_error,
    blt_parameters,
    blt_sensitivity,
    counting_lower_bound,
    fit_blt,
)
from streaming_dpbandit.privacy.gaussian import analytic_gaussian_sigma
from streaming_dpbandit.privacy.gram_calibration import calibrate_gram_release
from streaming_dpbandit.privacy.symmetric import packing

EPS, DELTA, D = 1.0, 1e-6, 5


def noise(T: int) -> dict:
    cal = {
        impl: calibrate_gram_release(D, EPS, DELTA, T, tree_impl=impl, n_steps=None)
        for impl in ("binary", "sqrt_toeplitz", "blt")
    }
    lt2 = cal["blt"].L_tilde ** 2
    sigma1 = analytic_gaussian_sigma(EPS, DELTA, lt2)
    th, w = blt_parameters(T)
    capped = sigma1 * blt_sensitivity(th, w, T) * blt_max_error(th, w, T)
    lower = sigma1 * counting_lower_bound(T)
    sq = cal["sqrt_toeplitz"].entry_std
    out = {
        "T": T,
        "tree": cal["binary"].entry_std,
        "sqrt_toeplitz": sq,
        "blt": cal["blt"].entry_std,
        "blt_capped_sensitivity": capped,
        "lower_bound": lower,
        "blt_over_sqrt": cal["blt"].entry_std / sq,
        "blt_over_lower_bound": cal["blt"].entry_std / lower,
        "sqrt_over_lower_bound": sq / lower,
        "tree_over_blt": cal["binary"].entry_std / cal["blt"].entry_std,
        "blt_buffers": len(th),
    }
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in out.items()}


def memory(T: int, d: int = 20) -> dict:
    P = packing(d + 1).size
    pol = DPLinUCB(d=d, epsilon=EPS, delta=DELTA, n_cap=T, tree_impl="blt")
    blt = pol._state()._agg.aggregator.nbytes
    m = calibrate_gram_release(d, EPS, DELTA, T).m
    return {
        "T": T,
        "d": d,
        "blt": blt,
        "sqrt_toeplitz_dense": 8 * P * (T + 2),
        "tree": 8 * P * (m + 2),
    }


def throughput(n: int, reps: int) -> dict:
    s = Stream(20)
    makers = {
        "linucb": lambda: LinUCB(d=20, beta=1.0, batch_size=256, seed=0),
        "dp_tree": lambda: DPLinUCB(
            d=20,
            epsilon=EPS,
            delta=DELTA,
            n_cap=1 << 24,
            batch_size=256,
            tree_impl="binary",
            seed=0,
        ),
        "dp_blt": lambda: DPLinUCB(
            d=20,
            epsilon=EPS,
            delta=DELTA,
            n_cap=1 << 24,
            batch_size=256,
            seed=0,
            tree_impl="blt",
        ),
    }
    times: dict = {k: [] for k in makers}
    for _ in range(reps):  # alternated, so drift hits every method alike
        for k, make in makers.items():
            pol = make()
            t0 = time.perf_counter()
            run_policy(pol, s, n)
            times[k].append(time.perf_counter() - t0)
    rate = {k: n / statistics.median(v) for k, v in times.items()}
    return {
        "events": n,
        "reps": reps,
        "events_per_s_median": {k: round(v) for k, v in rate.items()},
        "dp_blt_over_linucb": round(rate["dp_blt"] / rate["linucb"], 3),
        "dp_blt_over_dp_tree": round(rate["dp_blt"] / rate["dp_tree"], 3),
    }


def refit() -> dict:
    """Re-polish every table entry: fit from the default start and from the current entry."""
    out = {}
    for k in sorted(_TABLE):
        n = 1 << k
        best = None
        for start in (None, _TABLE[k]):
            th, w = fit_blt(n, start=start)
            val = blt_sensitivity(th, w) * blt_max_error(th, w, n)
            if best is None or val < best[0]:
                best = (val, th, w)
        out[k] = ([float(v) for v in best[1]], [float(v) for v in best[2]])
        print(k, best[0], file=sys.stderr)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--refit", action="store_true")
    a = p.parse_args(argv)
    if a.refit:
        print(json.dumps(refit(), indent=1))
        return 0
    res = {
        "noise": [noise(T) for T in (10_000, 1 << 20, 1_000_000)],
        "memory": [memory(T) for T in (10_000, 1_000_000)],
        "throughput": throughput(20_000 if a.quick else 100_000, 3 if a.quick else 5),
        "setting": {"epsilon": EPS, "delta": DELTA, "d_noise": D, "L_tilde_sq": 2.0},
    }
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
