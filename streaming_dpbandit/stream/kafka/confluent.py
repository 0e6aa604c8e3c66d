"""The Kafka transport on librdkafka (confluent-kafka): ``kafka.client: confluent-kafka``.

The same semantics as :class:`~.transport.KafkaTransport` (kafka-python) in ``scaling.mode
single``: a consumer-group member (static by default, ``group.instance.id``) whose offsets live
in the service's snapshots — assigned partitions are sought to the snapshot's next offset, or,
when assigned again in the same process, to where its deliveries stopped; offsets are committed
to Kafka after snapshots for monitoring only — and an idempotent producer acknowledged by every
replica, whose records of one key go to the partition the Java client's (and kafka-python's)
murmur2 partitioner picks, so that switching clients keeps every key on its partition.

kafka-python's workarounds are not needed here: librdkafka drops the data it fetched for a
partition when the partition is paused and fetches again from the application's position when
it resumes (no parked data, ``tests/stream/kafka/test_kafka_pause.py``), and it re-joins its
group by itself (no re-join stall watchdog). A delivery that fails after librdkafka's retries
makes :meth:`ConfluentTransport.flush` raise: the snapshot that would imply it is not written.
One librdkafka behaviour needs handling instead: a static member whose session expired while
the broker was away re-joins with a new member id, and its own offset commit with the old id is
then refused as fenced, which librdkafka makes fatal; the transport re-creates its consumer
when that happens just after broker trouble (a fencing without it is another process, an
error, as with kafka-python).

The topics are created, if asked, with kafka-python's admin client (:func:`.transport.
ensure_topics`); the ledger and snapshots of single mode live in the state directory.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...settings import KafkaSettings
from ..errors import ServiceStartError
from ..transport import TP, Record, Transport
from .transport import ensure_topics

__all__ = [
    "ConfluentTransport",
    "confluent_consumer_config",
    "confluent_producer_config",
]

log = logging.getLogger("streaming_dpbandit.kafka")


def confluent_client_config(settings: KafkaSettings) -> dict[str, Any]:
    """librdkafka properties of every client of the service (servers, id, security), as
    :func:`.transport.client_options` gives kafka-python's."""
    out: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol,
        "reconnect.backoff.max.ms": 1000,  # as kafka-python's: a broker restart stalls ≤ 1 s
        "logger": logging.getLogger("streaming_dpbandit.kafka.librdkafka"),
    }
    if settings.sasl_mechanism:
        out["sasl.mechanism"] = settings.sasl_mechanism
        out["sasl.username"] = settings.sasl_username
        if settings.sasl_password:
            out["sasl.password"] = settings.sasl_password.get_secret_value()
    if settings.ssl_cafile:
        out["ssl.ca.location"] = settings.ssl_cafile
    return out


def confluent_producer_config(settings: KafkaSettings) -> dict[str, Any]:
    """The producer's properties: acknowledged by every replica, idempotent, the Java
    client's partitioner, batched as configured.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> c = confluent_producer_config(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    >>> c["acks"], c["enable.idempotence"], c["partitioner"], c["batch.size"]
    ('all', True, 'murmur2_random', 1048576)
    """
    return {
        **confluent_client_config(settings),
        "acks": "all",
        "enable.idempotence": True,
        # kafka-python's and the Java client's default: a key keeps its partition whichever
        # client wrote it (librdkafka's own default, consistent_random, hashes with CRC-32)
        "partitioner": "murmur2_random",
        "linger.ms": settings.linger_ms,
        "batch.size": settings.producer_batch_bytes,
        "message.max.bytes": 4 * 1024 * 1024,
    }


def confluent_consumer_config(settings: KafkaSettings, instance_id: str | None) -> dict[str, Any]:
    """The group consumer's properties: offsets committed by the service only, read from the
    earliest when the group has none, the group's timeouts and the static member id.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> c = confluent_consumer_config(KafkaSettings(bootstrap_servers="h:1"), "dpbandit-single")
    >>> c["enable.auto.commit"], c["session.timeout.ms"], c["group.instance.id"]
    (False, 10000, 'dpbandit-single')
    """
    out = {
        **confluent_client_config(settings),
        "group.id": settings.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": settings.session_timeout_ms,
        "heartbeat.interval.ms": settings.heartbeat_ms(),
    }
    if instance_id is not None:
        out["group.instance.id"] = instance_id
    return out


