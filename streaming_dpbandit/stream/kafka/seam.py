"""The transport seam: what the service needs from a Kafka client, in the service's terms.

Every use of a Kafka client goes through these interfaces; only the modules of this package
that implement them import a client library (an import-linter contract checks it):

* :class:`GroupConsumer` — the *source* of a consumer-group member: subscribe with a
  :class:`Rebalance` listener (assignment, revocation and loss of partitions), poll records,
  seek, pause/resume, lag, commit offsets, the committed offsets with their metadata, and the
  group metadata that a transaction commits offsets with;
* :class:`Producer` — the *sink*: send, and a :meth:`~Producer.flush` that raises
  :class:`UndeliveredRecords` when any record sent since the last flush was not written;
* :class:`TransactionalProducer` — group mode's per-task producer: its records and the input
  offsets commit atomically, and a newer producer of the same id fences it
  (:class:`ProducerFenced`);
* :class:`Reader` — a consumer of chosen partitions without a group (a log, a compacted
  topic, the models topic);
* :class:`Admin` — topics: list, create, count partitions.

:class:`KafkaClient` makes them for one client library: kafka-python
(``python_client.py``, ``python_group.py``) or librdkafka through confluent-kafka
(``confluent_client.py``, ``confluent_group.py``), chosen by ``kafka.client``
(:func:`kafka_client`). The in-process transport (``stream/transport.py``) is the seam's
third implementation of a source and a sink, without a broker.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..transport import TP, Record, RecordSink, RecordSource

if TYPE_CHECKING:  # pragma: no cover
    from ...settings import KafkaSettings
    from ..transport import Transport

__all__ = [
    "CLIENTS",
    "Admin",
    "ClientError",
    "GroupConsumer",
    "KafkaClient",
    "NewTopic",
    "Producer",
    "ProducerFenced",
    "Reader",
    "Rebalance",
    "TransactionalProducer",
    "UndeliveredRecords",
    "cached_partition",
    "is_fenced",
    "kafka_client",
]


#: The client libraries of ``kafka.client`` (every real-broker test runs on each).
CLIENTS = ("kafka-python", "confluent-kafka")


class ClientError(RuntimeError):
    """A Kafka client operation failed (the client's own error is the ``__cause__``)."""


class UndeliveredRecords(ClientError):
    """Records sent since the last flush were not written (after the client's retries)."""

    def __init__(self, failures: list[str]):
        self.failures = failures
        super().__init__(
            f"{len(failures)} output record(s) could not be written; first: {failures[0]}"
        )


class ProducerFenced(ClientError):
    """A newer producer of the same transactional id (a new owner of the task) took over, or
    the consumer-group generation the offsets were read in is over: this producer can never
    commit again."""


#: Client errors (by class name) of a producer that a newer one of its transactional id replaced
FENCED_ERRORS = {"ProducerFencedError", "InvalidProducerEpochError", "CommitFailedError"}


def is_fenced(err: BaseException | None) -> bool:
    """Is ``err``, or an error it was raised from or wraps, a fencing?

    >>> is_fenced(ClientError("send failed")), is_fenced(ProducerFenced("commit failed"))
    (False, True)
    """
    while err is not None:
        if isinstance(err, ProducerFenced) or type(err).__name__ in FENCED_ERRORS:
            return True
        nxt = err.__cause__ or (err.args[1] if len(err.args) > 1 else None)
        err = nxt if isinstance(nxt, BaseException) else None
    return False


def cached_partition(cache: dict[TP, Any], tp: TP, make: Callable[[str, int], Any]) -> Any:
    """A client library's ``TopicPartition`` of ``tp`` (``make(topic, partition)``), made once
    per consumer (``cache``)."""
    obj = cache.get(tp)
    if obj is None:
        obj = cache[tp] = make(*tp)
    return obj


class Rebalance:
    """A :class:`GroupConsumer`'s listener. Every call runs on the application's thread,
    inside or right after :meth:`GroupConsumer.poll` (kafka-python runs its own listener on
    its I/O loop, where blocking would stop the heartbeats: its consumer calls these after
    the poll returns)."""

    def assigned(self, tps: list[TP]) -> Mapping[TP, int | None]:
        """Partitions added to this member. Returns where to start each: an offset, ``None``
        for the beginning; a partition left out starts at the group's committed offset (the
        beginning when there is none)."""
        return {}

    def revoked(self, tps: list[TP]) -> None:
        """Partitions taken from this member by a rebalance (it may still commit for them)."""

    def lost(self, tps: list[TP]) -> None:
        """Partitions taken without a revocation (the member's session ended): nothing may
        be committed for them any more. By default the same as :meth:`revoked`."""
        self.revoked(tps)


class GroupConsumer(RecordSource, abc.ABC):
    """A consumer-group member (the source of the single service, a group replica and a
    decision replica).

    :meth:`poll` returns records of assigned partitions, each partition in offset order,
    never a record of a partition revoked or re-positioned during that poll.
    """

    #: The static member id (``group.instance.id``; None: a dynamic member).
    instance_id: str | None = None
    #: Per partition, the offset after the last record :meth:`poll` returned.
    delivered: dict[TP, int]

    @abc.abstractmethod
    def subscribe(self, topics: list[str], listener: Rebalance) -> None:
        """Join the group for ``topics`` (once their partitions are known)."""

    def unsubscribe(self) -> None:
        """Leave the group's assignment (partitions are revoked)."""

    @abc.abstractmethod
    def rejoin(self) -> None:
        """Leave the assignment and subscribe again (the group rebalances)."""

    @abc.abstractmethod
    def seek(self, tp: TP, offset: int | None) -> None:
        """Read ``tp`` from ``offset`` (``None``: the beginning) at the next poll."""

    @abc.abstractmethod
    def commit(self, offsets: Mapping[TP, int] | None = None, asynchronous: bool = False) -> None:
        """Commit ``offsets`` (default: every consumed position) to the group."""

    @abc.abstractmethod
    def committed(self, tps: list[TP]) -> dict[TP, tuple[int, str] | None]:
        """The group's committed offset and its metadata per partition (None: no commit)."""

    @abc.abstractmethod
    def group_metadata(self) -> Any:
        """What :meth:`TransactionalProducer.send_offsets` commits offsets with."""

    def open(self, start_offsets: dict[TP, int]) -> None:  # (a source opened by subscribe)
        return None


class Producer(RecordSink, abc.ABC):
    """The sink: records to topics, acknowledged by every in-sync replica, idempotent."""

    @abc.abstractmethod
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        track: bool = False,
        timestamp_ms: int | None = None,
    ) -> Any:
        """Queue one record (a ``None`` value is a tombstone). Records of one key go to one
        partition (the Java client's murmur2 partitioner, whichever client), unless
        ``partition`` says which. ``track``: return a handle whose offset :meth:`offset_of`
        reads after a flush. ``timestamp_ms``: the record's timestamp (``CreateTime``; the
        stream clock of a consumer, ``stream/clock.py``), default now."""

    @abc.abstractmethod
    def flush(self, timeout_s: float | None = None) -> None:
        """Block until every queued record is written; raise :class:`UndeliveredRecords` if
        any was not (the snapshot that would imply it must not be written), or if any is still
        unacknowledged after ``timeout_s`` (default: the client's delivery timeout)."""

    def reset(self) -> None:
        """Forget every record not acknowledged yet (after :class:`UndeliveredRecords`, so
        that the caller can send them again)."""
        raise NotImplementedError

    def offset_of(self, handle: Any, timeout_s: float = 30.0) -> int:
        """The offset a sent record got (after :meth:`flush`)."""
        raise NotImplementedError

    @abc.abstractmethod
    def close(self, timeout_s: float | None = None) -> None:
        """Flush what is queued (within ``timeout_s``) and release the client."""


