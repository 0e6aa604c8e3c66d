"""Compacted Kafka topics: creating one, and reading one incrementally up to its current end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ...settings import KafkaSettings
from .seam import KafkaClient, NewTopic, kafka_client

__all__ = ["CompactedTopicClient", "ensure_compacted_topic", "read_to_end"]

#: Topic settings of the state, ledger and models topics: compacted, with segments rolled
#: every ten minutes and cleaned early, so that a partition keeps about one record per key.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "min.cleanable.dirty.ratio": "0.1",
}


def kafka_settings(kafka: KafkaSettings | str) -> KafkaSettings:
    """``kafka`` as settings (a ``host:port[,...]`` string: the default settings there)."""
    return KafkaSettings(bootstrap_servers=kafka) if isinstance(kafka, str) else kafka


@dataclass(eq=False)
class CompactedTopicClient:
    """A compacted topic that a replica reads incrementally and writes with a given producer:
    what the Kafka ledger and the Kafka changelog store share.

    Parameters
    ----------
    kafka
        The ``kafka`` settings (client, servers, security), or a bootstrap address.
    topic
        The topic.
    send
        ``send(topic, key, value)`` of the producer that writes records — the task's
        transactional producer in the service, so a record commits atomically with the outputs
        it implies.
    partitions
        Read only these partitions of the topic (a task reads its own; default: all).
    client
        The client library (default: the one the settings name).
    """

    kafka: KafkaSettings | str
    topic: str
    send: Callable | None = None
    partitions: list[int] | None = None
    client: KafkaClient | None = None
    _read_to: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.kafka = kafka_settings(self.kafka)
        if self.client is None:
            self.client = kafka_client(self.kafka.client)

    def start_reading_at(self, partition: int, offset: int) -> None:
        """Skip what lies before ``offset`` in ``partition`` (known to hold only records
        superseded by the ones starting there: e.g. the offset recorded with the last commit)."""
        self._read_to[partition] = max(self._read_to.get(partition, 0), int(offset))

    def read_new(self, on_message: Callable[[bytes | None, bytes | None], None]) -> None:
        """Call ``on_message(key, value)`` for every record committed since the last read."""
        assert isinstance(self.kafka, KafkaSettings) and self.client is not None
        read_to_end(self.client, self.kafka, self.topic, self._read_to, on_message, self.partitions)


def read_to_end(
    client: KafkaClient,
    settings: KafkaSettings,
    topic: str,
    read_to: dict[int, int],
    on_message: Callable[[bytes | None, bytes | None], None],
    partitions: list[int] | None = None,
) -> None:
    """Call ``on_message(key, value)`` for every committed record of ``topic`` after the offsets
    in ``read_to`` (per partition; updated in place) up to the topic's end right now — of every
    partition, or only of ``partitions``."""
    reader = client.reader(settings, read_committed=True)
    try:
        known = reader.partitions(topic)
        if partitions is not None:
            missing = set(partitions) - set(known)
            if missing:
                raise ValueError(f"topic {topic} has no partition {sorted(missing)}")
            known = list(partitions)
        tps = [(topic, p) for p in sorted(known)]
        if not tps:
            return
        reader.assign(tps, {tp: read_to[tp[1]] for tp in tps if tp[1] in read_to})
        reader.read_to_end(tps, lambda rec: on_message(rec.key, rec.value))
        for tp in tps:
            read_to[tp[1]] = reader.position(tp)
    finally:
        reader.close()


def ensure_compacted_topic(
    settings: KafkaSettings, topic: str, partitions: int, client: KafkaClient | None = None
) -> bool:
    """Create ``topic`` compacted (:data:`COMPACTED`) if it does not exist; True if created."""
    client = client or kafka_client(settings.client)
    with client.admin(settings) as admin:
        new = NewTopic(topic, partitions, settings.replication_factor, COMPACTED)
        return bool(admin.create_topics([new]))
