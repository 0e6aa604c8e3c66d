"""The seam on librdkafka (confluent-kafka): producers, a group-less reader, topic
administration (the group consumer is in ``confluent_group.py``).

librdkafka connects lazily and retries for ever: a producer asks for metadata once when it is
made, so that an unreachable broker is one clear error at start, as with kafka-python. A
delivery that fails after librdkafka's retries makes :meth:`ConfluentProducer.flush` raise.
Records of one key go to the partition the Java client's (and kafka-python's) murmur2
partitioner picks, so that switching clients keeps every key on its partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ...settings import KafkaSettings
from ..transport import TP, Record
from .options import confluent_client_config, confluent_producer_config
from .seam import (
    Admin,
    ClientError,
    GroupConsumer,
    KafkaClient,
    NewTopic,
    Producer,
    ProducerFenced,
    Reader,
    TransactionalProducer,
    UndeliveredRecords,
)

__all__ = [
    "ConfluentAdmin",
    "ConfluentClient",
    "ConfluentProducer",
    "ConfluentReader",
    "ConfluentTransactionalProducer",
    "Message",
    "is_fatal",
]

log = logging.getLogger("streaming_dpbandit.kafka")

#: librdkafka's "no offset": an unassigned partition's position or watermark
NO_OFFSET = -1001


def is_fatal(err: Any) -> bool:
    """Is this librdkafka error fatal? A consumer's fatal error reaches it as an error of
    code ``_FATAL`` whose own ``fatal()`` is false (confluent-kafka 2.16)."""
    from confluent_kafka import KafkaError

    return bool(err.fatal()) or err.code() == KafkaError._FATAL


class Message:
    """A polled record: the fields of :class:`~..transport.Record` read from librdkafka's
    message once (a plain slotted object is ~5× cheaper to make than the frozen dataclass,
    as kafka-python's consumer hands on its own ``ConsumerRecord``)."""

    __slots__ = ("key", "offset", "partition", "timestamp_ms", "topic", "value")

    def __init__(self, topic, partition, offset, key, value, timestamp_ms):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms

    @classmethod
    def of(cls, m: Any) -> Message:
        ts = m.timestamp()[1]
        return cls(
            m.topic(), m.partition(), m.offset(), m.key(), m.value(), ts if ts >= 0 else None
        )


class _Sent:
    """The handle of a sent record whose offset is wanted (filled by its delivery report)."""

    __slots__ = ("error", "offset")

    def __init__(self) -> None:
        self.offset: int | None = None
        self.error: Any = None

    def __call__(self, err: Any, msg: Any) -> None:
        self.error = err
        if err is None:
            self.offset = msg.offset()


class ConfluentProducer(Producer):
    """librdkafka's idempotent producer (``acks=all``) behind the sink.

    Parameters
    ----------
    config
        librdkafka properties (:func:`~.options.confluent_producer_config`).
    timeout_s
        How long the first metadata request may take.
    """

    #: A Python call per failed record (a transaction reports failures at its commit instead,
    #: and reports each record a handle tracks: no Python call for the others)
    report_failures = True

    def __init__(self, config: dict[str, Any], timeout_s: float = 10.0):
        from confluent_kafka import Producer as _Producer

        self._failed: list[str] = []
        self._fatal: Any = None
        reports = (
            # a Python call per failed record only, not per record
            {"on_delivery": self._on_delivery, "delivery.report.only.error": True}
            if self.report_failures
            else {}
        )
        self.producer = _Producer({**config, "error_cb": self._on_error, **reports})
        # an unreachable broker: one clear error now (KafkaException), not a silent retry
        self.producer.list_topics(timeout=timeout_s)

    def _on_error(self, err: Any) -> None:
        if is_fatal(err):
            self._fatal = err
        else:
            log.debug("kafka producer: %s", err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def _check(self) -> None:
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            raise ClientError(f"Kafka producer failed: {err.str()}")

    def send(
        self, topic, key, value, partition=None, headers=None, track=False, timestamp_ms=None
    ) -> Any:
        kw: dict[str, Any] = {}
        handle = None
        if timestamp_ms is not None:
            kw["timestamp"] = timestamp_ms
        if track:
            handle = kw["on_delivery"] = _Sent()
        if partition is not None:
            kw["partition"] = partition
        if headers:
            kw["headers"] = headers
        while True:
            try:
                self.producer.produce(topic, value, key, **kw)
                return handle
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.05)
                self._check()

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        """Records of one key, in order (librdkafka hashes the key in C: no per-call cache)."""
        produce = self.producer.produce
        self.producer.poll(0)  # delivery reports and client errors
        for i, value in enumerate(values):
            try:
                produce(topic, value, key)
            except BufferError:  # the local queue is full: the slow path, in order
                for rest in values[i:]:
                    self.send(topic, key, rest)
                return

    def flush(self, timeout_s: float | None = None) -> None:
        left = self.producer.flush(-1 if timeout_s is None else timeout_s)
        self._check()
        if self._failed or left:
            failed, self._failed = self._failed, []
            raise UndeliveredRecords(failed or [f"{left} unacknowledged after {timeout_s} s"])

    def reset(self) -> None:
        self.producer.purge()
        self.producer.poll(0)  # (purged records report their failure here)
        self._failed = []

    def offset_of(self, handle: Any, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while handle.offset is None and handle.error is None:
            if time.monotonic() > deadline:
                raise ClientError("no delivery report for a sent record")
            self.producer.poll(0.05)
        if handle.error is not None:
            raise ClientError(f"a sent record failed: {handle.error}")
        return int(handle.offset)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.flush(-1 if timeout_s is None else timeout_s)


def _raise(what: str, err: Exception) -> Exception:
    """The seam's error for a librdkafka transaction error (``KafkaException``)."""
    from confluent_kafka import KafkaError

    e = err.args[0] if err.args else None
    code = e.code() if isinstance(e, KafkaError) else None
    fenced = code in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.FENCED_INSTANCE_ID,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.FENCED_MEMBER_EPOCH,
        KafkaError.STALE_MEMBER_EPOCH,
    )
    cls = ProducerFenced if fenced else ClientError
    return cls(f"{what} failed: {e.str() if isinstance(e, KafkaError) else err}")


class ConfluentTransactionalProducer(ConfluentProducer, TransactionalProducer):
    """librdkafka's transactional producer; its errors become :class:`~.seam.ProducerFenced`
    (a newer owner) or :class:`~.seam.ClientError`."""

    report_failures = False  # a failed record fails the commit

    def __init__(self, config: dict[str, Any], timeout_s: float = 30.0):
        super().__init__(config)
        self.timeout_s = timeout_s

    def _call(self, what: str, fn, *args):
        from confluent_kafka import KafkaException

        try:
            return fn(*args)
        except KafkaException as err:
            raise _raise(what, err) from err

    def init_transactions(self) -> None:
        self._call("init_transactions", self.producer.init_transactions, self.timeout_s)

    def begin(self) -> None:
        self._call("begin_transaction", self.producer.begin_transaction)

    def send(
        self, topic, key, value, partition=None, headers=None, track=False, timestamp_ms=None
    ) -> Any:
        from confluent_kafka import KafkaException

        try:
            return super().send(topic, key, value, partition, headers, track, timestamp_ms)
        except KafkaException as err:  # an aborted or fenced transaction
            raise _raise("send", err) from err

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        for v in values:
            self.send(topic, key, v)

    def wait(self) -> None:
        self.producer.flush()
        self._check()
        if self._failed:  # the transaction cannot commit: say why now
            failed, self._failed = self._failed, []
            raise ClientError(str(UndeliveredRecords(failed)))

    def send_offsets(self, offsets: Mapping[TP, tuple[int, str]], consumer: GroupConsumer) -> None:
        from confluent_kafka import TopicPartition

        parts = [TopicPartition(t, p, off, meta) for (t, p), (off, meta) in offsets.items()]
        self._call(
            "send_offsets_to_transaction",
            self.producer.send_offsets_to_transaction,
            parts,
            consumer.group_metadata(),
            self.timeout_s,
        )

    def commit(self) -> None:
        self._call("commit_transaction", self.producer.commit_transaction, self.timeout_s)

    def abort(self) -> None:
        self._call("abort_transaction", self.producer.abort_transaction, self.timeout_s)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.flush(0 if timeout_s is None else timeout_s)


class ConfluentReader(Reader):
    """librdkafka's consumer without a subscription, assigned partitions by hand.

    A position is set by re-assigning at it (librdkafka's ``seek`` needs a partition that is
    already being fetched). The end of a partition is reported as an event
    (``enable.partition.eof``), which also moves the position past transaction markers:
    control records occupy offsets that are never delivered."""

    def __init__(self, config: dict[str, Any]):
        from confluent_kafka import Consumer

        self.consumer = Consumer({**config, "enable.partition.eof": True})
        self.tps: list[TP] = []
        self.positions: dict[TP, int] = {}

    def partitions(self, topic: str, timeout_s: float = 0.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            meta = self.consumer.list_topics(topic, timeout=10.0).topics.get(topic)
            parts = [] if meta is None or meta.error is not None else sorted(meta.partitions)
            if parts or time.monotonic() >= deadline:
                return parts
            time.sleep(0.2)

    @staticmethod
    def _parts(tps: Iterable[TP], offsets: Mapping[TP, int] | None = None) -> list[Any]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if offsets is None:
            return [TopicPartition(t, p) for t, p in tps]
        return [TopicPartition(t, p, offsets.get((t, p), OFFSET_BEGINNING)) for t, p in tps]

    def assign(self, tps: list[TP], starts: Mapping[TP, int] | None = None) -> None:
        self.tps = list(tps)
        self.positions = {tp: int(off) for tp, off in (starts or {}).items()}
        self.consumer.assign(self._parts(self.tps, self.positions))

    def seek(self, tp: TP, offset: int) -> None:
        self.positions[tp] = int(offset)
        if tp in self.tps:
            self.consumer.assign(self._parts(self.tps, self.positions))

    def position(self, tp: TP) -> int:
        off = self.positions.get(tp)
        return self.beginning_offsets([tp])[tp] if off is None else off

    def _watermarks(self, tps: list[TP]) -> dict[TP, tuple[int, int]]:
        return {
            tp: self.consumer.get_watermark_offsets(part, timeout=10.0)
            for tp, part in zip(tps, self._parts(tps))
        }

    def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: int(lo) for tp, (lo, _hi) in self._watermarks(tps).items()}

    def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        return {tp: int(hi) for tp, (_lo, hi) in self._watermarks(tps).items()}

    def offsets_for_times(self, times_ms: Mapping[TP, int]) -> dict[TP, int | None]:
        got = self.consumer.offsets_for_times(self._parts(list(times_ms), times_ms), timeout=10.0)
        return {(p.topic, p.partition): (p.offset if p.offset >= 0 else None) for p in got}

    def pause(self, tps: Iterable[TP]) -> None:
        parts = self._parts(tps)
        if parts:
            self.consumer.pause(parts)

    def resume(self, tps: Iterable[TP]) -> None:
        parts = self._parts(tps)
        if parts:
            self.consumer.resume(parts)

    def poll(self, timeout_s: float, max_records: int = 5000) -> list[Record]:
        from confluent_kafka import KafkaError

        out: list[Any] = []
        for m in self.consumer.consume(max_records, timeout_s):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # (past any transaction marker)
                    tp = (str(m.topic()), int(m.partition() or 0))
                    self.positions[tp] = max(self.positions.get(tp, 0), int(m.offset() or 0))
                elif is_fatal(err):
                    raise ClientError(f"Kafka consumer failed: {err.str()}")
                else:
                    log.debug("kafka reader: %s", err)
                continue
            rec = Message.of(m)
            self.positions[(rec.topic, rec.partition)] = rec.offset + 1
            out.append(rec)
        return out

    def close(self) -> None:
        from .confluent_group import close_consumer

        close_consumer(self.consumer)


class ConfluentAdmin(Admin):
    """librdkafka's ``AdminClient``."""

    def __init__(self, config: dict[str, Any]):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient(config)

    def list_topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=10.0).topics)

    def create_topics(self, topics: list[NewTopic]) -> list[str]:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic as CNewTopic  # type: ignore[attr-defined]

        existing = self.list_topics()
        new = [t for t in topics if t.name not in existing]
        if not new:
            return []
        futures = self.admin.create_topics(
            [
                CNewTopic(t.name, t.partitions, t.replication, config=dict(t.configs or {}))
                for t in new
            ]
        )
        created = []
        for name, fut in futures.items():
            try:
                fut.result(timeout=30)
                created.append(name)
            except KafkaException as err:
                if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        return created

    def partition_count(self, topic: str, wait_s: float = 30.0) -> int:
        deadline = time.monotonic() + wait_s
        while True:
            meta = self.admin.list_topics(topic, timeout=10.0).topics.get(topic)
            n = 0 if meta is None or meta.error is not None else len(meta.partitions)
            if n > 0 or time.monotonic() > deadline:
                return n
            time.sleep(0.2)

    def group_offsets(self, group: str) -> dict[TP, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        got = futures[group].result(timeout=30)
        return {(p.topic, p.partition): p.offset for p in got.topic_partitions if p.offset >= 0}

    def close(self) -> None:
        return None


class ConfluentClient(KafkaClient):
    """The seam on librdkafka (``kafka.client: confluent-kafka``)."""

    name = "confluent-kafka"

    # copy kept (~ python_client.py): the seam's group_consumer signature, as each client states it
    def group_consumer(
        self,
        settings: KafkaSettings,
        instance_id: str | None,
        *,
        co_partitioned: bool = False,
        commit_on_revoke=None,
        max_poll_records: int | None = None,
    ) -> GroupConsumer:
        from .confluent_group import ConfluentGroupConsumer

        return ConfluentGroupConsumer(
            settings, instance_id, co_partitioned=co_partitioned, commit_on_revoke=commit_on_revoke
        )

    def producer(self, settings: KafkaSettings, **overrides: Any) -> Producer:
        config = confluent_producer_config(settings)
        if "linger_ms" in overrides:
            config["linger.ms"] = overrides["linger_ms"]
        if "batch_bytes" in overrides:
            config["batch.size"] = overrides["batch_bytes"]
        # (max_block_ms: librdkafka's produce never blocks on metadata; nothing to set)
        return ConfluentProducer(config, timeout_s=max(10.0, settings.session_timeout_ms / 1000))

    def transactional_producer(
        self, settings: KafkaSettings, transactional_id: str, timeout_ms: int
    ) -> TransactionalProducer:
        config = {
            **confluent_producer_config(settings),
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
        }
        return ConfluentTransactionalProducer(config)

    def reader(self, settings: KafkaSettings, read_committed: bool = True) -> Reader:
        config = {
            **confluent_client_config(settings),
            "group.id": f"{settings.group_id}.reader",  # required; nothing is committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        }
        return ConfluentReader(config)

    def admin(self, settings: KafkaSettings) -> Admin:
        return ConfluentAdmin(confluent_client_config(settings))
