"""The HTTP gateway's benchmarks (issue 36; docs/gateway.md). Prints one JSON document.

1. ``cpu`` — the gateway's own CPU per Rank: featurise the request's feature objects (50
   actions of 4 features, 10 context features in 3 namespaces; parsed from JSON per request)
   into d = 100 as the gateway does (``memo=True``: an equal catalogue's flattening reused)
   and decide from a released FLIPHAT model (``Gateway.decide``: ``rank_frozen`` and the
   ranking), in process, CPU time (``time.process_time``), median and best of the repeats;
   beside it, featurising a catalogue that changes with every request (no reuse).
2. ``http`` — a real ``dpbandit gateway`` process (embedded learner, FLIPHAT d = 100, a model
   released during a warm-up of Rank + Reward) and a load generator in this process: asyncio,
   raw HTTP/1.1 on keep-alive connections over loopback, every loop bounded in count and time.
   * *open loop at 500 requests/s*: request i is due at t0 + i/500; latency is from its due
     time to its complete response (a late send counts its wait: no coordinated omission);
   * *maximum sustained rate*: closed loop, ``connections`` connections each sending its next
     Rank as soon as the previous is answered, for ``duration`` seconds.
   For each: p50 / p99 / max latency, achieved rate, the gateway's CPU per request (from
   ``/proc``), the generator's CPU.
   ``http_kafka`` (needs ``DPBANDIT_BENCH_KAFKA``): the same with the learner service over
   Kafka (``dpbandit serve``, broadcast learner) and the gateway's producer on confluent-kafka.
3. ``kafka`` (needs ``DPBANDIT_BENCH_KAFKA=HOST:PORT``) — the Kafka path measured the same way:
   ``dpbandit serve`` (single service, the same FLIPHAT bandit, 50 arms of d = 100 sent as binary
   ``raw-f64`` contexts), contexts produced at 500/s (open loop, kafka-python, linger 0), decisions
   consumed; latency from the context's due time to its decision's arrival.

The machine's load average is recorded with every figure (a shared 2-core machine).

Usage: python bench/bench_gateway.py [--only cpu,http,http_kafka,kafka] [--quick]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import asyncio
import json
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
K, D = 50, 100


# -- the requests ------------------------------------------------------------------------------
def context_features(i: int) -> list[dict]:
    return [
        {"user": {"tier": ("gold", "silver", "bronze")[i % 3], "age": 20 + i % 50,
                  "country": ("fr", "de", "us", "jp")[i % 4], "device": "mobile"}},
        {"env": {"hour": i % 24, "weekday": ("mon", "tue", "wed")[i % 3], "weather": "sunny"}},
        {"referrer": "search", "returning": bool(i % 2), "visits": i % 9},
    ]  # fmt: skip


def actions() -> list[dict]:
    return [
        {"id": f"item-{k}",
         "features": [{"type": f"t{k % 7}", "price": float(k), "brand": f"b{k % 13}",
                       "fresh": k % 2 == 0}]}
        for k in range(K)
    ]  # fmt: skip


def rank_body(i: int, prefix: str = "ev") -> bytes:
    return json.dumps(
        {"contextFeatures": context_features(i), "actions": actions(), "eventId": f"{prefix}-{i}"}
    ).encode()


def released_fliphat():
    from streaming_dpbandit.policies import FLIPHAT

    rng = np.random.default_rng(0)
    pol = FLIPHAT(d=D, s=10, epsilon=1.0, delta=1e-6, seed=0, bandit_id="bench")
    idx = rng.choice(D, 10, replace=False)
    return pol.load_released_model(
        {"model_version": 3, "release_ids": ["bench/fliphat/fit/episode=3"],
         "payload": {"indices": idx.tolist(), "values": rng.normal(size=10).tolist()}}
    )  # fmt: skip


def _stats(xs: list[float]) -> dict:
    return {"median": round(statistics.median(xs), 1), "best": round(min(xs), 1)}


# -- 1. CPU per Rank -----------------------------------------------------------------------------
def bench_cpu(quick: bool) -> dict:
    from streaming_dpbandit.features import FeatureHasher
    from streaming_dpbandit.gateway.core import Gateway

    hasher = FeatureHasher(D)
    gw = Gateway.__new__(Gateway)  # only its decide(): the model holder is all it reads

    class Holder:
        policy = released_fliphat()

    gw.models = Holder()
    # each request parsed afresh (equal catalogues, distinct objects), as the gateway gets them
    bodies = [json.loads(rank_body(i)) for i in range(64)]
    reqs = [(b["contextFeatures"], [a["features"] for a in b["actions"]]) for b in bodies]
    # the same with a catalogue that changes with every request (the reuse never applies)
    changing = [
        (c, [[{**f[0], "price": f[0]["price"] + i}] for f in a]) for i, (c, a) in enumerate(reqs)
    ]
    X0 = hasher.transform(*reqs[0])
    n = 500 if quick else 2000
    repeats = 5 if quick else 9

    def featurise() -> None:
        for i in range(n):
            hasher.transform(*reqs[i & 63], memo=True)

    def featurise_changing_catalogue() -> None:
        for i in range(n):
            hasher.transform(*changing[i & 63], memo=True)

    def decide() -> None:
        for i in range(n):
            gw.decide(X0, f"e{i}", None)

    def both() -> None:
        for i in range(n):
            ctx, acts = reqs[i & 63]
            gw.decide(hasher.transform(ctx, acts, memo=True), f"e{i}", None)

    out: dict = {"load_average_at_start": os.getloadavg(), "requests_per_sample": n}
    parts = {
        "featurise": featurise,
        "featurise_changing_catalogue": featurise_changing_catalogue,
        "decide": decide,
        "featurise_and_decide": both,
    }
    samples: dict[str, list[float]] = {k: [] for k in parts}
    names = list(parts)
    for r in range(repeats):  # the parts interleaved, the order reversed every other repeat
        for name in names if r % 2 == 0 else names[::-1]:
            c0 = time.process_time()
            parts[name]()
            samples[name].append((time.process_time() - c0) / n * 1e6)
    for name in names:
        out[f"{name}_us"] = _stats(samples[name])
    out["target_us"] = 100
    out["load_average_at_end"] = os.getloadavg()
    return out


# -- 2. the HTTP gateway ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Conn:
    """One keep-alive HTTP/1.1 connection (asyncio streams)."""

    def __init__(self, port: int):
        self.port = port

    async def open(self) -> Conn:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length) if length else b""
        return status, data

    def close(self) -> None:
        self.writer.close()


async def open_loop(port: int, rate: float, n: int, conns: int, prefix: str) -> dict:
    """n Ranks due at rate/s; latency from due time to response; at most ``conns`` in flight."""
    pool = [await Conn(port).open() for _ in range(conns)]
    bodies = [rank_body(i, prefix) for i in range(n)]
    lat: list[float] = []
    errors = 0
    nxt = 0
    t0 = time.perf_counter() + 0.05
    deadline = t0 + n / rate + 30.0  # bounded in time as well as in count

    async def worker(c: Conn) -> None:
        nonlocal nxt, errors
        while nxt < n and time.perf_counter() < deadline:
            i = nxt
            nxt += 1
            due = t0 + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            status, _ = await c.post("/personalizer/v1.0/rank", bodies[i])
            if status != 201:
                errors += 1
            lat.append(time.perf_counter() - due)

    c0 = time.process_time()
    await asyncio.gather(*(worker(c) for c in pool))
    elapsed = time.perf_counter() - t0
    for c in pool:
        c.close()
    return _latency(lat, elapsed, errors, time.process_time() - c0)


async def closed_loop(port: int, duration: float, conns: int, prefix: str) -> dict:
    pool = [await Conn(port).open() for _ in range(conns)]
    lat: list[float] = []
    errors = 0
    counter = 0
    bodies = [rank_body(i, prefix) for i in range(64)]
    t0 = time.perf_counter()
    end = t0 + duration

    async def worker(c: Conn, w: int) -> None:
        nonlocal counter, errors
        while time.perf_counter() < end:
            counter += 1
            body = bodies[counter & 63].replace(b'"eventId": "', f'"eventId": "{counter}-'.encode())
            s = time.perf_counter()
            status, _ = await c.post("/personalizer/v1.0/rank", body)
            if status != 201:
                errors += 1
            lat.append(time.perf_counter() - s)

    c0 = time.process_time()
    await asyncio.gather(*(worker(c, w) for w, c in enumerate(pool)))
    elapsed = time.perf_counter() - t0
    for c in pool:
        c.close()
    return _latency(lat, elapsed, errors, time.process_time() - c0)


def _latency(lat: list[float], elapsed: float, errors: int, gen_cpu: float) -> dict:
    a = np.sort(np.asarray(lat)) * 1e3
    return {
        "requests": len(lat),
        "errors": errors,
        "achieved_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": round(float(np.percentile(a, 50)), 2),
        "p99_ms": round(float(np.percentile(a, 99)), 2),
        "max_ms": round(float(a[-1]), 2),
        "generator_cpu_s": round(gen_cpu, 2),
    }


def gateway_config(directory: Path, port: int) -> dict:
    return {
        "bandits": {
            "bench": {
                "policy": {"policy": "fliphat", "d": D, "s": 10, "epsilon": 1.0, "delta": 1e-6,
                           "first_episode_len": 200, "noise_backend": "fast"},
                "feedback_window": 30.0, "on_expiry": "default", "reward_bounds": [0.0, 1.0],
                "seed": 0, "features": {},
            }
        },
        "snapshots": {"directory": str(directory / "state"), "interval_s": 5.0},
        "gateway": {"port": port, "max_buffered": 1_000_000},
        "log_level": "INFO",
    }  # fmt: skip


def _kafka_section(bootstrap: str, name: str, client: str) -> dict:
    topics = {"contexts": f"{name}.contexts", "feedback": f"{name}.feedback",
              "decisions": f"{name}.decisions", "dead_letter": f"{name}.dead",
              "models": f"{name}.models"}  # fmt: skip
    return {"bootstrap_servers": bootstrap, "client": client, "group_id": name,
            "topics": topics, "partitions": 1}  # fmt: skip


def _start(d: Path, name: str, command: str, config: dict) -> subprocess.Popen:
    (d / f"{name}.yaml").write_text(yaml.safe_dump(config))
    log = open(d / f"{name}.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "streaming_dpbandit.cli", command, "--config",
         str(d / f"{name}.yaml")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def bench_http(quick: bool, bootstrap: str | None = None) -> dict:
    """The gateway over HTTP: its learner in-process (``bootstrap`` None), or the learner
    service over Kafka (the gateway's producer on confluent-kafka)."""
    import httpx

    d = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    port = free_port()
    cfg = gateway_config(d, port)
    learner = None
    if bootstrap is not None:
        name = f"benchgw-http-{os.getpid()}"
        kafka = _kafka_section(bootstrap, name, "confluent-kafka")
        learner = _start(d, "learner", "serve", {
            "kafka": {**kafka, "client": "kafka-python"},
            "broadcast": {"role": "learner", "models_topic": kafka["topics"]["models"]},
            "bandits": cfg["bandits"], "metrics": {"enabled": False},
            "snapshots": {"directory": str(d / "learner"), "interval_s": 5.0},
        })  # fmt: skip
        cfg["kafka"] = kafka
    proc = _start(d, "gateway", "gateway", cfg)
    out: dict = {
        "learner": "in-process" if bootstrap is None else "learner service over Kafka",
        "load_average_at_start": os.getloadavg(),
    }
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        for _ in range(600):
            try:
                if client.get("/livez").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        # warm-up: 200 Ranks with rewards, until the learner's first release is in use
        for i in range(200):
            r = client.post("/personalizer/v1.0/rank", content=rank_body(i, "warm"),
                            headers={"content-type": "application/json"})  # fmt: skip
            client.post(f"/personalizer/v1.0/events/warm-{i}/reward", json={"value": i % 2})
        deadline = time.monotonic() + 60
        version, probe = "0", 0
        while version == "0" and time.monotonic() < deadline:  # a new event id every probe
            probe += 1
            r = client.post("/personalizer/v1.0/rank", content=rank_body(probe, "probe"),
                            headers={"content-type": "application/json"})  # fmt: skip
            version = r.headers.get("x-dpbandit-model-version", "0")
            if version == "0":
                time.sleep(0.2)
        out["model_version"] = int(version)
        client.close()
        n = 2500 if quick else 10_000
        runs = []
        for rep in range(1 if quick else 2):
            c0 = cpu_seconds(proc.pid)
            res = asyncio.run(open_loop(port, 500.0, n, 16, f"o{rep}"))
            res["gateway_cpu_us_per_request"] = round((cpu_seconds(proc.pid) - c0) / n * 1e6, 1)
            res["load_average"] = os.getloadavg()
            runs.append(res)
        out["open_loop_500_per_s"] = runs
        dur = 5.0 if quick else 15.0
        sustained = []
        for conns in (4, 16):
            c0 = cpu_seconds(proc.pid)
            res = asyncio.run(closed_loop(port, dur, conns, f"c{conns}"))
            res["connections"] = conns
            res["gateway_cpu_us_per_request"] = round(
                (cpu_seconds(proc.pid) - c0) / max(res["requests"], 1) * 1e6, 1
            )
            res["load_average"] = os.getloadavg()
            sustained.append(res)
        out["closed_loop_max_rate"] = sustained
    finally:
        for p in (proc, learner):
            if p is None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    out["load_average_at_end"] = os.getloadavg()
    out["target_p99_ms_at_500_per_s"] = 10
    return out


# -- 3. the Kafka path ----------------------------------------------------------------------------
def bench_kafka(quick: bool, bootstrap: str) -> dict:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from streaming_dpbandit.stream.messages import context_value

    d = Path(tempfile.mkdtemp(prefix="bench-kafka-path-"))
    name = f"benchgw-{os.getpid()}"
    topics = {"contexts": f"{name}.contexts", "feedback": f"{name}.feedback",
              "decisions": f"{name}.decisions", "dead_letter": f"{name}.dead"}  # fmt: skip
    cfg = gateway_config(d, 0)
    del cfg["gateway"]
    cfg["bandits"]["bench"].pop("features")
    # no release during the run: the service decides every context with its initial model
    # (a release would wait for rewards, which this open loop does not send)
    cfg["bandits"]["bench"]["policy"]["first_episode_len"] = 10**9
    cfg.update(kafka={"bootstrap_servers": bootstrap, "group_id": name, "topics": topics,
                      "partitions": 1, "linger_ms": 0, "poll_timeout_ms": 5},
               metrics={"enabled": False}, progress=False)  # fmt: skip
    (d / "serve.yaml").write_text(yaml.safe_dump(cfg))
    log = open(d / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config",
         str(d / "serve.yaml")],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out: dict = {"load_average_at_start": os.getloadavg(), "encoding": "raw-f64"}
    try:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(K, D)) / 10
        ids = [f"item-{k}" for k in range(K)]
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                 fetch_max_wait_ms=5)  # fmt: skip
        while not consumer.partitions_for_topic(topics["decisions"]):
            time.sleep(0.2)
        tp = TopicPartition(topics["decisions"], 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        # warm-up: the service joins its group and decides a first burst
        for i in range(100):
            producer.send(
                topics["contexts"],
                key=b"bench",
                value=context_value(f"w{i}", "bench", time.time(), X, ids, "raw-f64"),
            )
        producer.flush()
        seen = 0
        deadline = time.monotonic() + 120
        while seen < 100 and time.monotonic() < deadline:
            seen += sum(len(v) for v in consumer.poll(timeout_ms=200).values())
        out["message_bytes"] = len(context_value("e", "bench", 0.0, X, ids, "raw-f64"))
        n, rate = (2500 if quick else 10_000), 500.0
        due: dict[str, float] = {}
        lat: list[float] = []
        c0 = cpu_seconds(proc.pid)
        t0 = time.perf_counter() + 0.05
        sent = 0
        end = t0 + n / rate + 30.0
        while (len(lat) < n) and time.perf_counter() < end:
            now = time.perf_counter()
            while sent < n and t0 + sent / rate <= now:
                eid = f"k{sent}"
                due[eid] = t0 + sent / rate
                producer.send(
                    topics["contexts"],
                    key=b"bench",
                    value=context_value(eid, "bench", time.time(), X, ids, "raw-f64"),
                )
                sent += 1
            for msgs in consumer.poll(timeout_ms=1).values():
                t = time.perf_counter()
                for m in msgs:
                    eid = json.loads(m.value)["event_id"]
                    if eid in due:
                        lat.append(t - due.pop(eid))
        elapsed = time.perf_counter() - t0
        res = _latency(lat, elapsed, n - len(lat), 0.0)
        res.pop("generator_cpu_s")
        res["service_cpu_us_per_context"] = round((cpu_seconds(proc.pid) - c0) / n * 1e6, 1)
        res["load_average"] = os.getloadavg()
        out["open_loop_500_per_s"] = res
        producer.close()
        consumer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    out["load_average_at_end"] = os.getloadavg()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="cpu,http,http_kafka,kafka")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    only = set(args.only.split(","))
    result: dict = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "nice": os.nice(0),  # (the bench's priority; the gateway and services inherit it)
            "load_average_at_start": os.getloadavg(),
        },
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if "cpu" in only:
        result["cpu_per_rank"] = bench_cpu(args.quick)
        print(json.dumps(result["cpu_per_rank"]), file=sys.stderr, flush=True)
    if "http" in only:
        result["http"] = bench_http(args.quick)
        print(json.dumps(result["http"]), file=sys.stderr, flush=True)
    if "http_kafka" in only:
        bootstrap = os.environ.get("DPBANDIT_BENCH_KAFKA")
        if bootstrap:
            result["http_kafka"] = bench_http(args.quick, bootstrap)
            print(json.dumps(result["http_kafka"]), file=sys.stderr, flush=True)
        else:
            result["http_kafka"] = {"skipped": "set DPBANDIT_BENCH_KAFKA=HOST:PORT"}
    if "kafka" in only:
        bootstrap = os.environ.get("DPBANDIT_BENCH_KAFKA")
        if bootstrap:
            result["kafka_path"] = bench_kafka(args.quick, bootstrap)
        else:
            result["kafka_path"] = {"skipped": "set DPBANDIT_BENCH_KAFKA=HOST:PORT"}
    result["machine"]["load_average_at_end"] = os.getloadavg()
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
