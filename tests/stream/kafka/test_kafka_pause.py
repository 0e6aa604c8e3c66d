"""Pausing and resuming an input partition on the real broker (kafka-python 3.0.12).

kafka-python parks the data it fetched for a paused partition and, once the partition resumes,
hands it back only when no other partition is being drained; next to a busy partition a resumed
one was never fetched again. ``resume_partition`` drops the parked data so the client fetches
from the position again: every record must then arrive exactly once, in order. librdkafka
(``kafka.client: confluent-kafka``) passes the same test with its plain pause and resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streaming_dpbandit.stream.kafka.python_group import resume_partition

pytestmark = pytest.mark.kafka

N_BUSY, N_PAUSED = 6000, 20_000


def fill(bootstrap: str, busy: str, quiet: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
    for i in range(max(N_BUSY, N_PAUSED)):
        if i < N_BUSY:  # large records, as contexts: few per fetch
            producer.send(busy, value=b"c" * 3000 + str(i).encode())
        if i < N_PAUSED:  # small ones, as feedback: many per fetch
            producer.send(quiet, value=str(i).encode())
    producer.flush()
    producer.close()


def pause_next_to_a_busy_partition(
    busy: str,
    quiet: str,
    poll_once: Callable[[], Iterable[tuple[str, int]]],
    pause: Callable[[], None],
    resume: Callable[[], None],
) -> None:
    """Pause ``quiet`` once it delivered, resume it while ``busy`` still drains; every record
    of both must then arrive once, in order. ``poll_once`` yields (topic, offset) pairs."""
    got: dict[str, list[int]] = {busy: [], quiet: []}

    def poll(times: int) -> None:
        for _ in range(times):
            for topic, offset in poll_once():
                got[topic].append(offset)

    while not got[quiet]:
        poll(1)
    pause()
    held = len(got[quiet])
    poll(5)
    assert len(got[quiet]) == held  # paused: nothing more from it
    assert len(got[busy]) < N_BUSY  # the busy partition is still being drained
    resume()
    while len(got[quiet]) == held and len(got[busy]) < N_BUSY:
        poll(1)
    # it is fetched again while the busy partition still has records to drain
    assert len(got[quiet]) > held and len(got[busy]) < N_BUSY
    for _ in range(300):
        poll(1)
        if len(got[quiet]) == N_PAUSED and len(got[busy]) == N_BUSY:
            break
    assert got[quiet] == list(range(N_PAUSED))  # none skipped, none repeated, in order
    assert got[busy] == list(range(N_BUSY))


def test_a_resumed_partition_delivers_every_record_once_next_to_a_busy_one(
    kafka_bootstrap, kafka_topic
):
    busy, quiet = kafka_topic(1), kafka_topic(1)
    fill(kafka_bootstrap, busy, quiet)
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, max_poll_records=500
    )
    tps = [TopicPartition(busy, 0), TopicPartition(quiet, 0)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)

    def poll_once():
        for tp, msgs in consumer.poll(timeout_ms=200).items():
            yield from ((tp.topic, m.offset) for m in msgs)

    try:
        pause_next_to_a_busy_partition(
            busy,
            quiet,
            poll_once,
            lambda: consumer.pause(tps[1]),
            lambda: resume_partition(consumer, tps[1]),
        )
    finally:
        consumer.close()


def test_librdkafka_resumes_a_paused_partition_next_to_a_busy_one_without_a_workaround(
    kafka_bootstrap, kafka_topic
):
    """The same scenario with confluent-kafka's consumer and its plain ``pause``/``resume``
    (what the librdkafka source, :mod:`~streaming_dpbandit.stream.kafka.confluent_client`, calls):
    librdkafka drops what it fetched for a paused partition and fetches again from the
    application's position on resume, so kafka-python's workaround is not needed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTP

    busy, quiet = kafka_topic(1), kafka_topic(1)
    fill(kafka_bootstrap, busy, quiet)
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": busy, "enable.auto.commit": False}
    )
    consumer.assign([CTP(busy, 0, OFFSET_BEGINNING), CTP(quiet, 0, OFFSET_BEGINNING)])

    def poll_once():
        for m in consumer.consume(500, 0.2):
            assert m.error() is None, m.error()
            yield m.topic(), m.offset()

    try:
        pause_next_to_a_busy_partition(
            busy,
            quiet,
            poll_once,
            lambda: consumer.pause([CTP(quiet, 0)]),
            lambda: consumer.resume([CTP(quiet, 0)]),
        )
    finally:
        consumer.close()
