"""Shared state for several replicas, against the real broker: chunked changelog snapshots that
are only visible when complete, the Kafka ledger, and partition ownership."""

import numpy as np
import pytest
from kafka import KafkaProducer

from streaming_dpbandit.privacy.ledger import LedgerConflictError, ReleaseRecord
from streaming_dpbandit.settings import KafkaSettings
from streaming_dpbandit.stream.kafka.ledger import KafkaLedger
from streaming_dpbandit.stream.kafka.seam import kafka_client as client_of
from streaming_dpbandit.stream.kafka.state_store import CHUNK_BYTES, KafkaChangelogStore
from streaming_dpbandit.stream.scaling.partitioning import partition_of

pytestmark = pytest.mark.kafka


def tx_producer(settings: KafkaSettings, tid: str):
    """The seam's transactional producer of ``settings.client``, initialised."""
    p = client_of(settings.client).transactional_producer(settings, tid, 60_000)
    p.init_transactions()
    return p


def test_changelog_snapshots_chunk_and_are_visible_only_when_complete(
    kafka_broker, kafka_topic, kafka_client
):
    topic = kafka_topic(partitions=1, configs={"cleanup.policy": "compact"})
    k = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap, client=kafka_client)
    prod = tx_producer(k, f"{topic}-tx")
    writer = KafkaChangelogStore(k, topic, send=prod.send)
    big = {"x": np.arange(3 * CHUNK_BYTES // 8, dtype=np.float64), "n": 1}
    prod.begin()
    assert writer.save("task-3", big) > 2 * CHUNK_BYTES  # several chunks
    prod.flush()
    assert prod.offset_of(writer.last_start["task-3"]) == 0  # where the snapshot starts
    prod.commit()
    reader = KafkaChangelogStore(k, topic)
    got = reader.load("task-3")
    assert got["n"] == 1 and np.array_equal(got["x"], big["x"])
    # a newer snapshot in an aborted transaction is never seen
    prod.begin()
    writer.save("task-3", {"x": np.zeros(3), "n": 2})
    prod.abort()
    assert KafkaChangelogStore(k, topic).load("task-3")["n"] == 1
    # a committed newer one replaces it; tombstones drop the old chunks
    writer2 = KafkaChangelogStore(k, topic, send=prod.send)
    assert writer2.load("task-3")["n"] == 1
    prod.begin()
    writer2.save("task-3", {"x": np.zeros(3), "n": 3})
    prod.commit()
    fresh = KafkaChangelogStore(k, topic)
    assert fresh.load("task-3")["n"] == 3 and fresh.load("task-9") is None
    live_chunks = [k for k in fresh._values if k.startswith("task-3/") and k != "task-3/head"]
    assert live_chunks == [f"task-3/{fresh._seq['task-3']}/0"]
    prod.close()


def record(i, values=(0.5,)):
    return ReleaseRecord(
        f"b/fit/{i}",
        "b",
        "n-iht+peeling",
        "certified",
        "certified-v1",
        True,
        1.0,
        0.01,
        [{"type": "eps_delta", "epsilon": 1.0, "delta": 0.01}],
        release={"values": list(values)},
    )


def test_kafka_ledger_is_idempotent_and_refuses_redraws(kafka_broker, kafka_topic, kafka_client):
    topic = kafka_topic(partitions=1, configs={"cleanup.policy": "compact"})
    k = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap, client=kafka_client)
    prod = tx_producer(k, f"{topic}-tx")
    led = KafkaLedger(k, topic, send=prod.send).open()
    prod.begin()
    assert led.append(record(1)) and led.append(record(2))
    assert not led.append(record(1))
    prod.commit()
    other = KafkaLedger(k, topic).open()  # another replica
    assert [r.release_id for r in other.records()] == ["b/fit/1", "b/fit/2"]
    with pytest.raises(LedgerConflictError):
        other.send = lambda *a: None
        other.append(record(2, values=(0.6,)))
    prod.close()


def test_partition_of_matches_kafka(kafka_broker, kafka_topic):
    topic = kafka_topic(partitions=12)
    prod = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    names = [f"bandit-{i}" for i in range(40)]
    futures = {n: prod.send(topic, key=n.encode(), value=b"x") for n in names}
    prod.flush()
    for n, f in futures.items():
        assert f.get(timeout=10).partition == partition_of(n, 12)
    prod.close()