class TransactionalProducer(Producer, abc.ABC):
    """A producer with a ``transactional.id``: what it sends between :meth:`begin` and
    :meth:`commit` becomes visible to ``read_committed`` readers atomically with the consumer
    offsets given to :meth:`send_offsets`, or not at all. Every method raises
    :class:`ProducerFenced` once a newer producer of the id was initialised."""

    @abc.abstractmethod
    def init_transactions(self) -> None:
        """Register the id: fences every older producer of it and aborts its open
        transaction."""

    @abc.abstractmethod
    def begin(self) -> None: ...

    @abc.abstractmethod
    def send_offsets(self, offsets: Mapping[TP, tuple[int, str]], consumer: GroupConsumer) -> None:
        """Commit ``{tp: (offset, metadata)}`` for ``consumer``'s group in this transaction."""

    @abc.abstractmethod
    def commit(self) -> None:
        """Commit the transaction (raises if any of its records failed)."""

    @abc.abstractmethod
    def abort(self) -> None: ...

    def flush(self, timeout_s: float | None = None) -> None:
        self.wait()  # the commit is the durability point; a failure fails it

    @abc.abstractmethod
    def wait(self) -> None:
        """Block until every queued record was answered (failures fail :meth:`commit`)."""


class Reader(abc.ABC):
    """A consumer of chosen partitions, without a group (nothing committed)."""

    @abc.abstractmethod
    def partitions(self, topic: str, timeout_s: float = 0.0) -> list[int]:
        """The topic's partitions (empty when it does not exist after ``timeout_s``)."""

    @abc.abstractmethod
    def assign(self, tps: list[TP], starts: Mapping[TP, int] | None = None) -> None:
        """Read ``tps``, each from ``starts[tp]`` if given, else from its beginning."""

    @abc.abstractmethod
    def seek(self, tp: TP, offset: int) -> None: ...

    def seek_to_beginning(self, tps: Iterable[TP]) -> None:
        for tp, off in self.beginning_offsets(list(tps)).items():
            self.seek(tp, off)

    def seek_to_end(self, tps: Iterable[TP]) -> None:
        for tp, off in self.end_offsets(list(tps)).items():
            self.seek(tp, off)

    @abc.abstractmethod
    def position(self, tp: TP) -> int: ...

    @abc.abstractmethod
    def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]: ...

    @abc.abstractmethod
    def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        """The end (high watermark, or last stable offset when reading committed) now."""

    @abc.abstractmethod
    def offsets_for_times(self, times_ms: Mapping[TP, int]) -> dict[TP, int | None]:
        """The first offset at or after each time (None: none)."""

    @abc.abstractmethod
    def pause(self, tps: Iterable[TP]) -> None: ...

    @abc.abstractmethod
    def resume(self, tps: Iterable[TP]) -> None: ...

    @abc.abstractmethod
    def poll(self, timeout_s: float, max_records: int = 5000) -> list[Record]:
        """Records of the assigned partitions (each in offset order; ``value`` may be
        ``None``: a tombstone)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def read_to_end(self, tps: list[TP], on_record: Callable[[Record], object]) -> None:
        """Call ``on_record(record)`` for every record from the current positions to the end
        offsets of now."""
        if not tps:
            return
        ends = self.end_offsets(tps)
        while any(self.position(tp) < ends[tp] for tp in tps):
            for rec in self.poll(0.5):
                on_record(rec)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create: partitions, replication, topic configs (e.g. compaction)."""

    name: str
    partitions: int
    replication: int = 1
    configs: Mapping[str, str] | None = None


