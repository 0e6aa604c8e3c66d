"""The seam on kafka-python: producers, a group-less reader, topic administration
(the group consumer is in ``python_group.py``).

kafka-python's ``flush()`` returns when every record is done, failed ones included (after
``delivery_timeout_ms``): :class:`KafkaPythonProducer` keeps the futures of the records sent
since the last flush and raises :class:`~.seam.UndeliveredRecords` when one failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ...settings import KafkaSettings
from ..transport import TP, Record
from .options import client_options, group_consumer_options, producer_options
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
    is_fenced,
)

__all__ = [
    "KafkaPythonAdmin",
    "KafkaPythonClient",
    "KafkaPythonProducer",
    "KafkaPythonReader",
    "KafkaPythonTransactionalProducer",
]

log = logging.getLogger("streaming_dpbandit.kafka")

#: Unconfirmed sends kept before the acknowledged ones are dropped from the list.
UNCONFIRMED_PRUNE = 50_000


def _tp(tp: TP) -> Any:
    from kafka import TopicPartition

    return TopicPartition(*tp)


class KafkaPythonProducer(Producer):
    """kafka-python's ``KafkaProducer`` (idempotent, ``acks=all``) behind the sink.

    Parameters
    ----------
    options
        ``KafkaProducer`` keyword arguments (:func:`~.options.producer_options`).
    """

    def __init__(self, options: dict[str, Any]):
        self.options = options
        self._key_parts: dict[tuple[str, bytes], tuple[list[int], int]] = {}
        self._open()

    def _open(self) -> None:
        from kafka import KafkaProducer

        self.producer = KafkaProducer(**self.options)
        # the futures of the records sent since the last flush (see the module docstring)
        self._unconfirmed: list[Any] = []

    def send(
        self, topic, key, value, partition=None, headers=None, track=False, timestamp_ms=None
    ) -> Any:
        fut = self.producer.send(
            topic,
            key=key,
            value=value,
            partition=partition,
            headers=headers,
            timestamp_ms=timestamp_ms,
        )
        self._unconfirmed.append(fut)
        if len(self._unconfirmed) > UNCONFIRMED_PRUNE:
            self._prune()
        return fut

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        """Records of one key go to one partition: the one the default partitioner picks for
        the key, computed once per call instead of hashing the key (murmur2 in pure Python,
        ~2 µs) for every record."""
        if key is None:
            super().send_many(topic, key, values)
            return
        part = self.key_partition(topic, key)
        send = self.producer.send
        self._unconfirmed += [send(topic, key=key, value=v, partition=part) for v in values]
        if len(self._unconfirmed) > UNCONFIRMED_PRUNE:
            self._prune()

    def _prune(self) -> None:
        """Forget the records already acknowledged (memory stays bounded between flushes);
        a failed one is kept for :meth:`flush` to report."""
        self._unconfirmed = [f for f in self._unconfirmed if not f.succeeded()]

    def key_partition(self, topic: str, key: bytes) -> int:
        """The partition of ``topic`` that kafka-python's default partitioner (and the Java
        client's) assigns to ``key``: murmur2 of the key over the sorted partitions."""
        from .partitioner import murmur2_partition

        parts = sorted(self.producer.partitions_for(topic))
        cached = self._key_parts.get((topic, key))
        if cached is None or cached[0] != parts:
            cached = (parts, parts[murmur2_partition(key, len(parts))])
            self._key_parts[(topic, key)] = cached
        return cached[1]

    def flush(self, timeout_s: float | None = None) -> None:
        try:
            self.producer.flush(timeout=timeout_s)
        except Exception as err:  # KafkaTimeoutError: records still unacknowledged
            pending = sum(not f.is_done for f in self._unconfirmed)
            raise UndeliveredRecords([f"{pending} unacknowledged ({err})"]) from err
        sent, self._unconfirmed = self._unconfirmed, []
        failed = [f.exception for f in sent if f.exception is not None]
        if failed:
            raise UndeliveredRecords([f"{type(e).__name__}: {e}" for e in failed])

    def reset(self) -> None:
        try:
            self.producer.close(timeout=0)
        except Exception as err:  # a producer whose broker is gone may not close cleanly
            log.debug("closing the producer failed: %s", err)
        self._open()

    def offset_of(self, handle: Any, timeout_s: float = 30.0) -> int:
        return int(handle.get(timeout=timeout_s).offset)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.close(timeout=timeout_s)


