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
from kafka_broker import parse_bootstrap

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


def test_nothing_lost_across_broker_restart(kafka_broker, kafka_topic):
    """Produce, stop the broker while more is being sent, start it on the same data, produce
    more: a consumer that stays open reads everything exactly once, and committed group offsets
    and the idempotent producer both survive the restart."""
    bootstrap, n_parts = kafka_broker.bootstrap, 3
    topic = kafka_topic(partitions=n_parts)
    tps = [TopicPartition(topic, p) for p in range(n_parts)]
    group = f"g-{uuid.uuid4().hex[:8]}"

    producer = _producer(bootstrap, request_timeout_ms=10_000)
    consumer = _consumer(bootstrap, group, request_timeout_ms=20_000)
    try:
        for f in _send(producer, topic, range(0, 100), "before"):
            f.get(timeout=30)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        seen = _poll_until(consumer, lambda rs: len(rs) >= 100)
        consumer.commit()

        kafka_broker.stop()
        # Sent while the broker is down: buffered by the producer, delivered after the start.
        during = _send(producer, topic, range(100, 150), "during")
        kafka_broker.start()
        after = _send(producer, topic, range(150, 250), "after")
        producer.flush(timeout=60)
        for f in during + after:
            assert f.succeeded(), f.exception

        seen += _poll_until(consumer, lambda rs: len(rs) >= 150, timeout_s=60)
        assert not any(consumer.poll(timeout_ms=300).values()), "duplicates after the restart"
        _check_exact(seen, range(250), n_parts)

        positions = {tp: consumer.position(tp) for tp in tps}
        consumer.commit()
    finally:
        producer.close()
        consumer.close(autocommit=False)

    # A second restart: data, committed offsets and the group all come back.
    kafka_broker.restart()
    _check_exact(_read_from_start(bootstrap, tps), range(250), n_parts)
    check = _consumer(bootstrap, group)
    try:
        assert {tp: check.committed(tp) for tp in tps} == positions
    finally:
        check.close(autocommit=False)