def _fatal(err: Any) -> bool:
    """Is this librdkafka error fatal? A consumer's fatal error reaches it as an error of
    code ``_FATAL`` whose own ``fatal()`` is false (confluent-kafka 2.16)."""
    from confluent_kafka import KafkaError

    return bool(err.fatal()) or err.code() == KafkaError._FATAL


class _Message:
    """A polled record: the fields of :class:`~..transport.Record` read from librdkafka's
    message once (a plain slotted object is ~5× cheaper to make than the frozen dataclass,
    as kafka-python's transport hands on its own ``ConsumerRecord``)."""

    __slots__ = ("key", "offset", "partition", "timestamp_ms", "topic", "value")

    def __init__(self, topic, partition, offset, key, value, timestamp_ms):
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp_ms = timestamp_ms


class ConfluentTransport(Transport):
    """librdkafka consumer (group, manual offsets) and idempotent producer (acks=all).

    Parameters
    ----------
    settings
        The ``kafka`` section of the service settings (``client: confluent-kafka``).
    """

    def __init__(self, settings: KafkaSettings):
        self.settings = settings

    # -- opening ---------------------------------------------------------------------------
    def open(self, start_offsets: dict[TP, int]) -> None:
        from confluent_kafka import Producer

        s = self.settings
        self.start_offsets = dict(start_offsets)
        self.delivered: dict[TP, int] = {}
        self.paused: set[TP] = set()
        self._assigned: set[TP] = set()
        self._tps: dict[TP, Any] = {}
        self._fatal: Any = None
        self._failed: list[str] = []
        self._to_commit: list[Any] = []
        self.producer = Producer(
            {
                **confluent_producer_config(s),
                "error_cb": self._on_error,
                "on_delivery": self._on_delivery,
                # a Python call per failed record only, not per record
                "delivery.report.only.error": True,
            }
        )
        # librdkafka connects lazily and retries for ever: ask for metadata once, so that an
        # unreachable broker is one clear error at start, as with kafka-python
        self.producer.list_topics(timeout=max(10.0, s.session_timeout_ms / 1000))
        if s.create_topics:
            created = ensure_topics(s)
            if created:
                log.info("created topics %s", ", ".join(created))
        self.instance_id = s.instance_id(single=True)
        self.rejoins = 0
        self._trouble_at = -float("inf")
        self._join()

    def _join(self) -> None:
        """Create the consumer and subscribe (once the input topics' partitions are known)."""
        from confluent_kafka import Consumer

        s = self.settings
        self.consumer = Consumer(
            {**confluent_consumer_config(s, self.instance_id), "error_cb": self._on_error}
        )
        topics = [s.topics.contexts, s.topics.feedback]
        self._wait_for_partitions(topics)
        log.info(
            "joining consumer group %s (%s, session %.0f s)",
            s.group_id,
            f"static member {self.instance_id}" if self.instance_id else "dynamic member",
            s.session_timeout_ms / 1000,
        )
        self.consumer.subscribe(
            topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _wait_for_partitions(self, topics: list[str], timeout_s: float = 30.0) -> None:
        """Until the metadata lists partitions of every input topic (a just-created topic would
        give an empty first assignment)."""
        deadline = time.monotonic() + timeout_s
        missing = list(topics)
        while missing and time.monotonic() < deadline:
            meta = self.consumer.list_topics(timeout=5.0)
            missing = [
                t
                for t in missing
                if t not in meta.topics or meta.topics[t].error or not meta.topics[t].partitions
            ]
            if missing:
                time.sleep(0.2)
        if missing:
            log.warning("no partition metadata for %s after %.0f s", ", ".join(missing), timeout_s)

    # -- callbacks (run inside poll/consume) ----------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        for p in partitions:
            # after the first assignment: where this process's deliveries stopped (the service
            # has every record before it); else the snapshot's offset, else the beginning
            key = (p.topic, p.partition)
            off = self.delivered.get(key, self.start_offsets.get(key))
            p.offset = OFFSET_BEGINNING if off is None else off
        consumer.assign(partitions)
        self._assigned = {(p.topic, p.partition) for p in partitions}
        again = [self._tp(tp) for tp in sorted(self._assigned & self.paused)]
        if again:  # the service's pauses outlive a re-assignment
            consumer.pause(again)
        parts = sorted(self._assigned)
        log.info(
            "partitions assigned: %s", parts, extra={"partitions": [f"{t}:{n}" for t, n in parts]}
        )

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        parts = sorted((p.topic, p.partition) for p in partitions)
        log.info(
            "partitions revoked: %s", parts, extra={"partitions": [f"{t}:{n}" for t, n in parts]}
        )
        consumer.unassign()
        self._assigned = set()

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        """The session expired on the client's side (no coordinator for a session: a broker
        restart): librdkafka re-joins by itself."""
        self._trouble_at = time.monotonic()
        self._on_revoke(consumer, partitions)

    def _on_error(self, err: Any) -> None:
        """librdkafka's client-level errors: a fatal one (a fenced static member, a fatal
        idempotence error) stops the service at its next poll; others (a broker away) are
        retried by librdkafka and only logged."""
        if _fatal(err):
            self._fatal = err
        else:
            self._trouble_at = time.monotonic()
            log.debug("kafka client: %s", err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    # -- errors ----------------------------------------------------------------------------
    def _error(self, err: Any) -> Exception:
        """The one-line error of a fatal client error (a fenced static member gets the same
        message as with kafka-python)."""
        if self._fenced(err):
            return ServiceStartError(
                f"another process joined consumer group {self.settings.group_id!r} as static "
                f"member {self.instance_id!r}: run one `dpbandit serve` per group in "
                "scaling.mode single (docs/operations.md, Scaling)"
            )
        return ServiceStartError(f"Kafka client failed: {err.str()}")

    def _check(self) -> None:
        if self._fatal is not None:
            self._on_fatal(self._fatal)

    def _on_fatal(self, err: Any) -> None:
        """Raise the error of a fatal client error — unless it is this member's own fencing
        just after the broker was away: librdkafka re-joins when its session expires without a
        coordinator, the broker gives the static member a new id, and an offset commit still
        carrying the old id is refused as FENCED_INSTANCE_ID, which librdkafka makes fatal
        (measured: the kill -9 test's broker restart). The consumer is then re-created; it
        seeks to where its deliveries stopped, so nothing is lost or repeated."""
        self._fatal = None
        recent = time.monotonic() - self._trouble_at < max(
            60.0, self.settings.session_timeout_ms / 250
        )
        if not (recent and self._fenced(err)):
            raise self._error(err)
        self.rejoins += 1
        log.warning(
            "consumer fenced right after the broker was away (librdkafka re-joined with a new "
            "member id): re-creating the consumer (restart %d)",
            self.rejoins,
        )
        self._trouble_at = -float("inf")  # a second fencing without broker trouble: another process
        old, self._assigned, self._to_commit = self.consumer, set(), []
        try:
            old.close()
        except Exception as e:  # a fatal client may fail to close cleanly
            log.debug("closing the fenced consumer failed: %s", e)
        self._join()

    @staticmethod
    def _fenced(err: Any) -> bool:
        from confluent_kafka import KafkaError

        # a fenced static member is a fatal error (code _FATAL) that names the broker's reason
        return err.code() == KafkaError.FENCED_INSTANCE_ID or "group.instance.id" in str(err)

    # -- the loop --------------------------------------------------------------------------
    def _tp(self, tp: TP) -> Any:
        from confluent_kafka import TopicPartition

        obj = self._tps.get(tp)
        if obj is None:
            obj = self._tps[tp] = TopicPartition(*tp)
        return obj

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        self.producer.poll(0)  # delivery reports and client errors
        self._check()
        consumer = self.consumer
        # what is already fetched, at once; else wait up to the timeout for the first record
        # only (``consume`` would wait the whole timeout for a full batch)
        msgs: list[Any] = consumer.consume(max_records, 0)
        if not msgs and timeout_s > 0:
            first = consumer.poll(timeout_s)
            if first is not None:
                msgs = (
                    [first, *consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]
                )
        self._check()
        out: list[Any] = []  # _Message: the fields of a Record
        delivered = self.delivered
        for m in msgs:
            err = m.error()
            if err is not None:
                if _fatal(err):
                    self._on_fatal(err)
                    return out  # (re-created: the records after this one come again)
                log.debug("kafka consumer: %s", err)
                continue
            topic, part, off = m.topic(), m.partition(), m.offset()
            ts = m.timestamp()[1]
            out.append(_Message(topic, part, off, m.key(), m.value(), ts if ts >= 0 else None))
            delivered[(topic, part)] = off + 1
        return out

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._produce(topic, key, value)

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        """Records of one key, in order (librdkafka hashes the key in C: no per-call cache)."""
        produce = self.producer.produce
        for i, value in enumerate(values):
            try:
                produce(topic, value, key)
            except BufferError:  # the local queue is full: the slow path, in order
                for rest in values[i:]:
                    self._produce(topic, key, rest)
                return

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.05)
                self._check()

    def flush(self) -> None:
        """Wait until every queued record is acknowledged; raise if one failed (librdkafka
        retried it until ``message.timeout.ms``)."""
        self.producer.flush()
        self._check()
        if self._failed:
            failed, self._failed = self._failed, []
            raise ServiceStartError(
                f"{len(failed)} output record(s) could not be written; first: {failed[0]}"
            )

    def pause(self, tp: TP) -> None:
        self.paused.add(tp)
        if tp in self._assigned:  # (re-assigned partitions are paused by the callback)
            self.consumer.pause([self._tp(tp)])

    def resume(self, tp: TP) -> None:
        self.paused.discard(tp)
        if tp in self._assigned:  # a revoked partition has nothing to resume
            self.consumer.resume([self._tp(tp)])

    def assigned(self) -> set[TP]:
        return set(self._assigned)

    def lag(self) -> dict[TP, int]:
        """High watermark minus position per assigned partition. The high watermark is the one
        of the latest fetch response (no broker round trip); a partition not fetched yet is
        asked for."""
        if not self._assigned:
            return {}
        parts = [self._tp(tp) for tp in sorted(self._assigned)]
        try:
            positions = self.consumer.position(parts)
        except Exception:
            return {}
        out = {}
        for p in positions:
            key = (p.topic, p.partition)
            try:
                high = self.consumer.get_watermark_offsets(p, cached=True)[1]
                if high < 0:
                    got = self.consumer.get_watermark_offsets(p, timeout=1.0)
                    if got is None:
                        continue
                    high = got[1]
            except Exception:  # the broker is away, or the partition was revoked
                continue
            pos = p.offset if p.offset >= 0 else self.delivered.get(key)
            if pos is None:
                continue
            out[key] = max(0, high - pos)
        return out

    def commit(self, offsets: dict[TP, int]) -> None:
        """Commit offsets to Kafka (monitoring only; the snapshot is authoritative),
        asynchronously; the last ones are committed synchronously when the transport closes."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        data = [
            TopicPartition(t, p, off) for (t, p), off in offsets.items() if (t, p) in self._assigned
        ]
        if not data:
            return
        self._to_commit = data
        try:
            self.consumer.commit(offsets=data, asynchronous=True)
        except KafkaException as err:
            e = err.args[0]
            if _fatal(e) or e.code() == KafkaError.FENCED_INSTANCE_ID:
                self._on_fatal(e)
                return
            log.debug("offset commit failed: %s", e)
        self._check()

    def close(self) -> None:
        try:
            self.producer.flush()
        finally:
            if self._to_commit:
                try:
                    self.consumer.commit(offsets=self._to_commit, asynchronous=False)
                except Exception as err:
                    log.debug("offset commit failed: %s", err)
            close_consumer(self.consumer)


#: Seconds :func:`close_consumer` waits for librdkafka's close.
CLOSE_TIMEOUT_S = 30.0


def close_consumer(consumer: Any, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
    """Close a librdkafka consumer, giving up after ``timeout_s``; True if it closed.

    librdkafka can hang for ever in ``close()`` when a group assignment arrives while it closes
    (the rebalance callback's ``assign`` never returns: confluentinc/librdkafka#4884, seen here
    with a consumer closed before its first poll). The close runs in a daemon thread, so that
    a hang costs a warning instead of the process: the broker ends the membership after the
    session timeout, as after a crash.
    """
    import threading

    done = threading.Event()

    def close() -> None:
        try:
            consumer.close()
        except Exception as err:  # already closed, or the client failed
            log.debug("consumer close failed: %s", err)
        finally:
            done.set()

    threading.Thread(target=close, name="dpbandit-consumer-close", daemon=True).start()
    if not done.wait(timeout_s):
        log.warning(
            "the Kafka consumer did not close within %.0f s (librdkafka#4884); leaving it",
            timeout_s,
        )
        return False
    return True