class Admin(abc.ABC):
    """Topic administration."""

    @abc.abstractmethod
    def list_topics(self) -> set[str]: ...

    @abc.abstractmethod
    def create_topics(self, topics: list[NewTopic]) -> list[str]:
        """Create the topics that do not exist yet; returns the names created."""

    @abc.abstractmethod
    def partition_count(self, topic: str, wait_s: float = 30.0) -> int:
        """Partitions of ``topic`` (0 if it does not exist); waits for a just-created one."""

    @abc.abstractmethod
    def group_offsets(self, group: str) -> dict[TP, int]:
        """The offsets consumer group ``group`` committed, per partition."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KafkaClient(abc.ABC):
    """Makes the seam's parts for one Kafka client library from the ``kafka`` settings."""

    #: ``kafka.client``'s name of the library
    name: str

    @abc.abstractmethod
    def group_consumer(
        self,
        settings: KafkaSettings,
        instance_id: str | None,
        *,
        co_partitioned: bool = False,
        commit_on_revoke: Callable[[], None] | None = None,
        max_poll_records: int | None = None,
    ) -> GroupConsumer:
        """A member of ``settings.group_id``. ``co_partitioned``: a member gets the same
        partition indices of every subscribed topic (group mode's tasks).
        ``commit_on_revoke``: called before partitions are given away (a decision replica
        flushes its outputs), after which every consumed offset is committed."""

    @abc.abstractmethod
    def producer(self, settings: KafkaSettings, **overrides: Any) -> Producer:
        """The service's producer (``acks=all``, idempotent, batched as configured);
        ``overrides``: ``linger_ms``, ``batch_bytes`` (a load generator's), ``max_block_ms``
        (how long a send may wait for the broker's metadata: the gateway's fail fast)."""

    @abc.abstractmethod
    def transactional_producer(
        self, settings: KafkaSettings, transactional_id: str, timeout_ms: int
    ) -> TransactionalProducer: ...

    @abc.abstractmethod
    def reader(self, settings: KafkaSettings, read_committed: bool = True) -> Reader: ...

    @abc.abstractmethod
    def admin(self, settings: KafkaSettings) -> Admin: ...

    def transport(self, settings: KafkaSettings) -> Transport:
        """The single service's transport over this client."""
        from .transport import KafkaTransport

        return KafkaTransport(settings, self)


def kafka_client(name: str = "kafka-python") -> KafkaClient:
    """The client library of ``kafka.client`` (``kafka-python`` or ``confluent-kafka``).

    >>> kafka_client().name, kafka_client("confluent-kafka").name
    ('kafka-python', 'confluent-kafka')
    """
    if name == "confluent-kafka":
        from .confluent_client import ConfluentClient

        return ConfluentClient()
    if name != "kafka-python":
        raise ValueError(f"unknown Kafka client {name!r}")
    from .python_client import KafkaPythonClient

    return KafkaPythonClient()
