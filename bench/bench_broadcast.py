"""Model-broadcast benchmark (issue 10, pattern 2). Prints one JSON document.

* ``throughput``: decisions/s of 1 and 2 decision replicas (``dpbandit serve`` subprocesses,
  ``broadcast.role: decider``) over a backlog of contexts keyed by event id (4 partitions),
  deciding with a released FLIPHAT model; measured between the first and the last decision.
* ``pickup``: one learner and two decision replicas (subprocesses) serve a paced stream while
  this process answers every decision with a reward; for every model version and replica, the
  delay from the version's publication to the replica's first decision with it (includes up
  to one inter-arrival time of the stream).

Usage: python bench/bench_broadcast.py [--quick] [--kafka HOST:PORT]
(without --kafka a broker is started with scripts/kafka.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # dpbandit_testing, the helpers beside the package

from bench_service import start_broker, stop_broker  # noqa: E402

from dpbandit_testing.broadcast_kafka import POLICY, Client, read_partition  # noqa: E402
from dpbandit_testing.stream_helpers import BANDIT, D, K, bandit_config, kafka_topics  # noqa: E402
from streaming_dpbandit.envs import FliphatPaperEnv  # noqa: E402
from streaming_dpbandit.policies import FLIPHAT  # noqa: E402
from streaming_dpbandit.stream.scaling.models_topic import model_message  # noqa: E402


def topics_for(name: str) -> dict:
    return kafka_topics(name) | {"models": f"{name}.models"}


def create(bootstrap: str, topics: dict, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics(
        [
            NewTopic(
                t,
                partitions,
                1,
                topic_configs={"cleanup.policy": "compact"} if k == "models" else {},
            )
            for k, t in topics.items()
        ]
    )
    admin.close()
    time.sleep(1.0)


def config(path: Path, role: str, bootstrap: str, topics: dict, state: Path, replica=None):
    cfg = {
        "kafka": {
            "bootstrap_servers": bootstrap,
            "group_id": f"{topics['contexts']}.g",
            "topics": {k: v for k, v in topics.items() if k != "models"},
            "create_topics": False,
            "max_poll_records": 2000,
            "poll_timeout_ms": 50,
        },
        "bandits": {BANDIT: bandit_config(**POLICY)},
        "broadcast": {
            "role": role,
            "models_topic": topics["models"],
            "replica_id": replica,
            "model_refresh_ms": 100,
        },
        "snapshots": {"directory": str(state), "interval_s": 5.0},
        "metrics": {"enabled": False},
        "progress": False,
        "log_level": "WARNING",
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(cfg: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stop(procs) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def count(bootstrap: str, topic: str, partitions: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    parts = [TopicPartition(topic, p) for p in range(partitions)]
    n = sum(c.end_offsets(parts).values())
    c.close()
    return n


def throughput(bootstrap: str, replicas: int, events: int, work: Path) -> dict:
    from kafka import KafkaProducer

    topics = topics_for(f"bt{replicas}x{os.getpid()}")
    create(bootstrap, topics, 4)
    # a released model on the models topic, so the replicas score with a real β̂
    pol = bandit_config()["policy"]
    pol = {k: v for k, v in pol.items() if k != "policy"} | {"swap_delay": 0}
    pol = FLIPHAT(**pol, bandit_id=BANDIT, seed=1)
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    rng = np.random.default_rng(0)
    Xs = env.contexts(rng, 300)
    dec = pol.decide(Xs[:256])
    chosen = Xs[np.arange(256), dec.arms]
    pol.learn(chosen, env.mean_rewards(chosen[:, None, :])[:, 0], dec.rounds)
    pol.refit()
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=1 << 20)
    model = model_message(BANDIT, pol).model_dump_json().encode()
    p.send(topics["models"], key=BANDIT.encode(), value=model)
    X = env.contexts(rng, events)
    for i in range(events):
        ctx = {
            "event_id": f"e{i}",
            "bandit_id": BANDIT,
            "event_time": 1.7e9 + i * 1e-3,
            "arms": [{"arm_id": f"a{k}", "features": X[i, k].tolist()} for k in range(K)],
        }
        stamp = round(ctx["event_time"] * 1000)  # CreateTime = event time: the stream clock
        p.send(
            topics["contexts"],
            key=f"e{i}".encode(),
            value=json.dumps(ctx).encode(),
            timestamp_ms=stamp,
        )
    p.flush()
    p.close()
    procs = [
        start(config(work / f"t{replicas}-{r}.yaml", "decider", bootstrap, topics, work, f"r{r}"))
        for r in range(replicas)
    ]
    deadline = time.monotonic() + 300
    while count(bootstrap, topics["decisions"], 4) < events and time.monotonic() < deadline:
        time.sleep(0.5)
    stop(procs)
    decs = [json.loads(m.value) for m in read_partition(bootstrap, topics["decisions"])]
    t = sorted(d["decided_at"] for d in decs)
    per = {}
    for d in decs:
        per[d["replica"]] = per.get(d["replica"], 0) + 1
    return {
        "replicas": replicas,
        "decisions": len(decs),
        "unique_events": len({d["event_id"] for d in decs}),
        "decisions_per_s": len(decs) / (t[-1] - t[0]),
        "per_replica": per,
        "model_version_used": sorted({d["model_version"] for d in decs}),
    }


def pickup(bootstrap: str, events: int, rate: float, work: Path) -> dict:
    topics = topics_for(f"bp{os.getpid()}")
    create(bootstrap, topics, 3)
    procs = [start(config(work / "learner.yaml", "learner", bootstrap, topics, work / "l"))]
    procs += [
        start(config(work / f"p{r}.yaml", "decider", bootstrap, topics, work, f"r{r}"))
        for r in range(2)
    ]
    time.sleep(8.0)  # start-up and the deciders' group join
    client = Client(bootstrap, topics, events=events, rate=rate)
    answer = threading.Thread(target=client.answer, daemon=True)
    answer.start()
    client.produce_contexts()
    deadline = time.monotonic() + 120
    while client.answered < events and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)
    client.stop.set()
    answer.join(30)
    stop(procs)
    models = [json.loads(m.value) for m in read_partition(bootstrap, topics["models"])]
    published = {}
    for m in models:
        published.setdefault(m["model_version"], m["published_at"])
    decs = [json.loads(m.value) for m in read_partition(bootstrap, topics["decisions"])]
    delays = []
    rows = {}
    for r in sorted({d["replica"] for d in decs}):
        mine = [d for d in decs if d["replica"] == r]
        for v, at in sorted(published.items()):
            used = [d["decided_at"] for d in mine if d["model_version"] >= v]
            if used:
                delays.append(min(used) - at)
                rows.setdefault(r, {})[v] = round(min(used) - at, 4)
    q = np.quantile(delays, [0.0, 0.5, 0.9, 1.0]) if delays else [None] * 4
    return {
        "events": events,
        "rate_per_s": rate,
        "model_versions": sorted(published),
        "decisions": len(decs),
        "unique_events": len({d["event_id"] for d in decs}),
        "pickup_delay_s": {"min": q[0], "median": q[1], "p90": q[2], "max": q[3]},
        "pickup_delay_by_replica_and_version_s": rows,
        "inter_arrival_s": 1.0 / rate,
        "model_refresh_s": 0.1,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kafka")
    ap.add_argument("--rate", type=float, default=200.0, help="pickup stream, contexts/s")
    ap.add_argument("--skip-throughput", action="store_true")
    args = ap.parse_args()
    env = None
    bootstrap = args.kafka
    if bootstrap is None:
        bootstrap, env = start_broker()
    events = 20_000 if args.quick else 60_000
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            out = {
                "machine": {"cpus": os.cpu_count()},
                "throughput": []
                if args.skip_throughput
                else [throughput(bootstrap, n, events, work) for n in (1, 2)],
                "pickup": pickup(bootstrap, 4000 if args.quick else 8000, args.rate, work),
            }
    finally:
        if env is not None:
            stop_broker(env)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
