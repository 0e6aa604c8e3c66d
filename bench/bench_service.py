"""Service benchmarks (issue 3). Prints one JSON document.

Every measure runs for each feature encoding of the context events (docs/events.md), on the
same recorded stream: JSON number lists (``json``), base64 float64 inside the JSON (``f64``),
and the compact binary context message with raw float64 or float32 features (``raw-f64``,
``raw-f32``; ``--encodings`` picks some).

* ``inprocess``: contexts/s of the service loop over the in-process transport, replaying a
  recorded stream held in memory (best of 3), and end to end with the simulated source.
* ``kafka``: contexts/s through a real broker next to the ceiling — a bare kafka-python
  consume→produce loop on the same topics and message sizes with the service's client
  settings — alternated ``--repeats`` times on the same topics (medians and per-pair ratios)
  while catching up on a full topic, with each run's process CPU time per context: the
  service's own cost is its CPU per context minus the bare loop's, pair by pair; then (JSON
  encodings, unless ``--skip-latency``) the service live, fed by ``dpbandit loadgen`` on
  the same machine with ``kafka.max_poll_records`` 20: the highest rate of a ramp it sustains,
  and decision latency p50/p99 (its own histogram) at half of that rate (``--live-only RATES``
  runs only this part); and end-to-end latency through the bench's own clients at that rate.
* ``kafka_clients``: the two clients of ``kafka.client`` side by side on the same topics —
  kafka-python's and librdkafka's (confluent-kafka) bare consume→produce ceilings and the
  service catching up with each, alternated ``--repeats`` times (medians), then the service
  live at ``--clients-live-rate`` contexts/s with each client (its decision latency histogram);
  ``--clients-only`` runs only this part.
* ``memory``: resident memory (RSS) over 10⁶ events at d = 100 with delayed and missing rewards
  and 1% malformed messages (the dead-letter path), in a fresh process.
* ``floor``: bytes per context, and the per-context cost of only reading a context event
  (decode, validation, features to numpy), which no service design avoids; with ``kafka``,
  the time per context the service may spend beside the ceiling's own Kafka work and still
  reach 0.8× of it.

The service runs as ``dpbandit serve`` runs it (``service_gc``).

* ``versions`` (``--old-tree DIR``, alone): the service loop's CPU per context in process,
  this tree against another checkout, alternated, replaying the recorded stream in its
  recorded order and with the feedback read far ahead of the contexts (as a Kafka catch-up
  reads it: most rewards held until their context is decided).

Usage: python bench/bench_service.py [--quick] [--kafka HOST:PORT] [--skip-kafka] [--skip-memory]
       [--skip-latency] [--skip-clients] [--encodings E,...] [--repeats N]
       [--latency-max-poll-records N] [--live-only RATES] [--live-encoding E] [--clients-only]
       [--clients-live-rate R] [--old-tree DIR [--versions-rounds N]]
(without --kafka a broker is started with scripts/kafka.sh).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # dpbandit_testing, the helpers beside the package

from dpbandit_testing.stream_helpers import kafka_topics  # noqa: E402
from streaming_dpbandit.envs import FliphatPaperEnv  # noqa: E402
from streaming_dpbandit.settings import ServiceSettings  # noqa: E402
from streaming_dpbandit.stream.binary_context import (  # noqa: E402
    BINARY_ENCODINGS,
    MAGIC,
    decode_binary_context,
)
from streaming_dpbandit.stream.gc_tuning import service_gc  # noqa: E402
from streaming_dpbandit.stream.messages import FEATURE_ENCODINGS  # noqa: E402
from streaming_dpbandit.stream.service import Service  # noqa: E402
from streaming_dpbandit.stream.sim.sources import (  # noqa: E402
    RecordingSource,
    SimulatedSource,
    Source,
)
from streaming_dpbandit.stream.transport import InProcessTransport  # noqa: E402

D, K = 100, 3
TOPICS = ("dpbandit.contexts", "dpbandit.feedback")
#: What each encoding of the JSON output is (issue 32: ``f64`` was once reported as binary)
ENCODING_LABELS = {
    "json": "JSON number lists",
    "f64": "JSON with base64 float64 features (not binary)",
    "raw-f64": "binary context message, float64 features",
    "raw-f32": "binary context message, float32 features",
}
T = TypeVar("T")


def settings_data(state_dir, **over) -> dict:
    data = {
        "mode": "service",
        "bandits": {
            "shop": {
                "policy": {
                    "policy": "fliphat",
                    "d": D,
                    "s": 10,
                    "epsilon": 1.0,
                    "delta": 1e-6,
                    "b_max": 3.4,
                    "first_episode_len": 1024,
                    "swap_delay": 1000,
                },
                "feedback_window": 2.0,
                "seed": 1,
            }
        },
        "snapshots": {"directory": str(state_dir), "interval_s": 30},
        "metrics": {"enabled": False},
        "progress": False,
    }
    data.update(over)
    return data


def settings(state_dir, **over) -> ServiceSettings:
    return ServiceSettings.model_validate(settings_data(state_dir, **over))


def simulated(events: int, seed: int, **kw) -> SimulatedSource:
    """The bench's simulated stream: FLIPHAT's paper environment, 1,000 contexts per second of
    event time, rewards 50 ms later on average."""
    env = FliphatPaperEnv(d=D, K=K)
    return SimulatedSource(
        env, events, "shop", dt=0.001, delay_mean=0.05, seed=seed, topics=TOPICS, **kw
    )


def record(path: Path, events: int, encoding: str = "json") -> None:
    """Record the simulated stream (the same events and decisions for every encoding)."""
    src = simulated(events, 3, feature_encoding=encoding)
    svc = Service(settings(tempfile.mkdtemp()), InProcessTransport(RecordingSource(src, path)))
    svc.open()
    svc.run()


def value_of(rec: dict) -> bytes:
    """The message value of a recorded line (a binary context is recorded as base64)."""
    if "value_b64" in rec:
        return base64.b64decode(rec["value_b64"])
    return rec["value"].encode()


class MemorySource(Source):
    """A recorded stream held in memory, so that a replay times the service, not file reading."""

    def __init__(self, path: Path):
        self.topics = TOPICS
        names = dict(zip(("contexts", "feedback"), TOPICS))
        self.items = []
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            self.items.append((names[rec["topic"]], b"shop", value_of(rec)))
        self._i = 0

    def generate(self, emit, max_new):
        for topic, key, value in self.items[self._i : self._i + max_new]:
            emit(topic, key, value)
        self._i += max_new
        return self._i < len(self.items)


def replay_rate(path: Path, events: int, cpu_out: list | None = None) -> float:
    """Contexts/s of the service loop over the in-process transport (best of 3); appends the
    best CPU time per context (µs) to ``cpu_out``."""
    best, best_cpu = 0.0, float("inf")
    for _ in range(3):
        svc = Service(settings(tempfile.mkdtemp()), InProcessTransport(MemorySource(path)))
        svc.open()
        t0, cpu0 = time.perf_counter(), time.process_time()
        with service_gc():
            svc.run()
        best = max(best, events / (time.perf_counter() - t0))
        best_cpu = min(best_cpu, (time.process_time() - cpu0) / events * 1e6)
    if cpu_out is not None:
        cpu_out.append(best_cpu)
    return best


class AheadSource(MemorySource):
    """The recorded stream with the feedback read ahead of the contexts, as a consumer
    catching up on two full topics reads it (kafka-python fetches the small feedback messages
    far ahead of the large contexts): feedback up to ``lead`` messages ahead, then 400
    contexts, and so on. Most rewards are held until their context is decided."""

    def __init__(self, path: Path, lead: int = 8000):
        super().__init__(path)
        ctx = [x for x in self.items if x[0] == TOPICS[0]]
        fb = [x for x in self.items if x[0] == TOPICS[1]]
        out, i, j = [], 0, 0
        while i < len(ctx) or j < len(fb):
            while j < len(fb) and j < i + lead:
                out.append(fb[j])
                j += 1
            out.extend(ctx[i : i + 400])
            i += 400
        self.items = out


ORDERS = {"recorded": MemorySource, "feedback_ahead": AheadSource}


def replay_cpu_main(path: str, order: str, events: int) -> None:
    """Child of ``--old-tree``: CPU µs per context of two replays (after importing the
    accountant, which the service loads when it starts), as one JSON line."""
    from streaming_dpbandit.privacy.accountant import load_pld

    load_pld()
    out = []
    for _ in range(2):
        svc = Service(settings(tempfile.mkdtemp()), InProcessTransport(ORDERS[order](Path(path))))
        svc.open()
        cpu0 = time.process_time()
        with service_gc():
            svc.run()
        out.append((time.process_time() - cpu0) / events * 1e6)
    print(json.dumps(out))


def alternated(sides: list[str], rounds: int, run: Callable[[str], T]) -> dict[str, list[T]]:
    """``run(side)`` for every side, ``rounds`` times, the order reversed every other round
    (this machine drifts 30 % between runs: old/new, new/old, ...).

    >>> alternated(["old", "new"], 2, lambda s: s.upper())
    {'old': ['OLD', 'OLD'], 'new': ['NEW', 'NEW']}
    """
    out: dict[str, list[T]] = {k: [] for k in sides}
    for i in range(rounds):
        for k in sides if i % 2 == 0 else sides[::-1]:
            out[k].append(run(k))
    return out


def bench_versions(paths: dict[str, Path], events: int, old_tree: Path, rounds: int) -> dict:
    """In-process CPU per context of this tree and ``old_tree`` (the service loop replaying
    the recorded stream, in fresh processes), alternated ``rounds`` times per encoding and
    arrival order; each sample is the better of two replays in its process."""
    trees = {"new": ROOT, "old": old_tree}
    out: dict = {
        "protocol": f"{events} contexts per replay; per encoding and arrival order, {rounds} "
        "rounds alternating the trees (the first tree alternates too), each a fresh process "
        "replaying twice (best of 2, process CPU time ÷ contexts); medians",
        "old_tree": str(old_tree),
        "load_average_at_start": os.getloadavg(),
    }
    for encoding, path in paths.items():
        for order in ORDERS:

            def one(k: str, path=path, order=order) -> float:
                res = subprocess.run(
                    [sys.executable, __file__, "--replay-cpu", str(path), order, str(events)],
                    env={**os.environ, "PYTHONPATH": str(trees[k])},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                return min(json.loads(res.stdout.strip().splitlines()[-1]))

            samples = alternated(list(trees), rounds, one)
            new, old = (float(np.median(samples[k])) for k in ("new", "old"))
            out[f"{encoding}/{order}"] = {
                "new_cpu_us_per_context": samples["new"],
                "old_cpu_us_per_context": samples["old"],
                "median_new": new,
                "median_old": old,
                "old_over_new": old / new,
                "per_round_old_over_new": [o / n for o, n in zip(samples["old"], samples["new"])],
            }
    out["load_average_at_end"] = os.getloadavg()
    return out


def bench_inprocess(paths: dict[str, Path], events: int) -> dict:
    out: dict = {"events": events, "d": D, "K": K}
    for encoding, path in paths.items():
        cpu: list = []
        out[f"replay_events_per_s[{encoding}]"] = replay_rate(path, events, cpu)
        out[f"replay_cpu_us_per_context[{encoding}]"] = cpu[0]
    src = simulated(events, 4)
    t0 = time.perf_counter()
    svc = Service(settings(tempfile.mkdtemp()), InProcessTransport(src))
    svc.open()
    with service_gc():
        svc.run()
    out["simulated_end_to_end_events_per_s[json]"] = events / (time.perf_counter() - t0)
    return out


def bench_floor(paths: dict[str, Path]) -> dict:
    """Bytes per context, and µs per context to decode and validate it and make its feature
    matrix (best of 3 passes over the recorded contexts), for each feature encoding."""
    from streaming_dpbandit.stream.schemas import ContextEvent

    def contexts(path: Path) -> list[bytes]:
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        return [value_of(x) for x in lines if x["topic"] == "contexts"]

    def per_context_us(fn, values) -> float:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for v in values:
                fn(v)
            best = min(best, time.perf_counter() - t0)
        return best / len(values) * 1e6

    def read(v: bytes) -> np.ndarray | None:
        if v.startswith(MAGIC):  # the binary form
            return decode_binary_context(v).arm_features()
        return ContextEvent.model_validate_json(v).arm_features()

    def features(ev) -> np.ndarray:
        return np.array([a["features"] for a in ev["arms"]], dtype=np.float64)

    out = {}
    for encoding, path in paths.items():
        values = contexts(path)
        out[f"context_bytes_mean[{encoding}]"] = float(np.mean([len(v) for v in values]))
        out[f"read_us[{encoding}] (the service's path: decode, validate, features)"] = (
            per_context_us(read, values)
        )
    if "json" not in paths:
        return out
    values = contexts(paths["json"])
    out["stdlib_json_loads_us[json]"] = per_context_us(json.loads, values)
    try:  # not a dependency: the fastest JSON decoder for Python, as a lower bound
        import orjson

        out["orjson_loads_plus_numpy_features_us[json]"] = per_context_us(
            lambda v: features(orjson.loads(v)), values
        )
    except ImportError:
        out["orjson_loads_plus_numpy_features_us[json]"] = None
    return out


# -- Kafka ---------------------------------------------------------------------------------------
def start_broker() -> tuple[str, dict]:
    run_dir = tempfile.mkdtemp(prefix="bench-kafka-")
    env = dict(
        os.environ,
        DPBANDIT_KAFKA_DATA=os.path.join(run_dir, "data"),
        DPBANDIT_KAFKA_RUN_DIR=run_dir,
        DPBANDIT_KAFKA_PORT="auto",
    )
    out = subprocess.run(
        [str(ROOT / "scripts/kafka.sh"), "start"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1], env


def stop_broker(env) -> None:
    subprocess.run([str(ROOT / "scripts/kafka.sh"), "stop"], env=env, capture_output=True)


def create(bootstrap, names, partitions=1):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    admin.close()


def produce(bootstrap, path: Path, topics: dict) -> dict:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=1 << 20)
    counts = {"contexts": 0, "feedback": 0}
    sizes = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        v = value_of(rec)
        if rec["topic"] == "contexts":
            sizes.append(len(v))
        # the recorded stream's clock (record timestamps: the service's stream clock)
        p.send(topics[rec["topic"]], key=b"shop", value=v, timestamp_ms=rec.get("timestamp"))
        counts[rec["topic"]] += 1
    p.flush()
    p.close()
    counts["context_bytes_mean"] = float(np.mean(sizes))
    return counts


def bare_loop(
    bootstrap,
    topics: dict,
    n_contexts: int,
    n_feedback: int,
    decision_bytes: int,
    batch_bytes: int | None = None,
    cpu_out: list | None = None,
) -> float:
    """The ceiling: consume both input topics, produce one output message per context, with
    the service's client settings (fetch size, poll size, its producer options: idempotent,
    acks=all, linger, batch size) — or the producer batch size ``batch_bytes``. Partitions are
    assigned, not joined as a group: the per-record work is the same, and kafka-python 3.0.12
    sometimes stalls in a group join (docs/operations.md). Appends the process's CPU time per
    context (µs: this thread and kafka-python's I/O threads) to ``cpu_out``."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from streaming_dpbandit.settings import KafkaSettings
    from streaming_dpbandit.stream.kafka.options import producer_options
    from streaming_dpbandit.stream.kafka.python_group import wait_for_partitions

    ks = KafkaSettings(bootstrap_servers=bootstrap)
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_poll_records=ks.max_poll_records,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    wait_for_partitions(c, [topics["contexts"], topics["feedback"]])
    parts = [
        TopicPartition(t, q)
        for t in (topics["contexts"], topics["feedback"])
        for q in c.partitions_for_topic(t)
    ]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    opts = producer_options(ks)
    if batch_bytes is not None:
        opts["batch_size"] = batch_bytes
    p = KafkaProducer(**opts)
    payload = b"x" * decision_bytes
    seen = seen_fb = 0
    t0 = None
    # done when every context and every feedback message is read, as the service's measure
    while seen < n_contexts or seen_fb < n_feedback:
        for tp, msgs in c.poll(timeout_ms=100).items():
            if t0 is None:
                t0, cpu0 = time.perf_counter(), time.process_time()
            if tp.topic == topics["contexts"]:
                for m in msgs:
                    p.send(topics["decisions"], key=m.key, value=payload)
                seen += len(msgs)
            else:
                seen_fb += len(msgs)
    p.flush()
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    c.close()
    p.close()
    if cpu_out is not None:
        cpu_out.append(cpu / n_contexts * 1e6)
    return n_contexts / dt


def service_throughput(
    bootstrap,
    topics: dict,
    n_contexts: int,
    n_feedback: int,
    client: str = "kafka-python",
    cpu_out: list | None = None,
) -> float:
    """Contexts/s of the service's loop catching up on the topics with ``client``; appends its
    process's CPU time per context (µs) to ``cpu_out``. The timing window is the bare loop's
    (issue 32): from the first poll that returns records to the outputs flushed after the last
    context and feedback message is processed."""
    from streaming_dpbandit.stream.runner import kafka_transport

    st = settings(
        tempfile.mkdtemp(),
        kafka={
            "bootstrap_servers": bootstrap,
            "client": client,
            "group_id": f"svc-{time.time()}",
            "topics": topics,
            "create_topics": False,
            "max_poll_records": 2000,
            "poll_timeout_ms": 20,
        },
    )
    transport = kafka_transport(st.kafka)
    svc = Service(st, transport)
    svc.open()
    state: dict = {"t0": None}
    poll = transport.poll

    def first_poll(max_records: int, timeout_s: float):
        records = poll(max_records, timeout_s)
        if records and state["t0"] is None:  # the clock starts as the bare loop's does
            state["t0"], state["cpu0"] = time.perf_counter(), time.process_time()
        return records

    transport.poll = first_poll  # type: ignore[method-assign]

    def progress(s):
        rt = s.bandits["shop"]
        fb = sum(o for (t, _), o in s.offsets.items() if t == topics["feedback"])
        if rt.policy.t >= n_contexts and fb >= n_feedback and "t1" not in state:
            s.transport.flush()  # and stops, as the bare loop's, once its outputs are written
            state["t1"], state["cpu1"] = time.perf_counter(), time.process_time()
            s.request_stop()

    with service_gc():  # as dpbandit serve runs it
        svc.run(progress)
    if cpu_out is not None:
        cpu_out.append((state["cpu1"] - state["cpu0"]) / n_contexts * 1e6)
    return n_contexts / (state["t1"] - state["t0"])


def proc_cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system, all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def latency_histogram(port: int) -> dict[float, float]:
    """Cumulative counts of ``dpbandit_decision_latency_seconds`` scraped from /metrics."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "dpbandit_decision_latency_seconds":
            for smp in fam.samples:
                if smp.name.endswith("_bucket"):
                    out[float(smp.labels["le"])] = smp.value
    return out


def histogram_summary(before: dict, after: dict) -> dict:
    """Share of decisions within each bucket bound, and p50/p99 interpolated in the buckets."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    total = counts[-1]
    out = {"decisions": int(total)}
    for b, c in zip(bounds, counts):
        if b <= 0.05:
            out[f"share_within_{b * 1000:g}_ms"] = round(c / total, 5) if total else None
    for q in (0.5, 0.99):
        target, lo, prev = q * total, 0.0, 0.0
        for b, c in zip(bounds, counts):
            if c >= target:
                hi = b if np.isfinite(b) else lo
                frac = (target - prev) / (c - prev) if c > prev else 1.0
                out[f"p{int(q * 100)}_ms_interpolated"] = round((lo + frac * (hi - lo)) * 1000, 3)
                break
            lo, prev = b, c
    return out


def echo_main(bootstrap: str, contexts: str, decisions: str) -> None:
    """The floor of the latency harness: a bare consume→produce echo of each context's id."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from streaming_dpbandit.stream.kafka.python_group import wait_for_partitions

    # assigned, not subscribed: no group join to wait for (the service pays one at start only)
    c = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=1)
    wait_for_partitions(c, [contexts])
    c.assign([TopicPartition(contexts, q) for q in c.partitions_for_topic(contexts)])
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    while True:
        for _, msgs in c.poll(timeout_ms=1, max_records=500).items():
            for m in msgs:
                eid = json.loads(m.value)["event_id"]
                p.send(decisions, key=m.key, value=json.dumps({"event_id": eid}).encode())


class NoDecisions(RuntimeError):
    """The service answered the warm-up but nothing in the timed phase."""


def latency_retrying(bootstrap, topics: dict, tag: str, *args, attempts: int = 3, **kw) -> dict:
    """:func:`latency` on fresh copies of ``topics`` (their names with ``tag`` and the attempt),
    started again when the service's group re-join stalled after its warm-up (kafka-python
    3.0.12, docs/operations.md; the service recovers by itself only after
    ``kafka.rejoin_stall_s``, 60 s, longer than the timed phase). The number of such restarts
    is reported as ``stalled_after_warmup``."""
    for attempt in range(attempts):
        fresh = {k: f"{tag}{attempt}.{v}" for k, v in topics.items()}
        create(bootstrap, fresh.values())
        try:
            out = latency(bootstrap, fresh, *args, **kw)
        except NoDecisions:
            if attempt == attempts - 1:
                raise
            continue
        out["stalled_after_warmup"] = attempt
        return out
    raise AssertionError("unreachable")


def latency(
    bootstrap,
    topics: dict,
    lines: list[str],
    rate: float,
    seconds: float,
    bare: bool = False,
    max_poll_records: int = 20,
) -> dict:
    """Produce contexts at ``rate``/s and time each decision.

    The service runs as its own process (``dpbandit serve``, as in production), so the load
    generator and the timer do not share its interpreter. Each decision is answered at once
    with its reward (a closed loop, like a live application): without rewards, the first
    private release — which waits until every decision of its episode is resolved — would
    block the bandit until the idle timeout. Latency is from just before the context is sent
    to when its decision is read back, so it includes two broker hops and the harness's own
    Kafka clients; ``service_internal`` is the service's own histogram (context received →
    decision handed to the producer) over the timed phase. ``bare=True`` runs the same
    harness against a bare consume→produce echo instead: the floor of the end-to-end figure.
    """
    import yaml
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from streaming_dpbandit.stream.kafka.python_group import wait_for_partitions

    work = Path(tempfile.mkdtemp(prefix="bench-latency-"))
    metrics_port = free_port()
    echo = (
        [sys.executable, __file__, "--echo", bootstrap, topics["contexts"], topics["decisions"]]
        if bare
        else None
    )
    attempt = [0]

    def start() -> subprocess.Popen:
        attempt[0] += 1
        cfg = settings_data(
            work / f"state-{attempt[0]}",
            kafka={
                "bootstrap_servers": bootstrap,
                "group_id": f"lat-{time.time()}",
                "topics": topics,
                "create_topics": False,
                "max_poll_records": max_poll_records,
                "poll_timeout_ms": 1,
                "linger_ms": 0,
            },
            metrics={"enabled": True, "host": "127.0.0.1", "port": metrics_port},
        )
        (work / "serve.yaml").write_text(yaml.safe_dump(cfg))
        return subprocess.Popen(
            echo
            or [
                sys.executable,
                "-m",
                "streaming_dpbandit.cli",
                "serve",
                "--config",
                str(work / "serve.yaml"),
                "--no-progress",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),
        )

    log = open(work / "serve.log", "w")
    proc = start()
    sent: dict[str, float] = {}
    got: list[float] = []
    # no consumer group: the reader assigns the decisions partitions itself
    c = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=1)
    wait_for_partitions(c, [topics["decisions"]])
    parts = [
        TopicPartition(topics["decisions"], p) for p in c.partitions_for_topic(topics["decisions"])
    ]
    c.assign(parts)
    c.seek_to_end(*parts)
    stop = threading.Event()
    event_time: dict[str, float] = {}
    fb = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)

    def reader():
        while not stop.is_set():
            for _, msgs in c.poll(timeout_ms=5).items():
                now = time.perf_counter()
                for m in msgs:
                    eid = json.loads(m.value)["event_id"]
                    if eid in sent:
                        got.append(now - sent[eid])
                        reward = {
                            "v": 1,
                            "event_id": eid,
                            "bandit_id": "shop",
                            "reward": 0.5,
                            "event_time": event_time[eid] + 0.01,
                        }
                        fb.send(
                            topics["feedback"],
                            key=b"shop",
                            value=json.dumps(reward).encode(),
                            timestamp_ms=round(reward["event_time"] * 1000),
                        )

    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
    ctx = [json.loads(line) for line in lines]

    def send(i: int) -> None:
        v = json.loads(ctx[i % len(ctx)]["value"])
        v["event_id"] = f"lat-{i}"
        event_time[v["event_id"]] = float(v["event_time"])
        sent[v["event_id"]] = time.perf_counter()
        # stamped with its (recorded) event time: the stream clock of these contexts
        stamp = round(v["event_time"] * 1000)
        p.send(topics["contexts"], key=b"shop", value=json.dumps(v).encode(), timestamp_ms=stamp)

    # warm-up: wait until the service has joined its group and answers (not timed). A start
    # whose group join stalls (kafka-python 3.0.12, see docs/operations.md) is restarted and
    # counted in ``join_stalls``.
    warm, stalls = 0, 0
    deadline = time.perf_counter() + 30
    while not got:
        if proc.poll() is not None:
            raise RuntimeError(f"dpbandit serve exited with {proc.returncode}; see {log.name}")
        if time.perf_counter() > deadline:
            proc.terminate()
            proc.wait(60)
            stalls += 1
            if stalls > 3:
                raise RuntimeError(f"no decision after {stalls} starts; see {log.name}")
            proc = start()
            deadline = time.perf_counter() + 30
        send(warm)
        p.flush()
        warm += 1
        time.sleep(0.2)
    time.sleep(1.0)
    got.clear()
    hist_before = {} if bare else latency_histogram(metrics_port)
    n = int(rate * seconds)
    t_start = time.perf_counter()
    for i in range(n):
        target = t_start + i / rate
        while time.perf_counter() < target:
            time.sleep(max(0.0, target - time.perf_counter()) / 2)
        send(warm + i)
    p.flush()
    time.sleep(2.0)
    stop.set()
    internal = None if bare else histogram_summary(hist_before, latency_histogram(metrics_port))
    proc.terminate()
    proc.wait(60)
    log.close()
    fb.close()
    if not got:  # the consumer stopped after the warm-up (a group re-join stall)
        raise NoDecisions(f"no decision in the timed phase; see {log.name}")
    arr = np.array(got) * 1000
    return {
        "rate_events_per_s": rate,
        "decisions_timed": int(arr.size),
        "sent": n,
        "service": "bare consume-produce echo" if bare else "dpbandit serve subprocess",
        "p50_ms": float(np.percentile(arr, 50)),
        "p90_ms": float(np.percentile(arr, 90)),
        "p99_ms": float(np.percentile(arr, 99)),
        "max_ms": float(arr.max()),
        "service_internal": internal,
        "max_poll_records": max_poll_records,
        "join_stalls": stalls,
    }


def scrape_metrics(port: int) -> dict:
    """Every sample of /metrics: (name, sorted labels) → value."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (smp.name, tuple(sorted(smp.labels.items()))): smp.value
        for fam in text_string_to_metric_families(text)
        for smp in fam.samples
    }


