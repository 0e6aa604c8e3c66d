"""Secure vs fast noise backend (issue 22 §1). Prints one JSON document.

* ``per_release``: seconds per release of each migrated mechanism — a Laplace vector release,
  a Gaussian vector release, one Peeling release (FLIPHAT's per-iteration release at d = 100,
  s = 10), one DP-matroid batch mean — on both backends, alternated ``--repeats`` times
  (medians).
* ``service``: contexts/s of ``dpbandit serve``'s loop over the in-process transport with the
  simulated FLIPHAT stream of ``bench_service.py`` (d = 100, K = 3, doubling episodes from
  1,024 rounds), backend fast and secure alternated ``--repeats`` times (medians and the
  per-pair ratios), and the wall time spent in FLIPHAT's private releases (refits) per run.

Usage: python bench/bench_secure_noise.py [--events N] [--repeats N]
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
    for v in out.values():
        v["secure_over_fast"] = v["secure_s"] / v["fast_s"]
    return out


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
    args = ap.parse_args(argv)
    out = {"per_release": per_release(args.repeats), "service": service(args.events, 3)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
