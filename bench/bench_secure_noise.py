"""Secure vs fast noise backend (issue 22 §1). Prints one JSON document.

* ``per_release``: seconds per release of each migrated mechanism — a Laplace vector release,
  a Gaussian vector release, one Peeling release (FLIPHAT's per-iteration release at d = 100,
  s = 10), one DP-matroid batch mean — on both backends, alternated ``--repeats`` times
  (medians).
* ``service``: contexts/s of ``dpbandit serve``'s loop over the in-process transport with the
  simulated FLIPHAT stream of ``bench_service.py`` (d = 100, K = 3, doubling episodes from
  1,024 rounds), backend fast and secure alternated ``--repeats`` times (medians and the
  per-pair ratios), and the wall time spent in FLIPHAT's private releases (refits) per run.

* ``per_release`` also times the mechanisms migrated later (issue 22 §1, second part): one
  DP-LinUCB padded-tree release at d = 5 (a node and the pads: 2·21 exact draws), one
  PrivateLASSO SymGauss Gram release at p = 11 (66 draws), one LDP ℓ2-ball report (d = 10) and
  one LDP Gaussian OLS report (d = 5: 20 draws).
  Also one DP-LinUCB BLT step at d = 5 after 200 steps (the secure encoding is exact and
  O(steps) per step).
* ``service_dp_linucb``: contexts/s of ``serve``'s loop with DP-LinUCB (d = 5, K = 10 arms,
  Shariff–Sheffet environment) for ``batch_size`` 1 and 64, fast and secure alternated. The
  configuration has no ``noise_backend`` field for DP-LinUCB yet (config.py belongs to another
  change); the bench injects it through the policy build's overrides.

Usage: python bench/bench_secure_noise.py [--events N] [--repeats N] [--only per_release|...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

import bench_service as bs  # noqa: E402

from streaming_dpbandit.estimators.batch_means import DoublingBatchMeans  # noqa: E402
from streaming_dpbandit.privacy.gaussian import GaussianMechanism  # noqa: E402
from streaming_dpbandit.privacy.laplace import LaplaceMechanism  # noqa: E402
from streaming_dpbandit.privacy.noise import NoiseSource  # noqa: E402
from streaming_dpbandit.privacy.peeling import Peeling  # noqa: E402
from streaming_dpbandit.stream.gc_tuning import service_gc  # noqa: E402
from streaming_dpbandit.stream.service import Service  # noqa: E402
from streaming_dpbandit.stream.transport import InProcessTransport  # noqa: E402

BACKENDS = ("fast", "secure")


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_release(repeats: int) -> dict:
    rng = np.random.default_rng(0)
    lap = LaplaceMechanism(epsilon=1.0, sensitivity=1.0)
    gau = GaussianMechanism(sensitivity=1.0, epsilon=1.0, delta=1e-6)
    peel = Peeling(10, 1.0, 1e-6, 0.05)
    v100 = rng.normal(size=100)
    V = rng.normal(size=(1, 100))
    cases = {
        "laplace_d100": lambda g: lap.release(v100, g),
        "gaussian_d100": lambda g: gau.release(v100, g),
        "peeling_d100_s10": lambda g: peel.release_many(V, g),
    }

    def batch_mean(backend, i):
        est = DoublingBatchMeans(1, 0.1)
        est.learn_many(np.zeros((1, 1), dtype=np.int64), np.ones((1, 1)), np.array([1]))
        src = NoiseSource(i, backend=backend)
        return lambda: est.release(src, "bench", i)

    out: dict[str, dict] = {}
    for name, fn in cases.items():
        times = {b: [] for b in BACKENDS}
        for i in range(repeats):
            for b in BACKENDS:  # alternated
                g = NoiseSource(i, backend=b).generator("bench", name, i)
                times[b].append(_time(lambda fn=fn, g=g: fn(g)))
        out[name] = {f"{b}_s": statistics.median(times[b]) for b in BACKENDS}
    times = {b: [] for b in BACKENDS}
    for i in range(repeats):
        for b in BACKENDS:
            times[b].append(_time(batch_mean(b, i)))
    out["matroid_batch_mean"] = {f"{b}_s": statistics.median(times[b]) for b in BACKENDS}
    out.update(per_release_second_part(repeats))
    for v in out.values():
        v["secure_over_fast"] = v["secure_s"] / v["fast_s"]
    return out


def _bound(fn, *args):
    return lambda: fn(*args)


def per_release_second_part(repeats: int) -> dict:
    """The tree, Gram and LDP releases, both backends alternated (medians)."""
    from streaming_dpbandit.ldp.gaussian import GaussianOLSMechanism
    from streaming_dpbandit.ldp.l2_ball import L2BallMechanism
    from streaming_dpbandit.privacy.gram import secure_sym_gauss_release, sym_gauss
    from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
    from streaming_dpbandit.privacy.tree import PaddedTree

    rng = np.random.default_rng(1)
    rows = rng.normal(size=(64, 6))
    rows /= 2 * np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.round(rows * 2**16) / 2**16
    V = np.zeros((11, 11), dtype=object)
    V[np.diag_indices(11)] = 2**32
    ball = L2BallMechanism(1.0, 1.0, 10)
    g10 = rng.normal(size=(1, 10)) / 4
    ols = GaussianOLSMechanism(5, 12.0, 6.0)
    x5 = rng.normal(size=(1, 5)) / 4

    def tree_release(backend, i):
        tree = PaddedTree(
            6,
            1 << 16,
            SymmetricGaussianNoise(6, 11.3),
            NoiseSource(i, backend=backend),
            ("b", "tree", 0),
            2.0,
        )
        tree.insert_many(rows[:63])
        tree.release()  # nodes of the first 63 rows drawn: the timed release draws the node
        tree.insert_many(rows[63:])  # completing at 64 and the pads, as every batch does
        return lambda: tree.release()

    def gram(backend, i):
        g = NoiseSource(i, backend=backend).generator("gram", i)
        if backend == "secure":
            return lambda: secure_sym_gauss_release(V, 3.0, g)
        Vf = np.array(V, dtype=np.float64) / 2**32
        return lambda: Vf + sym_gauss(11, 3.0, g)

    def blt_step(backend, i, warm=200):
        from streaming_dpbandit.policies import DPLinUCB

        pol = DPLinUCB(
            d=5,
            epsilon=1.0,
            delta=1e-6,
            n_cap=1 << 12,
            n_steps=1 << 12,
            tree_impl="blt",
            seed=i,
            noise_backend=backend,
        )
        agg = pol._state()._agg.aggregator
        for _ in range(warm):  # warm steps of one row each: the timed step is step warm + 1
            agg.insert_many(rows[:1, :6])
            agg.release()
        agg.insert_many(rows[:1, :6])
        return lambda: agg.release()

    cases = {
        "dp_linucb_blt_step_d5_after_200": blt_step,
        "dp_linucb_tree_release_d5": tree_release,
        "private_lasso_gram_p11": gram,
        "ldp_l2_ball_report_d10": lambda b, i: _bound(
            ball.privatize, g10, NoiseSource(i, backend=b).generator("r", i)
        ),
        "ldp_ols_report_d5": lambda b, i: _bound(
            ols.privatize, x5, np.array([0.5]), NoiseSource(i, backend=b).generator("r", i)
        ),
    }
    out = {}
    for name, make in cases.items():
        times = {b: [] for b in BACKENDS}
        for i in range(repeats):
            for b in BACKENDS:  # alternated
                times[b].append(_time(make(b, i)))
        out[name] = {f"{b}_s": statistics.median(times[b]) for b in BACKENDS}
    return out


def service_dp_linucb(events: int, repeats: int, batch_sizes=(1, 64)) -> dict:
    """contexts/s of serve's loop with DP-LinUCB, fast vs secure alternated (medians)."""
    from streaming_dpbandit.config import CONFIGS

    DPLinUCBConfig = CONFIGS["dp-linucb"]
    from streaming_dpbandit.envs import ShariffSheffetEnv

    orig = DPLinUCBConfig.build
    out = {}
    for bsz in batch_sizes:
        rates = {b: [] for b in BACKENDS}
        for i in range(repeats):
            for b in BACKENDS:

                def build(self, seed=None, _b=b, **o):
                    return orig(self, seed=seed, **{**o, "noise_backend": _b})

                DPLinUCBConfig.build = build
                try:
                    data = bs.settings_data(tempfile.mkdtemp())
                    data["bandits"]["shop"]["policy"] = {
                        "policy": "dp-linucb",
                        "d": 5,
                        "epsilon": 1.0,
                        "delta": 1e-6,
                        "n_cap": 1 << 20,
                        "batch_size": bsz,
                    }
                    settings = bs.ServiceSettings.model_validate(data)
                    env = ShariffSheffetEnv(d=5, gap=0.1)
                    src = bs.SimulatedSource(
                        env, events, "shop", dt=0.001, delay_mean=0.05, seed=i, topics=bs.TOPICS
                    )
                    svc = Service(settings, InProcessTransport(src))
                    svc.open()
                    t0 = time.perf_counter()
                    with service_gc():
                        svc.run()
                    rates[b].append(events / (time.perf_counter() - t0))
                finally:
                    DPLinUCBConfig.build = orig
        ratios = [s / f for f, s in zip(rates["fast"], rates["secure"])]
        out[f"batch_size={bsz}"] = {
            **{f"events_per_s[{b}]": statistics.median(rates[b]) for b in BACKENDS},
            "secure_over_fast_per_pair": ratios,
            "secure_over_fast_median": statistics.median(ratios),
        }
    return {"events": events, "d": 5, **out}


