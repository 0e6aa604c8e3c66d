"""The real Kafka test broker (scripts/kafka.sh) does what the service needs.

Partitioned topics, an idempotent ``acks='all'`` producer, a consumer group with manual
``assign``/``seek``/``commit``, transactions, and a broker restart mid-stream with nothing lost
or duplicated. No mocks: these run against the broker of the ``kafka_broker`` fixture.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.serializer import DefaultSerializer, JsonSerializer
from kafka.structs import OffsetAndMetadata

from dpbandit_testing.kafka_broker import parse_bootstrap

pytestmark = pytest.mark.kafka

N_KEYS = 13


def _producer(bootstrap: str, **config) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        key_serializer=DefaultSerializer(),
        value_serializer=JsonSerializer(),
        linger_ms=5,
        **config,
    )


def _consumer(bootstrap: str, group_id: str | None, **config) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="none",  # every position here comes from an explicit seek
        key_deserializer=DefaultSerializer(),
        value_deserializer=JsonSerializer(),
        **config,
    )


def _send(producer: KafkaProducer, topic: str, seqs, phase: str) -> list:
    return [
        producer.send(topic, key=f"k{s % N_KEYS}", value={"seq": s, "phase": phase}) for s in seqs
    ]


def _poll_until(consumer: KafkaConsumer, done, timeout_s: float = 30.0) -> list:
    """Poll, collecting records, until ``done(records)``; fail with what was read if never."""
    records: list = []
    deadline = time.monotonic() + timeout_s
    while not done(records):
        if time.monotonic() > deadline:
            pytest.fail(f"consumer gave up after {timeout_s}s with {len(records)} records")
        for batch in consumer.poll(timeout_ms=200).values():
            records.extend(batch)
    return records


def _read_from_start(bootstrap: str, tps: list[TopicPartition], group_id=None, **config):
    """Everything in ``tps`` from offset 0 up to the current end offsets."""
    consumer = _consumer(bootstrap, group_id, **config)
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        end = consumer.end_offsets(tps)
        return _poll_until(consumer, lambda _: all(consumer.position(tp) >= end[tp] for tp in tps))
    finally:
        consumer.close(autocommit=False)


def _check_exact(records, expected_seqs, n_partitions: int) -> None:
    """Every expected seq exactly once; per key one partition and produce order kept."""
    seqs = sorted(r.value["seq"] for r in records)
    assert seqs == sorted(expected_seqs), "records lost or duplicated"
    partition_of_key: dict[str, int] = {}
    seqs_of_key: dict[str, list[int]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert r.key == f"k{r.value['seq'] % N_KEYS}"
        assert 0 <= r.partition < n_partitions
        assert partition_of_key.setdefault(r.key, r.partition) == r.partition
        seqs_of_key[r.key].append(r.value["seq"])
    for key, key_seqs in seqs_of_key.items():
        assert key_seqs == sorted(key_seqs), f"order of key {key} not kept"


def test_broker_answers_metadata(kafka_broker):
    host, port = parse_bootstrap(kafka_broker.bootstrap)
    admin = kafka_broker.admin()
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [(host, port)]
    assert cluster["controller_id"] == cluster["brokers"][0]["broker_id"]


def test_idempotent_keyed_produce_and_exact_group_consume(kafka_broker, kafka_topic):
    bootstrap, n_parts, n = kafka_broker.bootstrap, 4, 400
    topic = kafka_topic(partitions=n_parts)
    tps = [TopicPartition(topic, p) for p in range(n_parts)]

    producer = _producer(bootstrap)
    try:
        metas = [f.get(timeout=30) for f in _send(producer, topic, range(n), "a")]
    finally:
        producer.close()
    assert len({(m.partition, m.offset) for m in metas}) == n
    assert len({m.partition for m in metas}) > 1, "keys should spread over partitions"

    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(bootstrap, group)
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        records = _poll_until(consumer, lambda rs: len(rs) >= n)
        assert not any(consumer.poll(timeout_ms=300).values()), "more records than produced"
        _check_exact(records, range(n), n_parts)
        # The broker placed each record where the producer's metadata said it did.
        placed = {(m.partition, m.offset) for m in metas}
        assert {(r.partition, r.offset) for r in records} == placed

        # Commit half-way positions manually; the group remembers them.
        half = {tp: OffsetAndMetadata(consumer.position(tp) // 2, "", -1) for tp in tps}
        consumer.commit(half)
    finally:
        consumer.close(autocommit=False)

    again = _consumer(bootstrap, group)
    try:
        again.assign(tps)
        for tp in tps:
            committed = again.committed(tp)
            assert committed == half[tp].offset
            again.seek(tp, committed)
        rest = _poll_until(again, lambda rs: len(rs) >= n - sum(o.offset for o in half.values()))
    finally:
        again.close(autocommit=False)
    assert {(r.partition, r.offset) for r in rest} == {
        (m.partition, m.offset) for m in metas if m.offset >= half[tps[m.partition]].offset
    }


def test_transactions_commit_and_abort(kafka_broker, kafka_topic):
    bootstrap = kafka_broker.bootstrap
    topic = kafka_topic(partitions=2)
    tps = [TopicPartition(topic, p) for p in range(2)]

    producer = _producer(bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        _send(producer, topic, range(0, 20), "committed")
        producer.commit_transaction()
        producer.begin_transaction()
        _send(producer, topic, range(20, 30), "aborted")
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        _send(producer, topic, range(30, 40), "committed")
        producer.commit_transaction()
    finally:
        producer.close()

    committed = _read_from_start(bootstrap, tps, isolation_level="read_committed")
    _check_exact(committed, [*range(0, 20), *range(30, 40)], 2)
    everything = _read_from_start(bootstrap, tps, isolation_level="read_uncommitted")
    _check_exact(everything, range(40), 2)


def _cluster_id(kafka_broker) -> str:
    admin = kafka_broker.admin()
    try:
        return admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()


# Clients that outlive a broker restart: retry connecting every <= 1 s (kafka-python's default
# backoff grows to 30 s, which would only slow the tests down).
RECONNECT = {"reconnect_backoff_max_ms": 1000, "request_timeout_ms": 10_000}


def test_nothing_lost_across_broker_restart(kafka_broker, kafka_topic):
    """Produce and consume, restart the broker (same data dir), produce more with the same
    producer: the consumer that stayed open reads everything exactly once, and the data, the
    cluster and the committed group offsets all survive the restart."""
    bootstrap, n_parts = kafka_broker.bootstrap, 3
    topic = kafka_topic(partitions=n_parts)
    tps = [TopicPartition(topic, p) for p in range(n_parts)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    cluster = _cluster_id(kafka_broker)

    producer = _producer(bootstrap, **RECONNECT)
    consumer = _consumer(bootstrap, group, **RECONNECT)
    try:
        for f in _send(producer, topic, range(0, 100), "before"):
            f.get(timeout=30)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        seen = _poll_until(consumer, lambda rs: len(rs) >= 100)
        consumer.commit()
        committed_before = {tp: consumer.position(tp) for tp in tps}

        kafka_broker.restart()

        assert _cluster_id(kafka_broker) == cluster, "restart must keep the cluster"
        fresh = _consumer(bootstrap, group)
        try:
            assert {tp: fresh.committed(tp) for tp in tps} == committed_before
        finally:
            fresh.close(autocommit=False)
        for f in _send(producer, topic, range(100, 200), "after"):
            f.get(timeout=60)
        seen += _poll_until(consumer, lambda rs: len(rs) >= 100, timeout_s=60)
        assert not any(consumer.poll(timeout_ms=300).values()), "duplicates after the restart"
        _check_exact(seen, range(200), n_parts)
    finally:
        producer.close()
        consumer.close(autocommit=False)
    _check_exact(_read_from_start(bootstrap, tps), range(200), n_parts)


def test_producer_buffers_while_the_broker_is_down(kafka_broker, kafka_topic):
    """Records sent while the broker is stopped are delivered once it is back, exactly once."""
    bootstrap = kafka_broker.bootstrap
    topic = kafka_topic(partitions=2)
    tps = [TopicPartition(topic, p) for p in range(2)]

    producer = _producer(bootstrap, **RECONNECT)
    try:
        for f in _send(producer, topic, range(0, 50), "before"):
            f.get(timeout=30)
        kafka_broker.stop()
        during = _send(producer, topic, range(50, 100), "during")
        time.sleep(0.5)
        assert not any(f.is_done for f in during), "acknowledged by a stopped broker?"
        kafka_broker.start()
        for f in during:
            f.get(timeout=60)
    finally:
        producer.close()
    _check_exact(_read_from_start(bootstrap, tps), range(100), 2)