class KafkaPythonTransactionalProducer(KafkaPythonProducer, TransactionalProducer):
    """kafka-python's transactional ``KafkaProducer``; its errors become
    :class:`~.seam.ProducerFenced` (a newer owner) or :class:`~.seam.ClientError`."""

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as err:
            cls = ProducerFenced if is_fenced(err) else ClientError
            raise cls(f"{what} failed: {type(err).__name__}: {err}") from err

    def init_transactions(self) -> None:
        self._call("init_transactions", self.producer.init_transactions)

    def begin(self) -> None:
        self._call("begin_transaction", self.producer.begin_transaction)

    def send(
        self, topic, key, value, partition=None, headers=None, track=False, timestamp_ms=None
    ) -> Any:
        send = super().send
        return self._call("send", send, topic, key, value, partition, headers, track, timestamp_ms)

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        for v in values:
            self.send(topic, key, v)

    def wait(self) -> None:
        self._call("flush", super().flush)

    def offset_of(self, handle: Any, timeout_s: float = 30.0) -> int:
        return int(self._call("send", handle.get, timeout=timeout_s).offset)

    def send_offsets(self, offsets: Mapping[TP, tuple[int, str]], consumer: GroupConsumer) -> None:
        from kafka.structs import OffsetAndMetadata

        data = {_tp(tp): OffsetAndMetadata(off, meta, -1) for tp, (off, meta) in offsets.items()}
        self._call(
            "send_offsets_to_transaction",
            self.producer.send_offsets_to_transaction,
            data,
            consumer.group_metadata(),
        )

    def commit(self) -> None:
        self._call("commit_transaction", self.producer.commit_transaction)

    def abort(self) -> None:
        self._call("abort_transaction", self.producer.abort_transaction)

    def close(self, timeout_s: float | None = None) -> None:
        self.producer.close(timeout=timeout_s)


