"""FLIPHAT benchmarks (issue 2). Prints one JSON document.

1. ``refit``: N-IHT refit time as n and d grow, next to the floor "one pass over the episode's
   data" (a BLAS pass Xᵀy over the n×d rows, measured in the same run). Reported: the refit at
   the boundary (what a refit costs given the streaming statistics) and the whole per-episode
   work (accumulating the rows as they stream in — clipping, exact rounding — plus the refit).
2. ``simulation``: rounds per second at the paper setting (d = 400, K = 3) for one FLIPHAT
   policy, next to the floor "drawing the contexts" of the same rounds.
3. ``memory``: traced memory at each episode boundary over many episodes (forgetting).
4. ``end_to_end`` (issue 24, P5): one FLIPHAT repetition end to end (d = 400, K = 3, T = 10⁴),
   ``dpbandit simulate`` against the authors' JAX code, each in a fresh process, alternated, with
   the same algorithm settings (profile ``paper-as-authors``: the paper calibration, no context
   clipping, ⌊0.15·ln(1 + n·b_max²)⌋ N-IHT iterations per fit, s = 10, η = 1e-4, δ = 0.01,
   b_max = C = ‖β*‖₁). Wall and CPU (user + sys) seconds of each process, the regret at T of
   each repetition, and the ratios. Both sides' own code is byte-compiled (``compileall``, each
   with its own interpreter) before the first timed process, so that no timed process compiles
   what it imports (the machine sets PYTHONDONTWRITEBYTECODE). The authors' side needs two
   things this repository does not ship (their code stays theirs):

   - their repository: ``git clone https://github.com/sunritc/FLIPHAT .cache/fliphat-authors``
     (commit 4b696b7; only ``SparseBandit/`` is used), or ``--authors-dir``;
   - JAX in a separate venv (their versions, on Python 3.11):
     ``python -m venv .cache/venv-jax && .cache/venv-jax/bin/pip install jax==0.4.23
     jaxlib==0.4.23 numpy==1.26.3 scipy==1.11.4``, or ``--jax-python``.

   Without them the section records the ``dpbandit simulate`` side only and says why.

Usage: python bench/bench_fliphat.py [--quick] [--sections refit,simulation,memory,end_to_end]
       [--e2e-reps 5] [--authors-dir DIR] [--jax-python PYTHON]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

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


ROOT = Path(__file__).resolve().parent.parent
#: The authors' settings of their setting 2 (simulation.py: SLCB(s=10, epsilon=ε, delta=0.01,
#: eta=1e-4, M=0.15)), as ``dpbandit simulate`` options.
PAPER_AS_AUTHORS = {
    "calibration": "paper",
    "clip_contexts": "false",
    "m_schedule": "log",
    "m0": "0.15",
    "m_guard": "allow_zero",
    "s": "10",
    "eta": "1e-4",
}


def _run_timed(cmd: list[str], env: dict, cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall and CPU (user + sys) seconds of one child process, and its stdout."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=3600)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed: {out.stderr.strip()[-2000:]}")
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, out.stdout


def _ours(seed: int, horizon: int, epsilon: float, m0: float, write_json: bool) -> dict:
    """``dpbandit simulate`` of one repetition; ``write_json`` adds ``--json`` (whose privacy
    block carries the PLD accountant's ε at δ, as the table does); else the regret is read
    from the printed table."""
    params = PAPER_AS_AUTHORS | {"m0": str(m0)}
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "sim.json"
        cmd = [sys.executable, "-m", "streaming_dpbandit.cli", "simulate", "--policy", "fliphat",
               "--env", "fliphat-paper", "--seeds", "1", "--seed", str(seed), "--jobs", "1",
               "--no-progress", "--horizon", str(horizon), "--epsilon", str(epsilon),
               "--delta", "0.01", "--calibration", params.pop("calibration")]  # fmt: skip
        if write_json:
            cmd += ["--json", str(out_json)]
        for k, v in params.items():
            cmd += ["--policy-param", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        wall, cpu, stdout = _run_timed(cmd, env)
        if write_json:
            sim = json.loads(out_json.read_text())
            return {
                "wall_s": wall,
                "cpu_s": cpu,
                "simulate_loop_s": sim["elapsed_s"],
                "regret": sim["runs"][0]["final_regret"]["mean"],
            }
    # the table's row: "fliphat ε=1  10000  6,958.2 ± 0.0  ..."; the header line gives the time
    loop_s = float(re.search(r", ([0-9.]+) s$", stdout.splitlines()[0]).group(1))
    regret = float(re.search(r"([0-9][0-9,]*\.[0-9]) ± ", stdout).group(1).replace(",", ""))
    return {"wall_s": wall, "cpu_s": cpu, "simulate_loop_s": loop_s, "regret": regret}


def _authors(seed, horizon, epsilon, m0, authors_dir: Path, jax_python: str) -> dict:
    cmd = [jax_python, str(ROOT / "bench" / "fliphat_authors_run.py"), str(seed), str(horizon),
           "400", "3", str(epsilon), str(m0)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(authors_dir), "JAX_PLATFORMS": "cpu"}
    wall, cpu, out = _run_timed(cmd, env)
    res = json.loads(out.strip().splitlines()[-1])
    return {"wall_s": wall, "cpu_s": cpu} | res


def _byte_compile(python: str, source: Path) -> dict:
    """Byte-compile ``source`` with ``python`` before anything is timed, so that neither side
    compiles its own code inside the timed processes (with PYTHONDONTWRITEBYTECODE set, as on
    the benchmark machine, a fresh process would otherwise compile every module it imports, every
    time); and count the modules of ``python``'s site-packages that have no bytecode."""
    subprocess.run([python, "-m", "compileall", "-q", str(source)], check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    probe = (
        "import sysconfig, pathlib, sys; p = pathlib.Path(sysconfig.get_paths()['purelib']); "
        "tag = sys.implementation.cache_tag; "
        "print(sum(not (f.parent / '__pycache__' / f'{f.stem}.{tag}.pyc').exists() "
        "for f in p.rglob('*.py')))"
    )
    missing = subprocess.run([python, "-c", probe], check=True, capture_output=True, text=True)
    return {"compiled": str(source), "site_packages_modules_without_bytecode": int(missing.stdout)}


def _mean_se(xs: list[float]) -> dict:
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else None
    return {"mean": statistics.fmean(xs), "se": se, "n": len(xs)}


def bench_end_to_end(reps, authors_dir, jax_python, horizon=10_000, epsilon=1.0, m0=0.15):
    """P5: one repetition end to end, ours and the authors' alternated (see the module doc)."""
    have_authors = (authors_dir / "SparseBandit" / "fliphat_simulation_utils.py").exists() and (
        Path(jax_python).exists()
    )
    compiled = {"ours": _byte_compile(sys.executable, ROOT / "streaming_dpbandit")}
    if have_authors:
        compiled["authors"] = _byte_compile(jax_python, authors_dir / "SparseBandit")
    ours, ours_json, theirs = [], [], []
    for i in range(reps):
        # alternate who goes first, so that drift of the machine hits both sides alike
        order = ("ours", "ours_json", "authors")
        for side in order if i % 2 == 0 else order[::-1]:
            load = {"load_1min_before": os.getloadavg()[0]}
            if side == "ours":
                ours.append(_ours(i, horizon, epsilon, m0, write_json=False) | load)
            elif side == "ours_json":
                ours_json.append(_ours(i, horizon, epsilon, m0, write_json=True) | load)
            elif have_authors:
                theirs.append(_authors(i, horizon, epsilon, m0, authors_dir, jax_python) | load)
    out = {
        "protocol": {
            "setting": f"FLIPHAT paper env: d = 400, K = 3, s* = 5, AR(0.1) contexts, "
            f"N(0, 0.1²) noise, T = {horizon}, ε = {epsilon}, δ = 0.01",
            "profile": "paper-as-authors: calibration=paper, clip_contexts=false, "
            f"m_schedule=log (⌊{m0}·ln(1 + n·b_max²)⌋ iterations, zero allowed), s=10, "
            "eta=1e-4, b_max = C = ‖β*‖₁ (oracle, as the authors)",
            "ours": "python -m streaming_dpbandit.cli simulate ... --seeds 1 --jobs 1 "
            "(fresh process: start-up, simulation, regret table; the regret is read from the "
            "table, the authors' output is a regret too)",
            "ours_json": "the same with --json FILE: the JSON's privacy block adds the PLD "
            "accountant's ε at δ (the table shows it too; for FLIPHAT's ledger, one (ε, δ) "
            "component per episode, it is computed without importing dp-accounting)",
            "authors": "bench/fliphat_authors_run.py: their SLCB.play() of simulation.py's "
            "setting 2, one ε, data drawn up front (fresh process, their JAX 0.4.23)",
            "repetitions": reps,
            "order": "alternated pairs (ours first in even pairs, authors first in odd ones)",
            "timing": "wall and CPU (user + sys, from getrusage of the child) per process; "
            "medians; the machine is shared, so CPU seconds are the steadier figure",
            "bytecode": "before the first timed process, each side's own code is byte-compiled "
            "with its own interpreter (python -m compileall: streaming_dpbandit/ and the "
            "authors' SparseBandit/), so that no timed process compiles the modules it imports "
            "(PYTHONDONTWRITEBYTECODE=1 on the benchmark machine would make every process "
            "compile them again); both venvs' site-packages were byte-compiled by pip",
            "compiled": compiled,
            "caveat": "the authors' play() runs its last episode to full length (2^13 − 1 "
            "rounds from t = 8,191; JAX clamps the indices past T), so it decides 16,370 "
            "rounds for T = 10⁴; its regret is read at T",
            "seeds": "each side draws its own data from its own seed i (same law, same β*)",
        },
        "ours": ours,
        "ours_json": ours_json,
        "ours_regret": _mean_se([r["regret"] for r in ours]),
        "ours_median_wall_s": statistics.median(r["wall_s"] for r in ours),
        "ours_median_cpu_s": statistics.median(r["cpu_s"] for r in ours),
        "ours_median_loop_s": statistics.median(r["simulate_loop_s"] for r in ours),
        "ours_json_median_wall_s": statistics.median(r["wall_s"] for r in ours_json),
        "ours_json_median_cpu_s": statistics.median(r["cpu_s"] for r in ours_json),
    }
    if not theirs:
        out["authors"] = (
            f"not run: needs {authors_dir}/SparseBandit (github.com/sunritc/FLIPHAT) and a "
            f"Python with JAX at {jax_python} (see the module docstring)"
        )
        return out
    ra, rb = _mean_se([r["regret"] for r in ours]), _mean_se([r["regret"] for r in theirs])
    se = ((ra["se"] or 0) ** 2 + (rb["se"] or 0) ** 2) ** 0.5
    out |= {
        "authors": theirs,
        "authors_regret": rb,
        "regret_difference_in_se": (ra["mean"] - rb["mean"]) / se if se > 0 else None,
        "authors_median_wall_s": statistics.median(r["wall_s"] for r in theirs),
        "authors_median_cpu_s": statistics.median(r["cpu_s"] for r in theirs),
    }
    out["speedup_wall"] = out["authors_median_wall_s"] / out["ours_median_wall_s"]
    out["speedup_cpu"] = out["authors_median_cpu_s"] / out["ours_median_cpu_s"]
    out["speedup_wall_per_pair"] = [b["wall_s"] / a["wall_s"] for a, b in zip(ours, theirs)]
    out["speedup_cpu_per_pair"] = [b["cpu_s"] / a["cpu_s"] for a, b in zip(ours, theirs)]
    out["speedup_wall_with_json"] = out["authors_median_wall_s"] / out["ours_json_median_wall_s"]
    out["speedup_cpu_with_json"] = out["authors_median_cpu_s"] / out["ours_json_median_cpu_s"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument(
        "--sections",
        default="refit,simulation,memory,end_to_end",
        help="comma-separated sections to run",
    )
    ap.add_argument("--e2e-reps", type=int, default=5, help="end_to_end: alternated pairs")
    ap.add_argument("--authors-dir", type=Path, default=ROOT / ".cache" / "fliphat-authors")
    ap.add_argument("--jax-python", default=str(ROOT / ".cache" / "venv-jax" / "bin" / "python"))
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if args.quick:
        ns, ds, horizon, mem_eps = [2**10, 2**12], [100, 400], 4096, 8
    else:
        ns, ds, horizon, mem_eps = [2**10, 2**12, 2**14, 2**16], [100, 400, 2000], 2**15, 13
    result = {
        "machine": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },
    }
    if "refit" in sections:
        result["refit"] = bench_refit(ns, ds)
        result["refit_m3_gram_or_rows"] = bench_refit(ns[:2], ds[:2], iterations=3)
    if "simulation" in sections:
        result["simulation"] = bench_simulation(horizon)
    if "memory" in sections:
        result["memory"] = [bench_memory(400, mem_eps, "gram"), bench_memory(400, mem_eps, "h")]
    if "end_to_end" in sections:
        result["end_to_end"] = bench_end_to_end(
            1 if args.quick else args.e2e_reps, args.authors_dir, args.jax_python
        )
    result["machine"]["load_average_at_end"] = os.getloadavg()
    for row in result.get("refit", []) + result.get("refit_m3_gram_or_rows", []):
        for k, v in row.items():
            if isinstance(v, float):
                row[k] = float(f"{v:.4g}")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