class _RefitTimer:
    """Adds up the wall time of FLIPHAT's private releases (its refits) during a run."""

    def __init__(self):
        self.total = 0.0
        self.count = 0

    def __enter__(self):
        from streaming_dpbandit.policies.fliphat import FLIPHAT

        self._cls, self._orig = FLIPHAT, FLIPHAT.refit
        timer = self

        def refit(pol, *a, **kw):
            t0 = time.perf_counter()
            try:
                return timer._orig(pol, *a, **kw)
            finally:
                timer.total += time.perf_counter() - t0
                timer.count += 1

        FLIPHAT.refit = refit
        return self

    def __exit__(self, *exc):
        self._cls.refit = self._orig


def service(events: int, repeats: int) -> dict:
    rates = {b: [] for b in BACKENDS}
    refit_s = {b: [] for b in BACKENDS}
    for _ in range(repeats):
        for b in BACKENDS:  # alternated in one run
            data = bs.settings_data(tempfile.mkdtemp())
            data["bandits"]["shop"]["policy"]["noise_backend"] = b
            settings = bs.ServiceSettings.model_validate(data)
            svc = Service(settings, InProcessTransport(bs.simulated(events, 4)))
            svc.open()
            t0 = time.perf_counter()
            with service_gc(), _RefitTimer() as timer:
                svc.run()
            rates[b].append(events / (time.perf_counter() - t0))
            refit_s[b].append(timer.total)
    ratios = [s / f for f, s in zip(rates["fast"], rates["secure"])]
    return {
        "events": events,
        "d": bs.D,
        "K": bs.K,
        **{f"events_per_s[{b}]": statistics.median(rates[b]) for b in BACKENDS},
        "secure_over_fast_per_pair": ratios,
        "secure_over_fast_median": statistics.median(ratios),
        **{f"refit_seconds_per_run[{b}]": refit_s[b] for b in BACKENDS},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", choices=["per_release", "service", "service_dp_linucb"])
    ap.add_argument("--linucb-events", type=int, default=4_000)
    args = ap.parse_args(argv)
    parts = {
        "per_release": lambda: per_release(args.repeats),
        "service": lambda: service(args.events, 3),
        "service_dp_linucb": lambda: service_dp_linucb(args.linucb_events, 3),
    }
    out = {k: fn() for k, fn in parts.items() if args.only in (None, k)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