class KafkaPythonReader(Reader):
    """kafka-python's ``KafkaConsumer`` without a group, assigned partitions by hand."""

    def __init__(self, options: dict[str, Any]):
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            **options, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
        )

    def partitions(self, topic: str, timeout_s: float = 0.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            parts = self.consumer.partitions_for_topic(topic)
            if parts or time.monotonic() >= deadline:
                return sorted(parts or [])
            time.sleep(0.2)
            self.consumer.topics()  # refresh the metadata

    def assign(self, tps: list[TP], starts: Mapping[TP, int] | None = None) -> None:
        parts = [_tp(tp) for tp in tps]
        self.consumer.assign(parts)
        if parts:
            self.consumer.seek_to_beginning(*parts)
        for tp, off in (starts or {}).items():
            self.consumer.seek(_tp(tp), off)

    def seek(self, tp: TP, offset: int) -> None:
        self.consumer.seek(_tp(tp), offset)

    def position(self, tp: TP) -> int:
        return int(self.consumer.position(_tp(tp)))

    def beginning_offsets(self, tps: list[TP]) -> dict[TP, int]:
        got = self.consumer.beginning_offsets([_tp(tp) for tp in tps])
        return {(p.topic, p.partition): int(off) for p, off in got.items()}

    def end_offsets(self, tps: list[TP]) -> dict[TP, int]:
        got = self.consumer.end_offsets([_tp(tp) for tp in tps])
        return {(p.topic, p.partition): int(off) for p, off in got.items()}

    def offsets_for_times(self, times_ms: Mapping[TP, int]) -> dict[TP, int | None]:
        got = self.consumer.offsets_for_times({_tp(tp): ms for tp, ms in times_ms.items()})
        return {
            (p.topic, p.partition): (None if found is None else int(found.offset))
            for p, found in got.items()
        }

    def pause(self, tps: Iterable[TP]) -> None:
        parts = [_tp(tp) for tp in tps]
        if parts:
            self.consumer.pause(*parts)

    def resume(self, tps: Iterable[TP]) -> None:
        from .python_group import resume_partition

        for tp in tps:
            resume_partition(self.consumer, _tp(tp))

    def poll(self, timeout_s: float, max_records: int = 5000) -> list[Record]:
        out: list[Any] = []  # kafka-python's ConsumerRecords: the fields of a Record
        for msgs in self.consumer.poll(
            timeout_ms=int(timeout_s * 1000), max_records=max_records
        ).values():
            out.extend(msgs)
        return out

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonAdmin(Admin):
    """kafka-python's ``KafkaAdminClient``."""

    def __init__(self, options: dict[str, Any]):
        from kafka.admin import KafkaAdminClient

        self.admin = KafkaAdminClient(**options)

    def list_topics(self) -> set[str]:
        return set(self.admin.list_topics())

    def create_topics(self, topics: list[NewTopic]) -> list[str]:
        from kafka.admin import NewTopic as KNewTopic
        from kafka.errors import TopicAlreadyExistsError

        existing = self.list_topics()
        new = [t for t in topics if t.name not in existing]
        if not new:
            return []
        try:
            self.admin.create_topics(
                [
                    KNewTopic(t.name, t.partitions, t.replication, topic_configs=dict(t.configs))
                    if t.configs
                    else KNewTopic(t.name, t.partitions, t.replication)
                    for t in new
                ]
            )
        except TopicAlreadyExistsError:  # another process was faster
            pass
        return [t.name for t in new]

    def partition_count(self, topic: str, wait_s: float = 30.0) -> int:
        deadline = time.monotonic() + wait_s
        while True:
            (meta,) = self.admin.describe_topics([topic])
            n = 0 if meta.get("error_code", 0) == 3 else len(meta["partitions"])
            if n > 0 or time.monotonic() > deadline:  # (3: UNKNOWN_TOPIC_OR_PARTITION)
                return n
            time.sleep(0.2)

    def group_offsets(self, group: str) -> dict[TP, int]:
        if hasattr(self.admin, "list_group_offsets"):  # kafka-python 3
            got = self.admin.list_group_offsets(group).get(group, {})
        else:
            got = self.admin.list_consumer_group_offsets(group)
        return {(p.topic, p.partition): int(o.offset) for p, o in got.items() if o.offset >= 0}

    def close(self) -> None:
        self.admin.close()


class KafkaPythonClient(KafkaClient):
    """The seam on kafka-python (``kafka.client: kafka-python``, the default)."""

    name = "kafka-python"

    def group_consumer(
        self,
        settings: KafkaSettings,
        instance_id: str | None,
        *,
        co_partitioned: bool = False,
        commit_on_revoke=None,
        max_poll_records: int | None = None,
    ) -> GroupConsumer:
        from .python_group import KafkaPythonGroupConsumer

        options = group_consumer_options(settings, instance_id)
        if max_poll_records is not None:
            options["max_poll_records"] = max_poll_records
        if co_partitioned:  # the range assignor gives a member the same indices of each topic
            from kafka.coordinator.assignors.range import RangePartitionAssignor

            options["partition_assignment_strategy"] = [RangePartitionAssignor]
        return KafkaPythonGroupConsumer(settings, options, instance_id, commit_on_revoke)

    def producer(self, settings: KafkaSettings, **overrides: Any) -> Producer:
        options = producer_options(settings)
        if "linger_ms" in overrides:
            options["linger_ms"] = overrides["linger_ms"]
        if "batch_bytes" in overrides:
            options["batch_size"] = overrides["batch_bytes"]
        if "max_block_ms" in overrides:
            options["max_block_ms"] = overrides["max_block_ms"]
        return KafkaPythonProducer(options)

    def transactional_producer(
        self, settings: KafkaSettings, transactional_id: str, timeout_ms: int
    ) -> TransactionalProducer:
        return KafkaPythonTransactionalProducer(
            {
                **producer_options(settings),
                "transactional_id": transactional_id,
                "transaction_timeout_ms": timeout_ms,
            }
        )

    def reader(self, settings: KafkaSettings, read_committed: bool = True) -> Reader:
        options = client_options(settings)
        if read_committed:
            options["isolation_level"] = "read_committed"
        return KafkaPythonReader(options)

    def admin(self, settings: KafkaSettings) -> Admin:
        return KafkaPythonAdmin(client_options(settings))
