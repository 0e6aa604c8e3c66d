"""FLIPHAT benchmarks (issue 2). Prints one JSON document.

1. ``refit``: N-IHT refit time as n and d grow, next to the floor "one pass over the episode's
   data" (a BLAS pass Xᵀy over the n×d rows, measured in the same run). Reported: the refit at
   the boundary (what a refit costs given the streaming statistics) and the whole per-episode
   work (accumulating the rows as they stream in — clipping, exact rounding — plus the refit).
2. ``simulation``: rounds per second at the paper setting (d = 400, K = 3) for one FLIPHAT
   policy, next to the floor "drawing the contexts" of the same rounds.
3. ``memory``: traced memory at each episode boundary over many episodes (forgetting).

Usage: python bench/bench_fliphat.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import time
import tracemalloc

import numpy as np

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.experiments.runner import CHUNK, RunSpec, run_repetition
from streaming_dpbandit.policies import FLIPHAT


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_refit(ns, ds, iterations=1):
    rows = []
    rng = np.random.default_rng(0)
    for d in ds:
        for n in ns:
            X = np.clip(rng.standard_normal((n, d)), -3, 3)
            y = rng.standard_normal(n)
            pass_s = best_of(lambda X=X, y=y: X.T @ y)

            def one_episode(n=n, d=d, X=X, y=y):
                pol = FLIPHAT(
                    d=d,
                    s=10,
                    epsilon=1.0,
                    delta=0.01,
                    b_max=3.0,
                    first_episode_len=n,
                    iterations=iterations,
                    eta=0.05 if iterations > 1 else 1e-4,
                    seed=1,
                )
                pol.decide(_zeros(n, d))
                t0 = time.perf_counter()
                for i in range(0, n, CHUNK):
                    r = np.arange(i + 1, min(i + CHUNK, n) + 1)
                    pol.learn(X[i : i + CHUNK], y[i : i + CHUNK], r)
                t1 = time.perf_counter()
                pol.refit()
                t2 = time.perf_counter()
                return t1 - t0, t2 - t1, pol._acc

            samples = [one_episode()[:2] for _ in range(3)]
            learn_s = min(s[0] for s in samples)
            refit_s = min(s[1] for s in samples)
            rows.append(
                {
                    "n": n,
                    "d": d,
                    "iterations": iterations,
                    "one_pass_s": pass_s,
                    "refit_s": refit_s,
                    "learn_s": learn_s,
                    "refit_over_pass": refit_s / pass_s,
                    "episode_total_over_pass": (learn_s + refit_s) / pass_s,
                }
            )
    return rows


def _zeros(n, d):
    # decide() only needs the shape of the contexts while β̂ = 0; a broadcast view costs nothing
    return np.broadcast_to(np.zeros((1, 1, d)), (n, 1, d))


def bench_simulation(horizon, repeat=3):
    env = FliphatPaperEnv()
    params = dict(d=env.d, s=10, epsilon=1.0, delta=0.01, b_max=env.b_max)
    out = {}
    for label, extra in (
        ("certified", {}),
        (
            "paper",
            dict(
                calibration="paper",
                clip_contexts=False,
                m_schedule="log",
                m0=0.16,
                m_guard="allow_zero",
            ),
        ),
    ):
        spec = RunSpec("fliphat", "fliphat", params | extra, horizon, 1.0, 0.01)
        sim_s = best_of(lambda spec=spec: run_repetition(env, [spec], rep=0), repeat)

        def draw():
            rng = np.random.default_rng(0)
            for t0 in range(0, horizon, CHUNK):
                env.contexts(rng, min(CHUNK, horizon - t0))

        draw_s = best_of(draw, repeat)
        out[label] = {
            "horizon": horizon,
            "simulate_s": sim_s,
            "draw_contexts_s": draw_s,
            "rounds_per_s": horizon / sim_s,
            "round_cost_over_draw": sim_s / draw_s,
        }
    return out


def bench_memory(d, episodes, form):
    pol = FLIPHAT(
        d=d, s=5, epsilon=1.0, delta=0.01, b_max=2.0, form=form, seed=0, first_episode_len=64
    )
    rng = np.random.default_rng(0)
    gc.collect()
    tracemalloc.start()
    per_episode = []
    while pol.model_version < episodes:
        if pol.refit_due():
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]  # the closed episode's statistics live
            pol.refit()
            gc.collect()
            per_episode.append(
                {
                    "episode": pol.model_version,
                    "rounds": pol.t,
                    "before_refit_bytes": before,
                    "after_refit_bytes": tracemalloc.get_traced_memory()[0],
                }
            )
        n = min(pol.max_decide_batch(), CHUNK)
        X = rng.standard_normal((n, 2, d))
        dec = pol.decide(X)
        pol.learn(X[np.arange(n), dec.arms], rng.standard_normal(n), dec.rounds)
        del X, dec  # measure the policy's own memory only
    tracemalloc.stop()
    live = [p["before_refit_bytes"] for p in per_episode[3:]]  # past the smallest episodes
    after = [p["after_refit_bytes"] for p in per_episode[3:]]
    return {
        "d": d,
        "form": form,
        "per_episode": per_episode,
        "live_state_bytes_min_max": [min(live), max(live)],
        "after_forgetting_bytes_min_max": [min(after), max(after)],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    args = ap.parse_args()
    if args.quick:
        ns, ds, horizon, mem_eps = [2**10, 2**12], [100, 400], 4096, 8
    else:
        ns, ds, horizon, mem_eps = [2**10, 2**12, 2**14, 2**16], [100, 400, 2000], 2**15, 13
    result = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
        },
        "refit": bench_refit(ns, ds),
        "refit_m3_gram_or_rows": bench_refit(ns[:2], ds[:2], iterations=3),
        "simulation": bench_simulation(horizon),
        "memory": [bench_memory(400, mem_eps, "gram"), bench_memory(400, mem_eps, "h")],
    }
    for row in result["refit"] + result["refit_m3_gram_or_rows"]:
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = float(f"{v:.4g}")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
