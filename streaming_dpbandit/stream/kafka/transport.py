"""The Kafka transport (kafka-python): a consumer group over the input topics and an
idempotent producer for the output topics.

The consumer is a static group member by default (``kafka.static_membership``, KIP-345): a
restarted process, with the same ``group.instance.id``, takes the partitions back at once
instead of waiting ``kafka.session_timeout_ms`` for the broker to drop the member it replaces;
a second process with the same id fences the first, which stops with a clear error. A dynamic
member (``static_membership: false``) leaves the group when it closes (SIGTERM).

Offsets live in the service's snapshots, not in Kafka: when partitions are assigned, the
consumer seeks to the snapshot's next offset (or the beginning of a partition it has never
seen); when they are assigned again later in the same process (a re-join), it seeks to where its
deliveries stopped, since the service already holds every record before that. Offsets are
also committed to Kafka after every snapshot, for monitoring tools only.

kafka-python 3.0.12 can stall in a group re-join: the member stops heartbeating, the broker
removes it, and the client never joins again (docs/operations.md). :class:`JoinWatchdog`
notices a membership that has not been stable for ``kafka.rejoin_stall_s`` and the transport
then re-creates its consumer (offsets come from the service, so nothing is lost or repeated).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ...settings import KafkaSettings
from ..transport import TP, Record, Transport
from .consumer_tools import consumer_lag, resume_partition, wait_for_partitions

__all__ = [
    "JoinWatchdog",
    "KafkaTransport",
    "consumer_lag",
    "ensure_topics",
    "resume_partition",
    "wait_for_partitions",
]

log = logging.getLogger("streaming_dpbandit.kafka")


_SLOW_CRC_WARNED = [False]


def warn_if_pure_python_crc() -> bool:
    """Warn once when kafka-python would check record CRC-32C in pure Python.

    kafka-python uses the ``crc32c`` package when it is importable and silently falls back to
    a pure-Python CRC otherwise; the fallback took half of the service's loop (about 3× fewer
    events/s, docs/service.md). Returns whether it warned.
    """
    try:
        from kafka.record import util
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        return False
    if getattr(util, "crc32c_c", None) is not None or _SLOW_CRC_WARNED[0]:
        return False
    _SLOW_CRC_WARNED[0] = True
    log.warning(
        "kafka-python checks record CRC-32C in pure Python, about 3x slower: install the "
        "'crc32c' package (pip install 'kafka-python[crc32c]')"
    )
    return True


def client_options(settings: KafkaSettings) -> dict:
    """Connection options of every Kafka client of the service (servers, id, security)."""
    warn_if_pure_python_crc()
    out = {
        "bootstrap_servers": settings.bootstrap_servers.split(","),
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
        # kafka-python's reconnect backoff grows to 30 s: a broker restart would stall us
        "reconnect_backoff_max_ms": 1000,
    }
    if settings.sasl_mechanism:
        out["sasl_mechanism"] = settings.sasl_mechanism
        out["sasl_plain_username"] = settings.sasl_username
        out["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    if settings.ssl_cafile:
        out["ssl_cafile"] = settings.ssl_cafile
    return out


def producer_options(settings: KafkaSettings) -> dict:
    """Keyword arguments of the service's producers: :func:`client_options`, acknowledged by every
    replica, idempotent, batched as configured.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> opts = producer_options(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    >>> opts["acks"], opts["enable_idempotence"], opts["batch_size"]
    ('all', True, 1048576)
    """
    return {
        **client_options(settings),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": settings.linger_ms,
        "batch_size": settings.producer_batch_bytes,
        "max_request_size": 4 * 1024 * 1024,
    }


def group_consumer_options(settings: KafkaSettings, instance_id: str | None) -> dict:
    """Keyword arguments of the service's group consumers: :func:`client_options`, offsets
    committed by the service only (with its outputs), read from the earliest when the group has
    none, large fetches, the group's timeouts and the static member id ``instance_id``."""
    return {
        **client_options(settings),
        "group_id": settings.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_records": settings.max_poll_records,
        "fetch_max_bytes": 64 * 1024 * 1024,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_ms(),
        "group_instance_id": instance_id,
    }


def ensure_topics(settings: KafkaSettings) -> list[str]:
    """Create the four topics if they do not exist; returns the names created."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    t = settings.topics
    names = [t.contexts, t.feedback, t.decisions, t.dead_letter]
    admin = KafkaAdminClient(**client_options(settings))
    try:
        existing = set(admin.list_topics())
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                admin.create_topics(
                    [NewTopic(n, settings.partitions, settings.replication_factor) for n in missing]
                )
            except TopicAlreadyExistsError:
                pass
        return missing
    finally:
        admin.close()


def _log_commit_failure(offsets, response) -> None:
    if isinstance(response, Exception):
        log.debug("offset commit failed: %s", response)


class JoinWatchdog:
    """Is a kafka-python consumer's group membership stuck outside the stable state?

    Reads the coordinator's member state (``STABLE``, ``REBALANCING``, ``UNJOINED``), at most
    once a second; :meth:`stalled` is true once the state has not been ``STABLE`` for
    ``limit_s`` seconds in a row. A consumer that is stable with no partitions (a group with
    more members than partitions) is not stalled.

    Parameters
    ----------
    limit_s
        Seconds outside ``STABLE`` that count as a stall; 0 disables the watchdog.
    clock
        A monotonic clock (injectable for tests).

    Examples
    --------
    >>> class C:  # a stand-in consumer: only the coordinator's state is read
    ...     class _coordinator:
    ...         state = "<rebalancing>"  # kafka.structs.MemberState.REBALANCING
    >>> now = [0.0]
    >>> w = JoinWatchdog(60.0, clock=lambda: now[0])
    >>> w.stalled(C()), (now.__setitem__(0, 59.0), w.stalled(C()))[1]
    (False, False)
    >>> now[0] = 61.0; w.stalled(C())
    True

    """

    def __init__(self, limit_s: float, clock=time.monotonic):
        self.limit_s = limit_s
        self.clock = clock

    def stalled(self, consumer) -> bool:
        if not self.limit_s:
            return False
        now = self.clock()
        if now - getattr(self, "_checked", -1e18) < 1.0:
            return False
        self._checked = now
        state = getattr(getattr(consumer, "_coordinator", None), "state", None)
        state = getattr(state, "name", state)  # kafka-python 3.0: the string '<stable>'
        if state is None or str(state).strip("<>").upper() == "STABLE":
            self._since = None
            return False
        since = getattr(self, "_since", None)
        if since is None:
            self._since = now
            return False
        if now - since >= self.limit_s:
            self._since = None
            return True
        return False


def close_stalled(consumer, limit_s: float, restart: int, dropping: str = "") -> None:
    """Log kafka-python's re-join stall and close the stalled consumer without committing
    (the single-process transport, a group replica and a decision replica then join again with
    a new consumer; ``dropping`` names what the caller drops with it)."""
    log.warning(
        "consumer group membership not stable for %.0f s (kafka-python re-join stall): "
        "%sre-creating the consumer (restart %d)",
        limit_s,
        f"dropping {dropping} and " if dropping else "",
        restart,
    )
    try:
        consumer.close(autocommit=False)
    except Exception as err:  # a stalled client may fail to leave the group cleanly
        log.debug("closing the stalled consumer failed: %s", err)


#: Unconfirmed sends kept before the acknowledged ones are dropped from the list.
UNCONFIRMED_PRUNE = 50_000


class KafkaTransport(Transport):
    """kafka-python consumer (group, manual offsets) and idempotent producer (acks=all).

    Parameters
    ----------
    settings
        The ``kafka`` section of the service settings.
    """

    def __init__(self, settings: KafkaSettings):
        self.settings = settings

    def open(self, start_offsets: dict[TP, int]) -> None:
        from kafka import KafkaProducer

        s = self.settings
        if s.create_topics:
            created = ensure_topics(s)
            if created:
                log.info("created topics %s", ", ".join(created))
        self.start_offsets = dict(start_offsets)
        self.delivered: dict[TP, int] = {}
        self.producer = KafkaProducer(**producer_options(s))
        # the futures of the records sent since the last flush: kafka-python's flush() returns
        # when every record is done, failed ones included (after delivery_timeout_ms), so the
        # transport checks them; a failure must not be followed by a snapshot
        self._unconfirmed: list[Any] = []
        self.paused: set[TP] = set()
        self.join_restarts = 0
        self.watchdog = JoinWatchdog(s.rejoin_stall_s)
        self._tps: dict[TP, Any] = {}  # kafka-python TopicPartitions, made once per partition
        self._key_parts: dict[tuple[str, bytes], tuple[list[int], int]] = {}
        self._join()

    def _join(self) -> None:
        """Create the consumer and subscribe (once the input topics' partitions are known)."""
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        s = self.settings
        self.instance_id = s.instance_id(single=True)
        self.consumer = KafkaConsumer(**group_consumer_options(s, self.instance_id))
        transport = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                parts = sorted((p.topic, p.partition) for p in revoked)
                log.info(
                    "partitions revoked: %s",
                    parts,
                    extra={"partitions": [f"{t}:{n}" for t, n in parts]},
                )

            def on_partitions_assigned(self, assigned):
                for p in assigned:
                    # after the first assignment: where this process's deliveries stopped (the
                    # service has every record before it); else the snapshot's offset
                    key = (p.topic, p.partition)
                    off = transport.delivered.get(key, transport.start_offsets.get(key))
                    if off is None:
                        transport.consumer.seek_to_beginning(p)
                    else:
                        transport.consumer.seek(p, off)
                    if key in transport.paused:  # a re-created consumer keeps the service's pauses
                        transport.consumer.pause(p)
                parts = sorted((p.topic, p.partition) for p in assigned)
                log.info(
                    "partitions assigned: %s",
                    parts,
                    extra={"partitions": [f"{t}:{n}" for t, n in parts]},
                )

        # join only once the input topics' partitions are known: a just-created topic (by
        # ensure_topics above, or by an operator moments ago) would give an empty assignment
        wait_for_partitions(self.consumer, [s.topics.contexts, s.topics.feedback])
        log.info(
            "joining consumer group %s (%s, session %.0f s)",
            s.group_id,
            f"static member {self.instance_id}" if self.instance_id else "dynamic member",
            s.session_timeout_ms / 1000,
        )
        self.consumer.subscribe([s.topics.contexts, s.topics.feedback], listener=Listener())

    def _fenced(self) -> Exception:
        """The error of a static member that another process replaced (kafka-python reports
        it at the next offset commit or poll; until then the client keeps fetching)."""
        from ..errors import ServiceStartError

        return ServiceStartError(
            f"another process joined consumer group {self.settings.group_id!r} as static "
            f"member {self.instance_id!r}: run one `dpbandit serve` per group in "
            "scaling.mode single (docs/operations.md, Scaling)"
        )

    def _rejoin(self) -> None:
        """Replace a consumer whose group join stalled (see the module docstring)."""
        self.join_restarts += 1
        close_stalled(self.consumer, self.settings.rejoin_stall_s, self.join_restarts)
        self._join()

    def _tp(self, tp: TP):
        from kafka import TopicPartition

        obj = self._tps.get(tp)
        if obj is None:
            obj = self._tps[tp] = TopicPartition(*tp)
        return obj

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        from kafka.errors import FencedInstanceIdError

        try:
            batches = self.consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except FencedInstanceIdError:
            raise self._fenced() from None
        if not batches and self.watchdog.stalled(self.consumer):
            self._rejoin()
            return []
        out = []
        for tp, msgs in batches.items():
            # kafka-python's ConsumerRecord has every field of a Record (topic, partition,
            # offset, key, value): handed on as it is, not copied
            out.extend(msgs)
            if msgs:
                self.delivered[(tp.topic, tp.partition)] = msgs[-1].offset + 1
        return out

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self._unconfirmed.append(self.producer.send(topic, key=key, value=value))
        if len(self._unconfirmed) > UNCONFIRMED_PRUNE:
            self._prune()

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        """Records of one key go to one partition: the one kafka-python's default partitioner
        picks for the key, computed once per call instead of hashing the key (murmur2 in pure
        Python, ~2 µs) for every record."""
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
        from kafka.partitioner.default import murmur2

        parts = sorted(self.producer.partitions_for(topic))
        cached = self._key_parts.get((topic, key))
        if cached is None or cached[0] != parts:
            cached = (parts, parts[(murmur2(key) & 0x7FFFFFFF) % len(parts)])
            self._key_parts[(topic, key)] = cached
        return cached[1]

    def flush(self) -> None:
        """Wait until every record sent is done; raise if one failed (kafka-python retried it
        until ``delivery_timeout_ms``): the snapshot that would imply it is not written."""
        self.producer.flush()
        sent, self._unconfirmed = self._unconfirmed, []
        failed = [f.exception for f in sent if f.exception is not None]
        if failed:
            from ..errors import ServiceStartError

            raise ServiceStartError(
                f"{len(failed)} output record(s) could not be written; first: "
                f"{type(failed[0]).__name__}: {failed[0]}"
            )

    def pause(self, tp: TP) -> None:
        self.paused.add(tp)
        if tp in self.assigned():  # (re-assigned partitions are paused by the listener)
            self.consumer.pause(self._tp(tp))

    def resume(self, tp: TP) -> None:
        self.paused.discard(tp)
        if tp in self.assigned():  # a revoked partition has nothing to resume
            resume_partition(self.consumer, self._tp(tp))

    def assigned(self) -> set[TP]:
        return {(p.topic, p.partition) for p in self.consumer.assignment()}

    def lag(self) -> dict[TP, int]:
        return consumer_lag(self.consumer, list(self.consumer.assignment()))

    def commit(self, offsets: dict[TP, int]) -> None:
        """Commit offsets to Kafka (monitoring only; the snapshot is authoritative).

        Asynchronous: a snapshot does not wait a broker round trip for it. The last offsets
        are committed synchronously when the transport closes.
        """
        from kafka.structs import OffsetAndMetadata

        mine = self.assigned()
        data = {
            self._tp(tp): OffsetAndMetadata(off, "", -1)
            for tp, off in offsets.items()
            if tp in mine
        }
        if data:
            from kafka.errors import FencedInstanceIdError

            self._to_commit = data
            try:
                self.consumer.commit_async(data, callback=_log_commit_failure)
            except FencedInstanceIdError:
                raise self._fenced() from None
            except Exception as err:
                log.debug("offset commit failed: %s", err)

    def close(self) -> None:
        try:
            self.producer.flush()
            self.producer.close()
        finally:
            last = getattr(self, "_to_commit", None)
            if last:
                try:
                    self.consumer.commit(last)
                except Exception as err:
                    log.debug("offset commit failed: %s", err)
            self.consumer.close()
