"""Readings of, and workarounds for, a kafka-python consumer: partition metadata, a paused
partition that resumes, the consumer's lag (used by the transports in this package)."""

from __future__ import annotations

import logging

from ..transport import TP

__all__ = ["consumer_lag", "resume_partition", "wait_for_partitions"]

log = logging.getLogger("streaming_dpbandit.kafka")


def wait_for_partitions(consumer, topics, timeout_s: float = 30.0) -> None:
    """Wait until the consumer's metadata lists partitions of every topic. Joining a group
    while a just-created topic has no partition metadata yet gives an empty assignment, and
    kafka-python 3.0 can then stay without partitions (its rejoin stalls)."""
    import time

    deadline = time.monotonic() + timeout_s
    missing = list(topics)
    while missing and time.monotonic() < deadline:
        missing = [t for t in missing if not consumer.partitions_for_topic(t)]
        if missing:
            consumer.poll(timeout_ms=0)  # lets the client refresh its metadata
            time.sleep(0.2)
    if missing:
        log.warning("no partition metadata for %s after %.0f s", ", ".join(missing), timeout_s)


def resume_partition(consumer, partition) -> None:
    """Resume a paused partition (``TopicPartition``) of a kafka-python consumer, and make sure
    it is fetched again.

    kafka-python 3.0.12 keeps the data it fetched for a partition that was paused ("parked",
    KAFKA-7548) and hands it back only when, at the start of a poll, no other partition's
    records are being drained. A partition that resumes while another one stays busy is then
    never fetched again: the client skips fetching partitions with parked data (measured: a
    feedback partition resumed next to a busy contexts partition got no record in 10 polls).
    The parked data was never returned, so the consumer's position is still at its first
    record: dropping it makes the client fetch again from there, and no record is skipped or
    repeated (tests/stream/kafka/test_kafka_pause.py).
    """
    consumer.resume(partition)
    fetcher = getattr(consumer, "_fetcher", None)
    for name in ("_paused_partition_records", "_paused_completed_fetches"):
        parked = getattr(fetcher, name, None)
        if isinstance(parked, dict):
            data = parked.pop(partition, None)
            drain = getattr(data, "drain", None)
            if drain is not None:
                drain()


def consumer_lag(consumer, parts) -> dict[TP, int]:
    """End offset minus position of each partition (``TopicPartition``) of a kafka-python
    consumer.

    The end offsets are the high watermarks of the latest fetch responses, which the client
    already holds: asking the broker (``end_offsets``) is a round trip that took ~40 ms, ~10 %
    of a busy service loop that refreshes its gauges twice a second. Partitions not fetched
    yet are asked for.
    """
    if not parts:
        return {}
    ends = {}
    for p in parts:
        try:
            ends[p] = consumer.highwater(p)
        except Exception:  # not assigned any more
            continue
    unknown = [p for p, end in ends.items() if end is None]
    if unknown:
        try:
            ends.update(consumer.end_offsets(unknown))
        except Exception:  # the broker is away
            return {}
    out = {}
    for p, end in ends.items():
        try:
            out[(p.topic, p.partition)] = max(0, end - consumer.position(p))
        except Exception:
            continue
    return out
