"""Compacted Kafka topics: creating one, and reading one incrementally up to its current end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["CompactedTopicClient", "ensure_compacted_topic", "read_to_end"]


@dataclass(eq=False)
class CompactedTopicClient:
    """A compacted topic that a replica reads incrementally and writes with a given producer:
    what the Kafka ledger and the Kafka changelog store share.

    Parameters
    ----------
    bootstrap, topic
        Where the topic lives.
    send
        ``send(topic, key, value)`` of the producer that writes records — the task's
        transactional producer in the service, so a record commits atomically with the outputs
        it implies.
    consumer_config
        Extra kafka-python consumer settings (security).
    partitions
        Read only these partitions of the topic (a task reads its own; default: all).
    """

    bootstrap: str | list[str]
    topic: str
    send: Callable | None = None
    consumer_config: dict | None = None
    partitions: list[int] | None = None
    _read_to: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def start_reading_at(self, partition: int, offset: int) -> None:
        """Skip what lies before ``offset`` in ``partition`` (known to hold only records
        superseded by the ones starting there: e.g. the offset recorded with the last commit)."""
        self._read_to[partition] = max(self._read_to.get(partition, 0), int(offset))

    def read_new(self, on_message: Callable[[bytes, bytes | None], None]) -> None:
        """Call ``on_message(key, value)`` for every record committed since the last read."""
        read_to_end(
            self.bootstrap,
            self.topic,
            self._read_to,
            on_message,
            self.consumer_config,
            self.partitions,
        )


def read_to_end(
    bootstrap: str | list[str],
    topic: str,
    read_to: dict[int, int],
    on_message: Callable[[bytes, bytes | None], None],
    consumer_config: dict | None = None,
    partitions: list[int] | None = None,
) -> None:
    """Call ``on_message(key, value)`` for every committed record of ``topic`` after the offsets
    in ``read_to`` (per partition; updated in place) up to the topic's end right now — of every
    partition, or only of ``partitions``."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        **(consumer_config or {}),
    )
    try:
        known = c.partitions_for_topic(topic) or set()
        if partitions is not None:
            missing = set(partitions) - set(known)
            if missing:
                raise ValueError(f"topic {topic} has no partition {sorted(missing)}")
            known = partitions
        parts = [TopicPartition(topic, p) for p in sorted(known)]
        if not parts:
            return
        c.assign(parts)
        ends = c.end_offsets(parts)
        for tp in parts:
            c.seek(tp, read_to.get(tp.partition, 0))
        while any(c.position(tp) < ends[tp] for tp in parts):
            for batch in c.poll(timeout_ms=500).values():
                for m in batch:
                    on_message(m.key, m.value)
        for tp in parts:
            read_to[tp.partition] = c.position(tp)
    finally:
        c.close()


def ensure_compacted_topic(settings, topic: str, partitions: int) -> bool:
    """Create ``topic`` with ``cleanup.policy=compact`` if it does not exist; True if created
    (``settings``: :class:`~streaming_dpbandit.settings.KafkaSettings`)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    from .transport import client_options

    admin = KafkaAdminClient(**client_options(settings))
    try:
        if topic in set(admin.list_topics()):
            return False
        compact = {"cleanup.policy": "compact"}
        new = NewTopic(topic, partitions, settings.replication_factor, topic_configs=compact)
        try:
            admin.create_topics([new])
        except TopicAlreadyExistsError:
            return False
        return True
    finally:
        admin.close()
