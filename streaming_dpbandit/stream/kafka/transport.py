"""The single service's Kafka transport: a client's group consumer over the input topics and
its producer for the output topics (``scaling.mode: single``), on either client of
``kafka.client`` (the seam, ``seam.py``).

The consumer is a static group member by default (``kafka.static_membership``, KIP-345): a
restarted process, with the same ``group.instance.id``, takes the partitions back at once
instead of waiting ``kafka.session_timeout_ms`` for the broker to drop the member it replaces;
a second process with the same id fences the first, which stops with a clear error. A dynamic
member (``static_membership: false``) leaves the group when it closes (SIGTERM).

Offsets live in the service's snapshots, not in Kafka: when partitions are assigned, the
consumer seeks to the snapshot's next offset (or the beginning of a partition it has never
seen); when they are assigned again later in the same process (a re-join), it seeks to where its
deliveries stopped, since the service already holds every record before that. Offsets are
also committed to Kafka after every snapshot, for monitoring tools only. The producer is
idempotent with ``acks=all``; its flush raises when a record could not be written, so the
snapshot that would imply it is not written.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ...settings import KafkaSettings
from ..errors import ServiceStartError
from ..transport import TP, Record, Transport
from .seam import ClientError, KafkaClient, NewTopic, Rebalance, UndeliveredRecords, kafka_client

__all__ = ["KafkaTransport", "ensure_topics"]

log = logging.getLogger("streaming_dpbandit.kafka")


def ensure_topics(settings: KafkaSettings, client: KafkaClient | None = None) -> list[str]:
    """Create the four topics if they do not exist; returns the names created."""
    t = settings.topics
    names = [t.contexts, t.feedback, t.decisions, t.dead_letter]
    client = client or kafka_client(settings.client)
    with client.admin(settings) as admin:
        return admin.create_topics(
            [NewTopic(n, settings.partitions, settings.replication_factor) for n in names]
        )


def log_partitions(what: str, tps: list[TP]) -> None:
    log.info("partitions %s: %s", what, tps, extra={"partitions": [f"{t}:{n}" for t, n in tps]})


class _Positions(Rebalance):
    """Where an assigned partition resumes: after the records this process already holds, or
    at the snapshot's offset, or at the beginning."""

    def __init__(self, transport: KafkaTransport):
        self.transport = transport

    def assigned(self, tps: list[TP]) -> Mapping[TP, int | None]:
        t = self.transport
        log_partitions("assigned", tps)
        return {tp: t.consumer.delivered.get(tp, t.start_offsets.get(tp)) for tp in tps}

    def revoked(self, tps: list[TP]) -> None:
        log_partitions("revoked", tps)


class KafkaTransport(Transport):
    """A group consumer (manual offsets) and an idempotent producer (acks=all) of one client.

    Parameters
    ----------
    settings
        The ``kafka`` section of the service settings.
    client
        The client library (default: the one ``settings.client`` names).
    """

    def __init__(self, settings: KafkaSettings, client: KafkaClient | None = None):
        self.settings = settings
        self.client = client or kafka_client(settings.client)

    def open(self, start_offsets: dict[TP, int]) -> None:
        s = self.settings
        self.start_offsets = dict(start_offsets)
        self.producer = self.client.producer(s)
        # the sink's methods themselves: no call through the transport per record
        self.send = self.producer.send  # type: ignore[method-assign]
        self.send_many = self.producer.send_many  # type: ignore[method-assign]
        if s.create_topics:
            created = ensure_topics(s, self.client)
            if created:
                log.info("created topics %s", ", ".join(created))
        self.instance_id = s.instance_id(single=True)
        self.consumer = self.client.group_consumer(s, self.instance_id)
        self._to_commit: dict[TP, int] = {}
        log.info(
            "joining consumer group %s (%s, session %.0f s)",
            s.group_id,
            f"static member {self.instance_id}" if self.instance_id else "dynamic member",
            s.session_timeout_ms / 1000,
        )
        self.consumer.subscribe([s.topics.contexts, s.topics.feedback], _Positions(self))

    @property
    def join_restarts(self) -> int:
        """Consumers re-created (kafka-python's re-join stall; librdkafka's fencing after
        broker trouble)."""
        return int(getattr(self.consumer, "join_restarts", 0))

    def _error(self, err: ClientError) -> ServiceStartError:
        if type(err).__name__ == "MemberFenced":
            return ServiceStartError(
                f"another process joined consumer group {self.settings.group_id!r} as static "
                f"member {self.instance_id!r}: run one `dpbandit serve` per group in "
                "scaling.mode single (docs/operations.md, Scaling)"
            )
        return ServiceStartError(f"Kafka client failed: {err}")

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        try:
            return self.consumer.poll(max_records, timeout_s)
        except ClientError as err:
            raise self._error(err) from None

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.producer.send(topic, key, value)

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        self.producer.send_many(topic, key, values)

    def flush(self) -> None:
        """Wait until every record sent is written; raise if one was not (the client retried
        it until its delivery timeout): the snapshot that would imply it is not written."""
        try:
            self.producer.flush()
        except UndeliveredRecords as err:
            raise ServiceStartError(str(err)) from None
        except ClientError as err:
            raise self._error(err) from None

    def pause(self, tp: TP) -> None:
        self.consumer.pause(tp)

    def resume(self, tp: TP) -> None:
        self.consumer.resume(tp)

    def assigned(self) -> set[TP]:
        return self.consumer.assigned()

    def lag(self) -> dict[TP, int]:
        return self.consumer.lag()

    def commit(self, offsets: dict[TP, int]) -> None:
        """Commit offsets to Kafka (monitoring only; the snapshot is authoritative).

        Asynchronous: a snapshot does not wait a broker round trip for it. The last offsets
        are committed synchronously when the transport closes.
        """
        mine = self.consumer.assigned()
        data = {tp: off for tp, off in offsets.items() if tp in mine}
        if not data:
            return
        self._to_commit = data
        try:
            self.consumer.commit(data, asynchronous=True)
        except ClientError as err:
            if type(err).__name__ == "MemberFenced":
                raise self._error(err) from None
            log.debug("offset commit failed: %s", err)

    def close(self) -> None:
        try:
            self.producer.close()
        finally:
            if self._to_commit:
                try:
                    self.consumer.commit(self._to_commit)
                except Exception as err:
                    log.debug("offset commit failed: %s", err)
            self.consumer.close()
