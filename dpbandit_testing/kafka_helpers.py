"""Kafka helpers of the service tests: topics, producing a recorded stream, reading a topic,
the service's settings and thread, the ``/metrics`` endpoint
(``tests/stream/kafka/test_service_kafka.py`` and the other Kafka tests)."""

from __future__ import annotations

import json
import socket
import threading
import urllib.request
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.runner import kafka_transport
from streaming_dpbandit.stream.service import Service

from .stream_helpers import (
    BANDIT,
    bandit_config,
    kafka_topics,
)

PARTITIONS = 3


# ------------------------------------------------------------------------------------
def create_topics(broker, topics: dict) -> None:
    for t in topics.values():
        broker.create_topic(t, PARTITIONS)


def produce_file(bootstrap: str, path: Path, topics: dict) -> dict[str, int]:
    """Write a recorded JSONL stream to the contexts and feedback topics, keyed by bandit, each
    record stamped with its line's ``timestamp`` (or the last one before it, as ``serve
    --file`` reads a line without one; none before the first)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=20,
        batch_size=512 * 1024,
        max_request_size=2 * 1024 * 1024,
    )
    counts = {"contexts": 0, "feedback": 0}
    stamp = None  # a line without a timestamp takes the one before it (as serve --file does)
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        stamp = rec.get("timestamp", stamp)
        value = rec["value"].encode()
        index = str(counts[rec["topic"]]).encode()  # position in the file, per topic
        try:
            key = json.loads(value).get("bandit_id", BANDIT)
        except (ValueError, AttributeError):
            key = BANDIT
        if not isinstance(key, str):
            key = BANDIT
        producer.send(
            topics[rec["topic"]],
            key=key.encode(),
            value=value,
            headers=[("index", index)],
            timestamp_ms=stamp,  # the recorded stream's clock (CreateTime)
        )
        counts[rec["topic"]] += 1
    producer.flush()
    producer.close()
    return counts


def read_topic(bootstrap: str, topic: str) -> list:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000
    )
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    ends = consumer.end_offsets(parts)
    out = []
    while any(consumer.position(p) < ends[p] for p in parts):
        for _, msgs in consumer.poll(timeout_ms=1000).items():
            out.extend(msgs)
    consumer.close()
    return out


def kafka_settings(state_dir, bootstrap, topics, group, client="kafka-python", **over) -> dict:
    data = {
        "mode": "service",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "client": client,
            "group_id": group,
            "topics": topics,
            "create_topics": False,
            "max_poll_records": 2000,
            "poll_timeout_ms": 50,
        },
        "bandits": {BANDIT: bandit_config()},
        "snapshots": {"directory": str(state_dir), "interval_s": 0.5},
        "metrics": {"enabled": False},
        "progress": False,
        "idle_timeout_s": 3600,
    }
    data.update(over)
    return data


def run_in_thread(settings: ServiceSettings, done) -> tuple[Service, threading.Thread, list]:
    svc = Service(settings, kafka_transport(settings.kafka))
    result = []

    def target():
        svc.open()
        result.append(svc.run(progress=lambda s: s.request_stop() if done(s) else None))

    th = threading.Thread(target=target, daemon=True)
    th.start()
    return svc, th, result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(metrics: dict, name: str, **labels) -> float | None:
    return metrics.get((name, tuple(sorted(labels.items()))))


def serve_file_over_kafka(broker, path: Path, state_dir, name: str, bandits: dict):
    """Produce a recorded stream to fresh topics ``name``, run the single service on them until
    every context and feedback message is read and no decision is pending (bandit ``BANDIT``);
    returns (service, summary, topics)."""
    topics = kafka_topics(name)
    create_topics(broker, topics)
    counts = produce_file(broker.bootstrap, path, topics)
    st = ServiceSettings.model_validate(
        kafka_settings(state_dir, broker.bootstrap, topics, name, bandits=bandits)
    )

    def done(svc) -> bool:  # every context and every feedback message read
        read = {t: 0 for t in ("contexts", "feedback")}
        for (topic, _p), off in svc.offsets.items():
            read[topic.rsplit(".", 1)[1]] += off
        return read == counts and not svc.bandits[BANDIT].join.pending

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=120)
    assert not th.is_alive() and result, "the service did not finish"
    return svc, result[0], topics
