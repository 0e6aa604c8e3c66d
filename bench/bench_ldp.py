"""LDP-GLB benchmarks (issue 7). Prints one JSON document.

* ``client``: the device side with the SDK — report size (JSON and float32/base64 payloads) and
  the time to decide + build a report (privatise) and to encode it, for d = 20 and d = 100
  (single-parameter SGD and OLS, K = 10; multi-parameter SGD, K = 3). Target: a report in under
  1 ms at d = 100.
* ``server``: reports per second of the server model alone (decoded payloads, in order) and of
  the whole ``privacy: local`` service loop over the in-process transport (a pre-recorded report
  stream: JSON parsing, validation, absorption, a published version every 1000 reports, ledger
  appends), for LDP-SGD and LDP-OLS at d = 20 and 100. Target: ≥ 20,000 reports/s for LDP-SGD at
  d = 100.

BLAS is pinned to one thread (set before numpy is imported): the matrices are small and the
machine is shared. Usage: python bench/bench_ldp.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from streaming_dpbandit.estimators.ldp_server import LDPServer  # noqa: E402
from streaming_dpbandit.ldp import LDPClient, ModelSnapshot, ModelSpec, build_payloads  # noqa: E402
from streaming_dpbandit.settings import ServiceSettings  # noqa: E402
from streaming_dpbandit.stream.service import Service  # noqa: E402
from streaming_dpbandit.stream.transport import InProcessTransport, Source  # noqa: E402

BANDIT = "shop"


def _quantiles(ts: list[float]) -> dict:
    a = np.asarray(ts) * 1e6
    return {
        "p50_us": float(np.median(a)),
        "p99_us": float(np.quantile(a, 0.99)),
        "mean_us": float(a.mean()),
    }


def client_bench(n: int) -> list[dict]:
    out = []
    rng = np.random.default_rng(0)
    cases = [
        ("sgd", "single", 10, {}),
        ("ols", "single", 10, {"delta": 0.01}),
        ("sgd", "multi", 3, {}),
    ]
    for d in (20, 100):
        for variant, setting, K, extra in cases:
            spec = ModelSpec(variant=variant, setting=setting, d=d, K=K, epsilon=1.0, **extra)
            theta = rng.normal(size=d if setting == "single" else (K, d)) * 0.1
            snap = ModelSnapshot(BANDIT, "shop-bench", 7, spec, theta)
            client = LDPClient(snap, max_epsilon=1.0, max_delta=0.01)
            X = rng.normal(size=(n, K, d))
            t_build, t_json, t_f32 = [], [], []
            sizes = {}
            for i in range(n):
                t0 = time.perf_counter()
                ch = client.decide(X[i] if setting == "single" else X[i, 0])
                rep = client.report(ch, float(rng.normal()))
                t1 = time.perf_counter()
                js = rep.to_json("json")
                t2 = time.perf_counter()
                f32 = rep.to_json("f32")
                t3 = time.perf_counter()
                t_build.append(t1 - t0)
                t_json.append(t2 - t1)
                t_f32.append(t3 - t2)
                sizes = {"json_bytes": len(js), "f32_bytes": len(f32)}
            out.append(
                {
                    "variant": variant,
                    "setting": setting,
                    "d": d,
                    "K": K,
                    "payload_floats": spec.payload_size("main"),
                    **sizes,
                    "decide_and_privatise": _quantiles(t_build),
                    "encode_json": _quantiles(t_json),
                    "encode_f32": _quantiles(t_f32),
                    "report_total_json_p50_us": float(np.median(np.add(t_build, t_json)) * 1e6),
                    "report_total_f32_p50_us": float(np.median(np.add(t_build, t_f32)) * 1e6),
                }
            )
    return out


def _spec(variant: str, d: int) -> ModelSpec:
    return ModelSpec(
        variant=variant,
        setting="single",
        d=d,
        K=10,
        epsilon=1.0,
        delta=0.01 if variant == "ols" else 0.0,
    )


def estimator_bench(variant: str, d: int, n: int) -> dict:
    spec = _spec(variant, d)
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    P = build_payloads(spec, "main", np.zeros(d), None, X, rng.uniform(-1, 1, n), rng)
    srv = LDPServer(spec)
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(0, n, 1000):  # a version every 1000 reports, as in the service
        srv.absorb(P[i : i + 1000], "main")
        srv.publish()
    el, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "variant": variant,
        "d": d,
        "reports": n,
        "seconds": el,
        "cpu_seconds": cpu,
        "reports_per_s": n / el,
        "reports_per_cpu_s": n / cpu,
    }


class Preloaded(Source):
    """Replays records already in memory (generation is not timed)."""

    def __init__(self, records: list, topics: tuple[str, str]):
        self.records = records
        self.topics = topics
        self._i = 0

    def generate(self, emit, max_new: int) -> bool:
        end = min(len(self.records), self._i + max_new)
        for topic, key, value in self.records[self._i : end]:
            emit(topic, key, value)
        self._i = end
        return self._i < len(self.records)


def service_bench(variant: str, d: int, n: int, encoding: str) -> dict:
    rng = np.random.default_rng(2)
    tmp = Path(tempfile.mkdtemp(prefix="ldp-bench-"))
    bandit = {
        "privacy": "local",
        "seed": 1,
        "local": {"max_staleness": n},  # every report is computed against version 0
        "policy": {
            "policy": "ldp-glb",
            "d": d,
            "n_arms": 10,
            "variant": variant,
            "epsilon": 1.0,
            "delta": 0.01,
            "refresh_every": 1000,
        },
    }
    settings = ServiceSettings.model_validate(
        {
            "mode": "service",
            "bandits": {BANDIT: bandit},
            "snapshots": {"directory": str(tmp / "state"), "interval_s": 3600},
            "metrics": {"enabled": False},
            "model_server": {"enabled": False},
            "progress": False,
            "max_batch": 2048,
        }
    )
    topics = ("dpbandit.contexts", "dpbandit.feedback")
    records: list = []
    svc = Service(settings, InProcessTransport(Preloaded(records, topics)))
    svc.open()  # publishes version 0: the devices' model
    client = LDPClient(svc.local.runtimes[BANDIT].current(), max_epsilon=1.0, max_delta=0.01)
    X = rng.normal(size=(n, 10, d))
    for i in range(n):
        rep = client.report(client.decide(X[i]), float(rng.uniform(-1, 1)))
        records.append((topics[1], BANDIT.encode(), rep.to_json(encoding)))
    t0, c0 = time.perf_counter(), time.process_time()
    svc.run()
    el, cpu = time.perf_counter() - t0, time.process_time() - c0
    shutil.rmtree(tmp, ignore_errors=True)  # state, ledger: not needed after the run
    rt_ = svc.local.runtimes[BANDIT]
    return {
        "variant": variant,
        "d": d,
        "encoding": encoding,
        "reports": rt_.server.reports,
        "bytes_per_report": len(records[0][2]),
        "seconds": el,
        "cpu_seconds": cpu,
        "reports_per_s": rt_.server.reports / el,
        "reports_per_cpu_s": rt_.server.reports / cpu,
        "versions": rt_.server.version,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    nc = 300 if args.quick else 2000
    out = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "numpy": np.__version__,
        },
        "client": client_bench(nc),
        "server_model": [],
        "service_loop": [],
    }
    for variant, n_est, n_svc in (("sgd", 100_000, 40_000), ("ols", 40_000, 10_000)):
        for d in (20, 100):
            if args.quick:
                n_est, n_svc = n_est // 10, n_svc // 10
            out["server_model"].append(estimator_bench(variant, d, n_est))
            encs = ("json", "f32") if variant == "sgd" else ("f32",)
            for enc in encs:
                out["service_loop"].append(service_bench(variant, d, n_svc, enc))
    out["targets"] = {
        "client_report_under_1ms_d100": all(
            c["report_total_f32_p50_us"] < 1000
            for c in out["client"]
            if c["d"] == 100 and c["variant"] == "sgd"
        ),
        "server_sgd_d100_at_least_20k_per_cpu_s": min(
            s["reports_per_cpu_s"]
            for s in out["service_loop"]
            if s["variant"] == "sgd" and s["d"] == 100
        )
        >= 20_000,
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
