"""Replay benchmarks (issue 5). Prints one JSON document.

1. ``estimators``: events/s of the fixed-policy estimators — IPS, SNIPS, DM and DR together,
   with the weight diagnostics, the bootstrap blocks and the running curves — fed in-memory
   chunks (the vectorised core, no I/O), and the same with the target policy's probabilities
   and sampled choices (a table policy, as for the OBD example) computed per chunk.
2. ``obd``: end to end on the largest Open Bandit Dataset log available
   (``$DPBANDIT_OBD_DIR/random/all``, default ``../shared/datasets/obd``, 10,000 events,
   K = 80, d = 122; else the bundled slice): reading alone (the floor), and ``replay_log``
   of the Bernoulli-TS table policy with ips, snips, dm and dr (two passes:
   reward model, evaluation).
3. ``replay_vs_simulation``: events/s of the replay method against rounds/s of the same policy's
   in-process simulation (``experiments.runner.run_repetition``) at the same K and d — on the OBD
   log (the simulation draws contexts from the log's own per-arm features) and on the two
   papers' environments (uniform logs drawn from the environment). Like for like, the replay's
   end-to-end rate includes producing its log (parsing the CSV, or drawing it from the
   environment) as the simulation's includes drawing its contexts; also reported: the replay
   method alone (``replay_evaluator_only``) and the environment's own generation rate (the
   floor of both). Best of ``--repeat`` runs: the machine is shared.
4. ``memory``: traced peak memory (``tracemalloc``: Python and numpy allocations) and resident
   memory of ``replay_log`` (the replay method and all four estimators) on the OBD log read 1×,
   10× and 40× in a row, each in a fresh process: memory is bounded by a chunk, not the log.

BLAS runs single-threaded (``OPENBLAS_NUM_THREADS=1``, for the replay and the simulation
alike; ``--blas-threads N`` to change): on this shared 2-core machine two OpenBLAS threads made
small matrix products up to 100× slower under load.

Usage: python bench/bench_replay.py [--quick] [--obd DIR] [--repeat 3] [--blas-threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if __name__ == "__main__":  # before numpy is imported
    _t = sys.argv[sys.argv.index("--blas-threads") + 1] if "--blas-threads" in sys.argv else "1"
    for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_v, _t)
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

from streaming_dpbandit.envs import FliphatPaperEnv, ShariffSheffetEnv
from streaming_dpbandit.envs.base import Environment
from streaming_dpbandit.experiments.runner import RunSpec, run_repetition
from streaming_dpbandit.policies import TablePolicy
from streaming_dpbandit.replay.batch import LoggedBatch
from streaming_dpbandit.replay.build import action_table
from streaming_dpbandit.replay.contexts import ConstantContexts, DenseContexts
from streaming_dpbandit.replay.datasets import obd_sample
from streaming_dpbandit.replay.evaluate import PolicySpec, replay_log
from streaming_dpbandit.replay.offpolicy import OffPolicyEvaluator
from streaming_dpbandit.replay.ope import ESTIMATORS, WeightDiagnostics
from streaming_dpbandit.replay.readers.base import LogReader
from streaming_dpbandit.replay.readers.obd import ObdReader
from streaming_dpbandit.replay.reward_model import RidgeRewardModel

#: The full OBD sample (as the ``obp`` package distributes it), if present; else the bundled
#: slice.
SHARED_OBD = Path(os.environ.get("DPBANDIT_OBD_DIR", "../shared/datasets/obd"))


def best_of(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times)), out


# -- 1. estimators --------------------------------------------------------------------------------
def bench_estimators(n, chunk, repeat):
    rng = np.random.default_rng(0)
    K, P = 80, 3
    r = (rng.random(n) < 0.05).astype(float)
    pos = rng.integers(0, P, n)
    w = rng.exponential(size=n)
    qa = rng.random(n) * 0.1
    qpi = rng.random(n) * 0.1

    def core():
        ests = [cls(bootstrap=1000, seed=i) for i, cls in enumerate(ESTIMATORS.values())]
        diag = WeightDiagnostics()
        for s in range(0, n, chunk):
            sl = slice(s, s + chunk)
            for e in ests:
                e.update(r[sl], w[sl], pos[sl], qa[sl], qpi[sl], events=s + chunk)
            diag.update(w[sl], pos[sl])
        return [e.estimate() for e in ests]

    best, med, _ = best_of(core, repeat)
    # with the target policy per chunk: a table policy's π(·|p), its sampled arms, the weights,
    # and a (constant-feature) reward model's predictions
    tab = rng.dirichlet(np.ones(K), size=P)
    actions = rng.integers(0, K, n)
    ids = np.arange(n)

    def batches():
        for s in range(0, n, chunk):
            sl = slice(s, s + chunk)
            m = actions[sl].size
            yield (
                s,
                LoggedBatch(
                    ids[sl], actions[sl], r[sl], np.full(m, 1 / K), pos[sl], ConstantContexts(m, K)
                ),
            )

    model = RidgeRewardModel()
    for s, b in batches():
        model.learn(b, s)
    model.fit()

    def with_policy():
        ev = OffPolicyEvaluator(TablePolicy(tab, seed=0), list(ESTIMATORS), model, bootstrap=1000)
        for s, b in batches():
            ev.process(b, s)
        return ev.result()

    best2, med2, _ = best_of(with_policy, repeat)
    return {
        "events": n,
        "chunk": chunk,
        "estimators": list(ESTIMATORS),
        "bootstrap_replicates": 1000,
        "core_events_per_s": n / best,
        "core_events_per_s_median": n / med,
        "with_table_policy_events_per_s": n / best2,
        "with_table_policy_events_per_s_median": n / med2,
    }


# -- 2. OBD end to end ----------------------------------------------------------------------------
def obd_paths(arg):
    if arg:
        rnd = Path(arg)
        return rnd, rnd.parent.parent / "bts" / rnd.name
    if (SHARED_OBD / "random" / "all").is_dir():
        return SHARED_OBD / "random" / "all", SHARED_OBD / "bts" / "all"
    return obd_sample("random"), obd_sample("bts")


def bench_obd(rnd, bts, repeat):
    reader = ObdReader(rnd).open()

    def read():
        n = 0
        for b in reader.chunks():
            n += len(b)
        return n

    best_r, med_r, n = best_of(read, repeat)

    def dense():
        for b in reader.chunks():
            b.contexts.dense()

    best_d, _, _ = best_of(dense, repeat)
    tab, info = action_table(ObdReader(bts))
    spec = PolicySpec("bts (table)", "table", {"probabilities": tab.tolist()})

    def evaluate():
        return replay_log(reader, [spec], ["ips", "snips", "dm", "dr"], method=False)

    best_e, med_e, res = best_of(evaluate, repeat)
    est = res.runs[0]["offpolicy"]["estimates"]
    return {
        "log": str(rnd),
        "events": n,
        "K": reader.n_arms,
        "d": reader.d,
        "chunk": reader.default_chunk_size(),
        "read_events_per_s": n / best_r,
        "read_events_per_s_median": n / med_r,
        "read_and_build_dense_contexts_events_per_s": n / best_d,
        "bts_table_ips_snips_dm_dr_end_to_end_events_per_s": n / best_e,
        "bts_table_end_to_end_events_per_s_median": n / med_e,
        "bts_table_end_to_end_passes": 2,
        "estimates": {k: [v.value, v.ci_normal] for k, v in _estimates(est).items()},
        "bts_on_policy": [info["value"], info["ci_normal"]],
        "uniform_on_policy": res.on_policy["value"],
    }


class _E:
    def __init__(self, d):
        self.value = d["value"]
        self.ci_normal = d["ci_normal"]


def _estimates(est):
    return {k: _E(v) for k, v in est.items()}


# -- 3. replay vs simulation ----------------------------------------------------------------------
class PoolEnv(Environment):
    """Contexts drawn from a pool of logged per-arm feature tensors; linear mean rewards."""

    name = "obd-contexts"

    def __init__(self, pool):
        self.pool = pool
        self.K, self.d = pool.shape[1], pool.shape[2]
        self.theta = np.random.default_rng(0).normal(size=self.d) * 0.05

    def contexts(self, rng, n):
        return self.pool[rng.integers(0, len(self.pool), n)]

    def mean_rewards(self, X):
        return X @ self.theta

    def reward_noise(self, rng, n):
        return 0.1 * rng.standard_normal((n, self.K))


class EnvLogReader(LogReader):
    """A uniformly logged stream drawn from an environment (regenerated identically per read)."""

    format = "simulated-uniform-log"

    def __init__(self, env, events, seed=0):
        self.env, self.events, self.seed = env, events, seed

    def _open(self):
        self.n_arms, self.d = self.env.K, self.env.d

    def _chunks(self, chunk_size):
        rng = np.random.default_rng(self.seed)
        done = 0
        while done < self.events:
            n = min(chunk_size, self.events - done)
            X = self.env.contexts(rng, n)
            a = rng.integers(0, self.n_arms, n)
            mu = self.env.mean_rewards(X)[np.arange(n), a]
            y = self.env.rewards(mu, self.env.reward_noise(rng, n)[np.arange(n), a])
            yield LoggedBatch(
                np.arange(done, done + n),
                a,
                np.asarray(y, dtype=float),
                np.full(n, 1.0 / self.n_arms),
                np.zeros(n, np.int64),
                DenseContexts(X),
            )
            done += n


def _simulate(env, name, params, horizon, repeat):
    spec = RunSpec(name, name, params, horizon)
    best, med, _ = best_of(lambda: run_repetition(env, [spec], 0, keep_records=False), repeat)
    return horizon / best, horizon / med


def _env_floor(env, events, repeat):
    """Rounds/s of drawing contexts, means and noise only (what simulation and log share)."""

    def draw():
        rng = np.random.default_rng(0)
        done = 0
        while done < events:
            n = min(2048, events - done)
            X = env.contexts(rng, n)
            env.mean_rewards(X)
            env.reward_noise(rng, n)
            done += n

    best, _, _ = best_of(draw, repeat)
    return events / best


def _replay(reader, name, params, repeat, eps=None):
    spec = PolicySpec(name, name, params, eps, params.get("delta"))

    def go():
        return replay_log(reader, [spec], [], method=True, bootstrap=0)

    best, med, res = best_of(go, repeat)
    run = res.runs[0]["replay"]
    n = res.events
    return {
        "events": n,
        "matched": run["estimate"]["diagnostics"]["matched"],
        "replay_events_per_s": n / best,
        "replay_events_per_s_median": n / med,
        "replay_evaluator_only_events_per_s": run["events_per_s"],
    }


def bench_replay_vs_sim(rnd, repeat, quick):
    rows = []
    reader = ObdReader(rnd).open()
    pool = next(reader.chunks(400)).contexts.dense()
    env = PoolEnv(pool)
    d = reader.d
    cases = [
        ("fliphat", {"d": d, "s": 10, "epsilon": 1.0, "delta": 1e-6}, 4000),
        ("dp-linucb", {"d": d, "epsilon": 1.0, "delta": 1e-6, "n_cap": 1 << 14}, 300),
        ("linucb", {"d": d}, 300),
    ]
    for name, params, horizon in cases:
        sim_best, sim_med = _simulate(env, name, params, horizon // (4 if quick else 1), repeat)
        rep = _replay(reader, name, params, repeat)
        rep["environment_floor_rounds_per_s"] = _env_floor(env, 20_000, repeat)
        rows.append(
            {
                "log": f"OBD {rnd.parent.name}/{rnd.name}",
                "K": reader.n_arms,
                "d": d,
                "policy": name,
                "params": {k: v for k, v in params.items() if k != "d"},
                **rep,
                "simulation_rounds_per_s": sim_best,
                "simulation_rounds_per_s_median": sim_med,
                "ratio_replay_events_to_simulation_rounds": rep["replay_events_per_s"] / sim_best,
            }
        )
    envs = [
        (
            FliphatPaperEnv(d=100, s_star=5, K=3),
            [("fliphat", {"d": 100, "s": 10, "epsilon": 1.0, "delta": 0.01, "b_max": 3.4})],
            240_000,
            120_000,
        ),
        (
            ShariffSheffetEnv(d=5, gap=0.1),
            [
                ("dp-linucb", {"d": 5, "epsilon": 1.0, "delta": 0.1, "n_cap": 1 << 16}),
                (
                    "dp-linucb",
                    {"d": 5, "epsilon": 1.0, "delta": 0.1, "n_cap": 1 << 16, "batch_size": 256},
                ),
                ("linucb", {"d": 5}),
            ],
            200_000,
            None,
        ),
    ]
    for env_, specs, events, horizon in envs:
        if quick:
            events, horizon = events // 4, horizon // 4
        log = EnvLogReader(env_, events).open()
        floor = _env_floor(env_, min(events, 100_000), repeat)
        for name, params in specs:
            # slow policies (a refit per round) get a shorter simulation: ~2 s each
            h = horizon or (4_000 if params.get("batch_size", 1) == 1 else 100_000)
            sim_best, sim_med = _simulate(env_, name, params, h // (4 if quick else 1), repeat)
            rep = _replay(log, name, params, repeat)
            rep["environment_floor_rounds_per_s"] = floor
            rows.append(
                {
                    "log": f"uniform log of {env_.name}",
                    "K": env_.K,
                    "d": env_.d,
                    "policy": name,
                    "params": {k: v for k, v in params.items() if k != "d"},
                    **rep,
                    "simulation_rounds_per_s": sim_best,
                    "simulation_rounds_per_s_median": sim_med,
                    "ratio_replay_events_to_simulation_rounds": rep["replay_events_per_s"]
                    / sim_best,
                }
            )
    return rows


# -- 4. memory ------------------------------------------------------------------------------------
class RepeatReader(LogReader):
    """The same log read ``times`` times in a row (fresh event ids each time)."""

    def __init__(self, inner, times):
        self.inner, self.times = inner, times
        self.format = inner.format

    def _open(self):
        self.inner.open()
        self.n_arms, self.d = self.inner.n_arms, self.inner.d

    def _chunks(self, chunk_size):
        offset = 0
        for _ in range(self.times):
            last = 0
            for b in self.inner.chunks(chunk_size):
                b.event_ids = b.event_ids + offset
                last = int(b.event_ids.max()) + 1
                yield b
            offset = last

    def describe(self):
        return {**self.inner.describe(), "repeated": self.times}


def _rss_mib(field: str = "VmRSS") -> float:
    """Current (VmRSS) or peak (VmHWM) resident memory of this process, MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def memory_run(rnd, bts, times):
    """(child process) replay_log on the log read ``times`` times; print events and memory."""
    import tracemalloc

    reader = RepeatReader(ObdReader(rnd), times)
    tab, _ = action_table(ObdReader(bts))
    warm = RepeatReader(ObdReader(rnd), 1)  # lazy imports and caches before measuring
    replay_log(warm, [PolicySpec("t", "table", {"probabilities": tab.tolist()})], ["dr"])
    baseline = _rss_mib()
    tracemalloc.start()
    specs = [
        PolicySpec("bts (table)", "table", {"probabilities": tab.tolist()}),
        PolicySpec("fliphat", "fliphat", {"d": 0, "s": 10, "epsilon": 1.0, "delta": 1e-6}, 1.0),
    ]
    reader.open()
    specs[1].params["d"] = reader.d
    t0 = time.perf_counter()
    res = replay_log(reader, specs[:1], ["ips", "snips", "dm", "dr"], method=False)
    res2 = replay_log(reader, specs[1:], [], method=True)
    traced_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    print(
        json.dumps(
            {
                "times": times,
                "events": res.events,
                "seconds": time.perf_counter() - t0,
                "traced_peak_mib": traced_peak,
                "rss_before_mib": baseline,
                "rss_after_mib": _rss_mib(),
                "peak_rss_mib": _rss_mib("VmHWM"),  # includes imports and the warm-up
                "chunk": reader.default_chunk_size(),
                "replay_matched": res2.runs[0]["replay"]["estimate"]["diagnostics"]["matched"],
            }
        )
    )


def bench_memory(rnd, bts, quick):
    out = []
    for times in (1, 4) if quick else (1, 10, 40):
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-run", str(times), "--obd", str(rnd)],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ),
        )
        out.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--obd", help="a uniformly logged OBD campaign directory (random/<campaign>)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blas-threads", default="1", help="BLAS threads (default 1)")
    ap.add_argument("--memory-run", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--only", help="comma-separated sections to run")
    args = ap.parse_args()
    rnd, bts = obd_paths(args.obd)
    if args.memory_run:
        memory_run(rnd, bts, args.memory_run)
        return
    only = set(args.only.split(",")) if args.only else None
    result = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_1min": os.getloadavg()[0],
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
        "numpy": np.__version__,
    }
    if only is None or "estimators" in only:
        n = 1 << (20 if args.quick else 22)
        result["estimators"] = bench_estimators(n, 1 << 16, args.repeat)
    if only is None or "obd" in only:
        result["obd"] = bench_obd(rnd, bts, args.repeat)
    if only is None or "replay" in only:
        result["replay_vs_simulation"] = bench_replay_vs_sim(rnd, args.repeat, args.quick)
    if only is None or "memory" in only:
        result["memory"] = bench_memory(rnd, bts, args.quick)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
