"""Quix Streams as the layer under group mode (issue 32, item 3): what its exactly-once,
stateful processing costs per record, next to a bare librdkafka consume→produce loop and a
bare *transactional* one, on the same topic, alternated (order reversed every pair).

Quix Streams is not a dependency of the package: run this in a virtual environment that has
it (``pip install quixstreams``; it pins its own confluent-kafka):

    python -m venv /tmp/quix && /tmp/quix/bin/pip install quixstreams
    /tmp/quix/bin/python bench/bench_quix.py --kafka HOST:PORT --records 20000 --pairs 3

Each side reads the same N records (the service's JSON context messages of FLIPHAT at
d = 100) from one partition and writes one 260-byte record per input record; its clock and
process CPU time run from its first polled record to its last output acknowledged. Quix: an
``Application`` with ``processing_guarantee="exactly-once"`` and a stateful ``apply`` that
keeps a per-key count (a RocksDB store with its changelog topic), commit every second, as
group mode commits. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

import numpy as np


def produce(boot: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    rng = np.random.default_rng(1)
    p = Producer({"bootstrap.servers": boot, "linger.ms": 20})
    for i in range(n):
        arms = [{"arm_id": f"a{k}", "features": rng.normal(size=100).round(6).tolist()}
                for k in range(3)]  # fmt: skip
        ctx = {"event_id": f"e{i}", "bandit_id": "shop", "event_time": 1.7e9 + i, "arms": arms}
        p.produce(topic, json.dumps(ctx).encode(), b"shop")
        if i % 1000 == 0:
            p.poll(0)
    p.flush()


def create(boot: str, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": boot})
    for f in a.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result()


def bare(boot: str, src: str, dst: str, n: int, transactional: bool) -> dict:
    """librdkafka consume→produce; transactional: offsets and outputs committed every second
    in a transaction (what group mode's tasks do), else idempotent acks=all."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    group = f"bare-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": boot, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed"})  # fmt: skip
    conf = {"bootstrap.servers": boot, "acks": "all", "enable.idempotence": True,
            "linger.ms": 2, "batch.size": 1 << 20}  # fmt: skip
    if transactional:
        conf["transactional.id"] = group
    p = Producer(conf)
    c.assign([TopicPartition(src, 0, 0)])
    if transactional:
        p.init_transactions()
        p.begin_transaction()
    payload = b"x" * 260
    seen, t0, last = 0, None, time.monotonic()
    while seen < n:
        msgs = c.consume(2000, 0.1)
        if msgs and t0 is None:
            t0, cpu0 = time.perf_counter(), time.process_time()
        for m in msgs:
            if m.error() is None:
                p.produce(dst, payload, m.key())
                seen += 1
        p.poll(0)
        if transactional and time.monotonic() - last >= 1.0:
            p.send_offsets_to_transaction(
                [TopicPartition(src, 0, seen)], c.consumer_group_metadata()
            )
            p.commit_transaction()
            p.begin_transaction()
            last = time.monotonic()
    if transactional:
        p.send_offsets_to_transaction([TopicPartition(src, 0, seen)], c.consumer_group_metadata())
        p.commit_transaction()
    else:
        p.flush()
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    c.close()
    return {"records": seen, "s": dt, "cpu_s": cpu, "cpu_us_per_record": cpu / seen * 1e6}


def quix(boot: str, src: str, dst: str, n: int, state_dir: str) -> dict:
    from quixstreams import Application

    app = Application(
        broker_address=boot,
        consumer_group=f"quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=1.0,
        state_dir=state_dir,
        loglevel="WARNING",
    )
    seen = {"n": 0}
    clock: dict = {}
    payload = "x" * 260

    def decide(value, state):
        if not clock:
            clock["t0"], clock["cpu0"] = time.perf_counter(), time.process_time()
        count = state.get("count", 0) + 1
        state.set("count", count)
        seen["n"] += 1
        if seen["n"] >= n:
            app.stop()
        return payload

    sdf = app.dataframe(app.topic(src, value_deserializer="bytes"))
    sdf = sdf.apply(decide, stateful=True)
    sdf.to_topic(app.topic(dst, value_serializer="str"))
    app.run()  # (stops after its last checkpoint: outputs committed)
    dt, cpu = time.perf_counter() - clock["t0"], time.process_time() - clock["cpu0"]
    return {"records": seen["n"], "s": dt, "cpu_s": cpu, "cpu_us_per_record": cpu / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kafka", required=True)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:  # one measurement in a fresh process
        dst = f"{a.topic}.out.{uuid.uuid4().hex[:6]}"
        create(a.kafka, dst)
        if a.side == "quix":
            res = quix(a.kafka, a.topic, dst, a.records, tempfile.mkdtemp())
        else:
            res = bare(a.kafka, a.topic, dst, a.records, a.side == "bare-transactional")
        print(json.dumps(res))
        return
    import subprocess

    src = f"quixbench.{uuid.uuid4().hex[:8]}"
    create(a.kafka, src)
    produce(a.kafka, src, a.records)
    sides = ["bare-transactional", "quix", "bare"]
    runs: dict = {s: [] for s in sides}
    for i in range(a.pairs):
        for side in sides if i % 2 == 0 else sides[::-1]:
            out = subprocess.run(
                [sys.executable, __file__, "--kafka", a.kafka, "--records", str(a.records),
                 "--side", side, "--topic", src],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(side, runs[side][-1], file=sys.stderr, flush=True)
    med = {s: float(np.median([r["cpu_us_per_record"] for r in rs])) for s, rs in runs.items()}
    print(json.dumps({
        "protocol": f"{a.records} JSON context records, one partition; sides in fresh processes, "
        f"order reversed every round, {a.pairs} rounds; CPU and clock from the first polled "
        "record to the last output committed (quix: its run() returning after its checkpoint)",
        "date": time.strftime("%Y-%m-%d"),
        "load_average": os.getloadavg(),
        "cpu_us_per_record_median": med,
        "quix_over_bare_transactional": med["quix"] / med["bare-transactional"],
        "runs": runs,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