def _sum(metrics: dict, name: str, **labels) -> float:
    return sum(
        v
        for (n, lb), v in metrics.items()
        if n == name and all(dict(lb).get(k) == x for k, x in labels.items())
    )


def live(
    bootstrap: str,
    rate: float,
    seconds: float = 15.0,
    warmup: float = 5.0,
    max_poll_records: int = 20,
    encoding: str = "json",
    client: str = "kafka-python",
) -> dict:
    """``dpbandit serve`` fed live by ``dpbandit loadgen`` at ``rate`` contexts/s, both as
    processes of their own on this machine (as docs/operations.md runs them): the FLIPHAT
    paper's environment (d = 100, 3 arms), rewards 0.2 s after each decision on average, 5 %
    never rewarded, watermark heartbeats. After ``warmup`` s, ``seconds`` s are timed from the
    service's /metrics: decisions per second, the service's own latency histogram (context
    received → decision handed to the producer), the contexts lag at the end, forced expiries.
    Releases happen as in production (an episode of 5,000 rounds, then doubling); the swap
    delay (20,000 rounds) keeps them from waiting for rewards."""
    import signal

    import yaml

    work = Path(tempfile.mkdtemp(prefix="bench-live-"))
    name = f"live{int(time.time() * 1000) % 10**9}"
    port = free_port()
    cfg = settings_data(
        work / "state",
        kafka={
            "bootstrap_servers": bootstrap,
            "group_id": name,
            "topics": kafka_topics(name),
            "client": client,
            "create_topics": True,
            "partitions": 3,
            "max_poll_records": max_poll_records,
            "poll_timeout_ms": 1,
            "linger_ms": 0,
        },
        metrics={"enabled": True, "host": "127.0.0.1", "port": port},
        simulation={
            "env": "fliphat-paper",
            "env_params": {"d": D, "K": K, "s_star": 5},
            "bandit_id": "shop",
            "feedback_delay_mean": 0.2,
            "feedback_probability": 0.95,
            "seed": 1,
            "feature_encoding": encoding,
        },
        idle_timeout_s=3600,
    )
    policy = cfg["bandits"]["shop"]["policy"]
    policy.update(first_episode_len=5000, swap_delay=20_000)
    (work / "live.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cli = [sys.executable, "-m", "streaming_dpbandit.cli"]
    serve_log = open(work / "serve.log", "w")
    serve = subprocess.Popen(
        [*cli, "serve", "--config", str(work / "live.yaml"), "--no-progress"],
        stdout=serve_log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    gen = None
    try:
        deadline = time.time() + 180
        while "partitions assigned: [(" not in (work / "serve.log").read_text():
            if serve.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"dpbandit serve did not start; see {work / 'serve.log'}")
            time.sleep(0.2)
        gen_log = open(work / "loadgen.log", "w")
        # the load generator niced (issue 32): the service keeps the CPU it needs; its own CPU
        # time in the timed window is reported
        gen_cmd = [*cli, "loadgen", "--config", str(work / "live.yaml"), "--rate", str(rate)]
        gen = subprocess.Popen(
            ["nice", "-n", "10", *gen_cmd],
            stdout=gen_log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        # the generator's own start (importing the package) took up to a minute on the shared
        # machine: the warm-up counts from the first decision
        deadline = time.time() + 300
        while not _sum(scrape_metrics(port), "dpbandit_events_total", outcome="decided"):
            if gen.poll() is not None or serve.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"no decision; see {work}")
            time.sleep(0.5)
        time.sleep(warmup)
        m0, t0 = scrape_metrics(port), time.perf_counter()
        h0 = latency_histogram(port)
        cpu0 = {"service": proc_cpu_s(serve.pid), "loadgen": proc_cpu_s(gen.pid)}
        time.sleep(seconds)
        m1, t1 = scrape_metrics(port), time.perf_counter()
        h1 = latency_histogram(port)
        cpu1 = {"service": proc_cpu_s(serve.pid), "loadgen": proc_cpu_s(gen.pid)}
    finally:
        for p in (gen, serve):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in (gen, serve):
            if p is not None:
                try:
                    p.wait(60)
                except subprocess.TimeoutExpired:
                    p.kill()
    decided = _sum(m1, "dpbandit_events_total", outcome="decided") - _sum(
        m0, "dpbandit_events_total", outcome="decided"
    )
    sent = [x for x in (work / "loadgen.log").read_text().splitlines() if "loadgen: sent" in x]

    def lag(m):
        return sum(
            v
            for (n, lb), v in m.items()
            if n == "dpbandit_consumer_lag" and dict(lb).get("topic", "").endswith("contexts")
        )

    return {
        "rate_offered": rate,
        # what the generator really produced in the window (it falls behind when starved)
        "produced_per_s": (decided + lag(m1) - lag(m0)) / (t1 - t0),
        "decided_per_s": decided / (t1 - t0),
        "contexts_lag_at_end": lag(m1),
        "forced_expiries": _sum(m1, "dpbandit_forced_expiries_total"),
        "latency": histogram_summary(h0, h1),
        "loadgen_summary": sent[-1] if sent else None,
        # CPU seconds per second of the timed window (1.0 = one core), niced load generator
        "cpu_cores": {k: (cpu1[k] - cpu0[k]) / (t1 - t0) for k in cpu0},
        "load_average": os.getloadavg(),
        "max_poll_records": max_poll_records,
        "encoding": encoding,
        "client": client,
        "seconds": seconds,
    }


#: the live part's ramp (contexts/s): it stops at the first rate not sustained
LIVE_RATES = [250.0, 500.0, 1000.0, 2000.0, 4000.0]


def sustained(run: dict) -> bool:
    """The generator produced at least 90 % of the rate, and the service decided at least
    95 % of what was produced and ended less than a second of traffic behind."""
    r = run["rate_offered"]
    return (
        run["produced_per_s"] >= 0.9 * r
        and run["decided_per_s"] >= 0.95 * run["produced_per_s"]
        and run["contexts_lag_at_end"] < r
    )


def bench_live(
    bootstrap: str, rates: list[float], max_poll_records: int = 20, encoding: str = "json"
) -> dict:
    """The highest of ``rates`` (ascending) the service sustains live with the load generator
    (:func:`sustained`), then latency at half of it."""
    ramp, best = [], None
    for rate in rates:
        run = live(bootstrap, rate, max_poll_records=max_poll_records, encoding=encoding)
        ramp.append(run)
        print(json.dumps(run), file=sys.stderr, flush=True)
        if not sustained(run):
            break
        best = rate
    out = {"ramp": ramp, "max_sustained_rate": best}
    if best is not None:
        out["at_half_max"] = live(
            bootstrap, best / 2, max_poll_records=max_poll_records, encoding=encoding
        )
    return out


def bench_kafka(
    bootstrap: str,
    paths: dict[str, Path],
    repeats: int = 3,
    lat_poll: int = 20,
    latency_part: bool = True,
) -> dict:
    """Per feature encoding: the ceiling and the service alternately, ``repeats`` times each on
    the same topics (the ceiling moves by 10-20 % between runs on this machine: medians), then
    decision latency at half the service's median rate (JSON encodings only, and not with
    ``latency_part=False``). The service's own cost per context is its process CPU time per
    context minus the bare loop's, pair by pair (medians and range)."""
    out: dict = {}
    for encoding, path in paths.items():
        topics = kafka_topics(f"b{encoding}{int(time.time())}")
        create(bootstrap, topics.values())
        counts = produce(bootstrap, path, topics)
        ceilings, services, ceiling_cpu, service_cpu = [], [], [], []

        def run(side: str) -> None:  # (called at once, by alternated below)
            n, fb = counts["contexts"], counts["feedback"]
            if side == "bare":
                ceilings.append(bare_loop(bootstrap, topics, n, fb, 260, cpu_out=ceiling_cpu))
            else:
                services.append(service_throughput(bootstrap, topics, n, fb, cpu_out=service_cpu))

        # pairs alternated, the order reversed every pair (issue 32: the bare loop always ran
        # first before)
        alternated(["bare", "service"], repeats, run)
        # informational: the ceiling with kafka-python's default producer batch (16 KiB)
        default_batch = bare_loop(
            bootstrap, topics, counts["contexts"], counts["feedback"], 260, batch_bytes=16384
        )
        ceiling, ours = float(np.median(ceilings)), float(np.median(services))
        own = [a - b for a, b in zip(service_cpu, ceiling_cpu)]
        out[encoding] = {
            "contexts": counts["contexts"],
            "feedback": counts["feedback"],
            "context_bytes_mean": counts["context_bytes_mean"],
            "ceiling_bare_consume_produce_events_per_s": ceilings,
            "service_events_per_s": services,
            "ceiling_median": ceiling,
            "service_median": ours,
            "ratio_of_medians": ours / ceiling,
            "ratio_per_pair": [a / b for a, b in zip(services, ceilings)],
            # process CPU time (main thread and kafka-python's I/O threads) per context
            "ceiling_cpu_us_per_context": ceiling_cpu,
            "service_cpu_us_per_context": service_cpu,
            # the service's own work: its CPU per context minus the bare loop's, pair by pair
            "service_own_cpu_us_per_context_per_pair": own,
            "service_own_cpu_us_per_context_median": float(np.median(own)),
            "service_own_cpu_us_per_context_range": [min(own), max(own)],
            # the same from wall time: 1/service rate − 1/ceiling rate
            "service_own_wall_us_per_context_medians": (1 / ours - 1 / ceiling) * 1e6,
            "ceiling_with_16KiB_producer_batches_events_per_s": default_batch,
            # 1/(0.8·ceiling) − 1/ceiling: what the service may spend per context besides the
            # ceiling's own Kafka work (compare with the ``floor`` section)
            "service_budget_us_per_context_at_0.8x": (1 / (0.8 * ceiling) - 1 / ceiling) * 1e6,
        }
        if not latency_part or encoding in BINARY_ENCODINGS:
            # the latency harness below writes and reads JSON contexts
            continue
        lines = [x for x in path.read_text().splitlines() if json.loads(x)["topic"] == "contexts"]
        # latency at half the rate the service sustains live (fed by dpbandit loadgen, with
        # the latency setting max_poll_records), not half the catch-up rate above: a catch-up
        # reads 2,000 records per poll, and small polls sustain far fewer (issue 19)
        live_out = bench_live(bootstrap, LIVE_RATES, lat_poll, encoding)
        half = (live_out["max_sustained_rate"] or LIVE_RATES[0]) / 2
        seconds = min(10.0, len(lines) / half)
        lat = latency_retrying(
            bootstrap, topics, "lat", lines, half, seconds, max_poll_records=lat_poll
        )
        floor = latency_retrying(bootstrap, topics, "echo", lines, half, seconds, bare=True)
        out[encoding].update(
            {
                "live_with_loadgen": live_out,
                "end_to_end_latency_at_half_live_max": lat,
                "latency_floor_bare_echo_same_rate": floor,
            }
        )
    return out


# -- the two Kafka clients (issue 24, item 5) ---------------------------------------------------
def bare_loop_confluent(
    bootstrap,
    topics: dict,
    n_contexts: int,
    n_feedback: int,
    decision_bytes: int,
    cpu_out: list | None = None,
) -> float:
    """:func:`bare_loop` on librdkafka (confluent-kafka): the ceiling of ``kafka.client:
    confluent-kafka``, with that transport's producer properties (idempotent, acks=all, the
    murmur2 partitioner, linger, batch size) and its poll (``consume`` of up to
    ``max_poll_records``); partitions assigned, not joined as a group, as in :func:`bare_loop`."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    from streaming_dpbandit.settings import KafkaSettings
    from streaming_dpbandit.stream.kafka.options import confluent_producer_config

    ks = KafkaSettings(bootstrap_servers=bootstrap, client="confluent-kafka")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bare", "enable.auto.commit": False})
    meta = c.list_topics(timeout=30)
    c.assign(
        [
            TopicPartition(t, q, OFFSET_BEGINNING)
            for t in (topics["contexts"], topics["feedback"])
            for q in meta.topics[t].partitions
        ]
    )
    p = Producer(confluent_producer_config(ks))
    payload = b"x" * decision_bytes
    decisions, contexts = topics["decisions"], topics["contexts"]
    seen = seen_fb = 0
    t0 = None
    while seen < n_contexts or seen_fb < n_feedback:
        msgs = c.consume(ks.max_poll_records, 0.1)
        if msgs and t0 is None:
            t0, cpu0 = time.perf_counter(), time.process_time()
        for m in msgs:
            if m.error() is not None:
                continue
            if m.topic() == contexts:
                while True:
                    try:
                        p.produce(decisions, payload, m.key())
                        break
                    except BufferError:
                        p.poll(0.05)
                seen += 1
            else:
                seen_fb += 1
        p.poll(0)
    p.flush()
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    c.close()
    if cpu_out is not None:
        cpu_out.append(cpu / n_contexts * 1e6)
    return n_contexts / dt


CLIENTS = ("kafka-python", "confluent-kafka")


def bench_clients(
    bootstrap: str, paths: dict[str, Path], repeats: int = 3, live_rate: float | None = 500.0
) -> dict:
    """Both Kafka clients side by side, per feature encoding, on the same topics: the bare
    consume→produce ceiling and the service catching up on the full topics, each client's
    runs alternated ``repeats`` times (medians); then, if ``live_rate``, the service live at
    that rate with each client (:func:`live`, alternated), its decision latency from its own
    histogram."""
    out: dict = {"repeats": repeats, "protocol": "alternated kp, ck per repeat; medians"}
    for encoding, path in paths.items():
        topics = kafka_topics(f"c{encoding}{int(time.time())}")
        create(bootstrap, topics.values())
        counts = produce(bootstrap, path, topics)
        n, fb = counts["contexts"], counts["feedback"]
        runs: dict[str, dict[str, list[float]]] = {
            c: {"ceiling": [], "service": []} for c in CLIENTS
        }
        cpu: dict[str, dict[str, list[float]]] = {
            c: {"ceiling": [], "service": []} for c in CLIENTS
        }

        def ceiling(client: str) -> None:
            loop = bare_loop if client == "kafka-python" else bare_loop_confluent
            runs[client]["ceiling"].append(
                loop(bootstrap, topics, n, fb, 260, cpu_out=cpu[client]["ceiling"])
            )

        def service(client: str) -> None:
            runs[client]["service"].append(
                service_throughput(
                    bootstrap, topics, n, fb, client=client, cpu_out=cpu[client]["service"]
                )
            )

        # each comparison alternated, the order reversed every pair (issue 32: kafka-python
        # always ran first before)
        alternated(list(CLIENTS), repeats, ceiling)
        alternated(list(CLIENTS), repeats, service)
        res: dict = {"contexts": n, "feedback": fb}
        for client in CLIENTS:
            ceil = float(np.median(runs[client]["ceiling"]))
            svc = float(np.median(runs[client]["service"]))
            own = [a - b for a, b in zip(cpu[client]["service"], cpu[client]["ceiling"])]
            res[client] = {
                "ceiling_bare_consume_produce_events_per_s": runs[client]["ceiling"],
                "service_events_per_s": runs[client]["service"],
                "ceiling_median": ceil,
                "service_median": svc,
                "service_over_own_ceiling": svc / ceil,
                "ceiling_cpu_us_per_context": cpu[client]["ceiling"],
                "service_cpu_us_per_context": cpu[client]["service"],
                "service_contexts_per_cpu_s_median": 1e6 / float(np.median(cpu[client]["service"])),
                "service_own_cpu_us_per_context_median": float(np.median(own)),
            }
        kp, ck = res["kafka-python"], res["confluent-kafka"]
        res["confluent_over_kafka_python_service"] = ck["service_median"] / kp["service_median"]
        res["confluent_over_kafka_python_ceiling"] = ck["ceiling_median"] / kp["ceiling_median"]
        res["confluent_over_kafka_python_service_per_pair"] = [
            a / b for a, b in zip(ck["service_events_per_s"], kp["service_events_per_s"])
        ]
        out[encoding] = res
        print(json.dumps({encoding: res}), file=sys.stderr, flush=True)
    if live_rate:
        lat: dict[str, list[dict]] = {c: [] for c in CLIENTS}
        for _ in range(max(1, repeats // 2)):
            for client in CLIENTS:
                lat[client].append(live(bootstrap, live_rate, client=client))
        out[f"live_at_{live_rate:g}_per_s"] = {
            client: {
                "p50_ms_median": float(
                    np.median([r["latency"].get("p50_ms_interpolated", np.nan) for r in rs])
                ),
                "p99_ms_median": float(
                    np.median([r["latency"].get("p99_ms_interpolated", np.nan) for r in rs])
                ),
                "decided_per_s": [r["decided_per_s"] for r in rs],
                "runs": rs,
            }
            for client, rs in lat.items()
        }
    return out


# -- memory ----------------------------------------------------------------------------------------
def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class WithGarbage(Source):
    """Wrap a source and inject 1% malformed context messages (the dead-letter path)."""

    def __init__(self, inner, every=100):
        self.inner, self.every, self.topics, self._n = inner, every, inner.topics, 0

    def generate(self, emit, max_new):
        def tee(topic, key, value):
            emit(topic, key, value)
            if topic == self.topics[0]:
                self._n += 1
                if self._n % self.every == 0:
                    emit(topic, key, b'{"v": 1, "event_id": "junk", "bandit_id": ')

        return self.inner.generate(tee, max_new)

    def on_output(self, topic, value):
        self.inner.on_output(topic, value)


def bench_memory(events: int) -> dict:
    src = simulated(events, 9, feedback_probability=0.9)
    svc = Service(settings(tempfile.mkdtemp()), InProcessTransport(WithGarbage(src)))
    svc.open()
    samples = []
    step = max(1, events // 40)
    nxt = [step]

    def progress(s):
        t = s.bandits["shop"].policy.t
        if t >= nxt[0]:
            samples.append(
                {
                    "events": t,
                    "rss_mb": rss_mb(),
                    "pending": len(s.bandits["shop"].join.pending),
                    "resolved_memory": len(s.bandits["shop"].join.resolved),
                }
            )
            nxt[0] += step

    t0 = time.perf_counter()
    with service_gc():
        summary = svc.run(progress)
    later = [x["rss_mb"] for x in samples[len(samples) // 4 :]]
    return {
        "events": events,
        "d": D,
        "seconds": time.perf_counter() - t0,
        "dead_letters": summary["dead_letters"],
        "samples": samples,
        "rss_mb_after_first_quarter_min_max": [min(later), max(later)],
    }


def memory_in_fresh_process(events: int) -> dict:
    """:func:`bench_memory` in a process of its own, so that its RSS is the service's, not the
    high-water mark of the bench's earlier parts (RSS rarely shrinks)."""
    out = subprocess.run(
        [sys.executable, __file__, "--memory", str(events)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    if sys.argv[1:2] == ["--echo"]:
        echo_main(*sys.argv[2:5])
        return
    if sys.argv[1:2] == ["--replay-cpu"]:
        replay_cpu_main(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    if sys.argv[1:2] == ["--memory"]:
        print(json.dumps(bench_memory(int(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kafka", help="bootstrap of an existing broker")
    ap.add_argument("--skip-kafka", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument(
        "--skip-latency",
        action="store_true",
        help="through Kafka, only the alternated ceiling/service throughput and CPU pairs",
    )
    ap.add_argument(
        "--encodings",
        default=",".join(FEATURE_ENCODINGS),
        help=f"comma-separated feature encodings (default: all, {','.join(FEATURE_ENCODINGS)})",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="ceiling and service runs per encoding (alternated; medians are reported)",
    )
    ap.add_argument(
        "--live-only",
        metavar="RATES",
        help="only the live part: comma-separated ascending rates for dpbandit loadgen "
        "(contexts/s); the highest one sustained, then latency at half of it",
    )
    ap.add_argument("--live-encoding", default="json", choices=FEATURE_ENCODINGS)
    ap.add_argument(
        "--clients-only",
        action="store_true",
        help="only the two Kafka clients side by side (kafka-python, confluent-kafka): "
        "ceilings and service throughput alternated --repeats times, live latency at "
        "--clients-live-rate",
    )
    ap.add_argument("--clients-live-rate", type=float, default=500.0, help="0: no live part")
    ap.add_argument(
        "--skip-clients",
        action="store_true",
        help="through Kafka, leave out the two clients side by side (kafka_clients)",
    )
    ap.add_argument(
        "--old-tree",
        type=Path,
        help="only the in-process CPU per context of this tree against another checkout "
        "(e.g. git archive COMMIT | tar -x -C DIR), alternated --versions-rounds times per "
        "encoding, with the recorded arrival order and with the feedback read ahead",
    )
    ap.add_argument("--versions-rounds", type=int, default=5)
    ap.add_argument(
        "--latency-max-poll-records",
        type=int,
        default=20,
        help="kafka.max_poll_records of the service in the latency phase (small polls keep the "
        "tail short; the throughput phase uses 2000)",
    )
    args = ap.parse_args()
    if args.live_only:
        rates = [float(x) for x in args.live_only.split(",")]
        print(
            json.dumps(
                bench_live(args.kafka, rates, args.latency_max_poll_records, args.live_encoding),
                indent=1,
            )
        )
        return
    events = 5_000 if args.quick else 50_000
    tmp = Path(tempfile.mkdtemp())
    paths = {}
    for encoding in args.encodings.split(","):  # the same stream, features as JSON or binary
        paths[encoding] = tmp / f"stream-{encoding}.jsonl"
        record(paths[encoding], events, encoding)
    if args.old_tree:
        print(json.dumps({"versions": bench_versions(paths, events, args.old_tree,
                                                     args.versions_rounds)}, indent=1))  # fmt: skip
        return
    if args.clients_only:
        env = None
        bootstrap = args.kafka
        if bootstrap is None:
            bootstrap, env = start_broker()
        try:
            clients = bench_clients(bootstrap, paths, args.repeats, args.clients_live_rate)
        finally:
            if env is not None:
                stop_broker(env)
        print(
            json.dumps(
                {
                    "events": events,
                    "encodings": ENCODING_LABELS,
                    "kafka_clients": clients,
                    "load_average": os.getloadavg(),
                },
                indent=1,
            )
        )
        return
    out = {
        "encodings": ENCODING_LABELS,
        "inprocess": bench_inprocess(paths, events),
        "floor": bench_floor(paths),
    }
    if not args.skip_kafka:
        env = None
        bootstrap = args.kafka
        if bootstrap is None:
            bootstrap, env = start_broker()
        try:
            out["kafka"] = bench_kafka(
                bootstrap,
                paths,
                args.repeats,
                args.latency_max_poll_records,
                latency_part=not args.skip_latency,
            )
            if not args.skip_clients:
                out["kafka_clients"] = bench_clients(
                    bootstrap, paths, args.repeats, args.clients_live_rate
                )
        finally:
            if env is not None:
                stop_broker(env)
    if not args.skip_memory:
        out["memory"] = memory_in_fresh_process(50_000 if args.quick else 1_000_000)
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
