"""The seam's group consumer on librdkafka (confluent-kafka).

librdkafka runs rebalance callbacks on the application's thread, inside ``consume()``: the
seam's :class:`~.seam.Rebalance` is called right there, and an assigned partition starts where
the listener says (its offset is set before ``assign``). With the classic protocol the range
assignor gives a member the same indices of every topic (``co_partitioned``) and a rebalance
revokes everything (eager); with the consumer protocol (``kafka.group_protocol: consumer``,
KIP-848) the broker assigns (its ``range`` assignor when co-partitioned) and partitions move
one by one (incremental). A batch that a rebalance interrupted may hold records of a partition
revoked in the middle of it (confluent-kafka-python#1013): they are dropped, and a partition
assigned again in the same call is read again from where its kept records end.

kafka-python's workarounds are not needed here: librdkafka drops the data it fetched for a
partition when the partition is paused and fetches again from the application's position when
it resumes (``tests/stream/kafka/test_kafka_pause.py``), and it re-joins its group by itself.
One librdkafka behaviour needs handling instead: a static member whose session expired while
the broker was away re-joins with a new member id, and its own offset commit with the old id is
then refused as fenced, which librdkafka makes fatal; the consumer is re-created when that
happens just after broker trouble (a fencing without it is another process: an error).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...settings import KafkaSettings
from ..transport import TP, Record
from .confluent_client import Message, is_fatal
from .options import confluent_consumer_config
from .python_group import MemberFenced
from .seam import ClientError, GroupConsumer, Rebalance, cached_partition

__all__ = ["CLOSE_TIMEOUT_S", "ConfluentGroupConsumer", "close_consumer", "consumer_config"]

log = logging.getLogger("streaming_dpbandit.kafka")

#: librdkafka's "no offset": an unassigned partition's position or watermark
_NO_OFFSET = -1001


def consumer_config(
    settings: KafkaSettings, instance_id: str | None, co_partitioned: bool
) -> dict[str, Any]:
    """The group consumer's librdkafka properties for the configured group protocol.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> c = consumer_config(KafkaSettings(bootstrap_servers="h:1"), None, True)
    >>> c["partition.assignment.strategy"], "group.protocol" in c
    ('range', False)
    """
    config = confluent_consumer_config(settings, instance_id)
    if getattr(settings, "group_protocol", "classic") == "consumer":
        # KIP-848: the broker owns the session, heartbeats and assignment
        for key in ("session.timeout.ms", "heartbeat.interval.ms"):
            config.pop(key, None)
        config["group.protocol"] = "consumer"
        if co_partitioned:
            config["group.remote.assignor"] = "range"
    elif co_partitioned:
        config["partition.assignment.strategy"] = "range"
    return config


class ConfluentGroupConsumer(GroupConsumer):
    """librdkafka's consumer as a group member (see the module docstring).

    Parameters
    ----------
    settings
        The ``kafka`` settings (the group, its protocol and timeouts).
    instance_id
        The static member id (None: a dynamic member).
    co_partitioned
        A member gets the same partition indices of every subscribed topic.
    commit_on_revoke
        If given, called before partitions are revoked, after which every consumed offset
        is committed.

    Attributes
    ----------
    join_restarts
        Consumers re-created after their fencing right after broker trouble.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        instance_id: str | None,
        *,
        co_partitioned: bool = False,
        commit_on_revoke: Callable[[], None] | None = None,
    ):
        self.settings = settings
        self.instance_id = instance_id
        self.co_partitioned = co_partitioned
        self.commit_on_revoke = commit_on_revoke
        self.incremental = getattr(settings, "group_protocol", "classic") == "consumer"
        self.paused: set[TP] = set()
        self.owned: set[TP] = set()
        self.delivered: dict[TP, int] = {}
        self.join_restarts = 0
        self._parts: dict[TP, Any] = {}
        self._fatal: Any = None
        self._trouble_at = -float("inf")
        self._revoked_now: set[TP] = set()
        self._starts_now: dict[TP, int | None] = {}
        self.client: Any = None

    # -- membership -------------------------------------------------------------------------
    def subscribe(self, topics: list[str], listener: Rebalance) -> None:
        self.topics, self.listener = list(topics), listener
        self._join()

    def _join(self) -> None:
        from confluent_kafka import Consumer

        config = consumer_config(self.settings, self.instance_id, self.co_partitioned)
        self.client = Consumer({**config, "error_cb": self._on_error})
        self._wait_for_partitions()
        self.client.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    def _wait_for_partitions(self, timeout_s: float = 30.0) -> None:
        """Until the metadata lists partitions of every topic (a just-created topic would
        give an empty first assignment)."""
        deadline = time.monotonic() + timeout_s
        missing = list(self.topics)
        while missing and time.monotonic() < deadline:
            meta = self.client.list_topics(timeout=5.0)
            missing = [
                t
                for t in missing
                if t not in meta.topics or meta.topics[t].error or not meta.topics[t].partitions
            ]
            if missing:
                time.sleep(0.2)
        if missing:
            log.warning("no partition metadata for %s after %.0f s", ", ".join(missing), timeout_s)

    def unsubscribe(self) -> None:
        self.client.unsubscribe()

    def rejoin(self) -> None:
        self.client.unsubscribe()
        self.client.subscribe(
            self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )

    # -- callbacks (run inside consume/poll/close) ------------------------------------------
    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING

        tps = [(p.topic, p.partition) for p in partitions]
        starts = dict(self.listener.assigned(tps)) if tps else {}
        for p, tp in zip(partitions, tps):
            if tp in starts:
                off = starts[tp]
                p.offset = OFFSET_BEGINNING if off is None else off
                self._starts_now[tp] = off
        if self.incremental:
            consumer.incremental_assign(partitions)
            self.owned |= set(tps)
        else:
            consumer.assign(partitions)
            self.owned = set(tps)
        again = [self._part(tp) for tp in sorted(set(tps) & self.paused)]
        if again:  # the owner's pauses outlive a re-assignment
            consumer.pause(again)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        tps = [(p.topic, p.partition) for p in partitions]
        if self.commit_on_revoke is not None and tps:
            try:
                self.commit_on_revoke()
                self._commit_positions(partitions)
            except Exception as err:
                log.warning("offset commit at revocation failed: %s", err)
        if tps:
            self.listener.revoked(tps)
        self._unassign(consumer, partitions, tps)

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        """The session expired on the client's side (no coordinator for a session: a broker
        restart): librdkafka re-joins by itself."""
        self._trouble_at = time.monotonic()
        tps = [(p.topic, p.partition) for p in partitions]
        if tps:
            self.listener.lost(tps)
        self._unassign(consumer, partitions, tps)

    def _unassign(self, consumer: Any, partitions: list[Any], tps: list[TP]) -> None:
        if self.incremental:
            consumer.incremental_unassign(partitions)
        else:
            consumer.unassign()
        self.owned -= set(tps)
        self._revoked_now |= set(tps)

    def _on_error(self, err: Any) -> None:
        """librdkafka's client-level errors: a fatal one (a fenced static member) stops the
        consumer at its next poll; others (a broker away) are retried by librdkafka."""
        if is_fatal(err):
            self._fatal = err
        else:
            self._trouble_at = time.monotonic()
            log.debug("kafka client: %s", err)

    # -- errors -----------------------------------------------------------------------------
    @staticmethod
    def _fenced(err: Any) -> bool:
        from confluent_kafka import KafkaError

        # a fenced static member is a fatal error (code _FATAL) that names the broker's reason
        return err.code() == KafkaError.FENCED_INSTANCE_ID or "group.instance.id" in str(err)

    def _check(self) -> None:
        if self._fatal is not None:
            err, self._fatal = self._fatal, None
            self._on_fatal(err)

    def _on_fatal(self, err: Any) -> None:
        """Raise the error of a fatal client error — unless it is this member's own fencing
        just after the broker was away: librdkafka re-joins when its session expires without a
        coordinator, the broker gives the static member a new id, and an offset commit still
        carrying the old id is refused as FENCED_INSTANCE_ID, which librdkafka makes fatal
        (measured: the kill -9 test's broker restart). The consumer is then re-created."""
        recent = time.monotonic() - self._trouble_at < max(
            60.0, self.settings.session_timeout_ms / 250
        )
        if not self._fenced(err):
            raise ClientError(f"Kafka client failed: {err.str()}")
        if not recent:
            raise MemberFenced(
                f"another process joined consumer group {self.settings.group_id!r} as static "
                f"member {self.instance_id!r}"
            )
        self.join_restarts += 1
        log.warning(
            "consumer fenced right after the broker was away (librdkafka re-joined with a new "
            "member id): re-creating the consumer (restart %d)",
            self.join_restarts,
        )
        self._trouble_at = -float("inf")  # a second fencing without broker trouble: another process
        old, lost = self.client, sorted(self.owned)
        self.owned = set()
        if lost:
            self.listener.lost(lost)
        close_consumer(old, 10.0)
        self._join()

    # -- the loop ---------------------------------------------------------------------------
    def _part(self, tp: TP) -> Any:
        from confluent_kafka import TopicPartition

        return cached_partition(self._parts, tp, TopicPartition)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        self._check()
        client = self.client
        # what is already fetched, at once; else wait up to the timeout for the first record
        # only (``consume`` would wait the whole timeout for a full batch)
        msgs: list[Any] = client.consume(max_records, 0)
        if not msgs and timeout_s > 0:
            first = client.poll(timeout_s)
            if first is not None:
                msgs = [first, *client.consume(max_records - 1, 0)] if max_records > 1 else [first]
        out: list[Any] = []  # Message: the fields of a Record
        delivered = self.delivered
        for m in msgs:
            err = m.error()
            if err is not None:
                if is_fatal(err):
                    self._revoked_now.clear()
                    self._starts_now.clear()
                    self._on_fatal(err)
                    return []  # (re-created: every partition starts again where it stood)
                log.debug("kafka consumer: %s", err)
                continue
            topic, part, off = m.topic(), m.partition(), m.offset()
            ts = m.timestamp()[1]
            out.append(Message(topic, part, off, m.key(), m.value(), ts if ts >= 0 else None))
            delivered[(topic, part)] = off + 1
        if self._revoked_now:
            out = self._drop_revoked(out)
        self._starts_now.clear()
        self._check()
        return out

    def _drop_revoked(self, records: list[Any]) -> list[Any]:
        """Records of partitions revoked during this poll are not this member's. A partition
        assigned again within it is read again from the start its listener gave, else from
        its first dropped record (the group's committed offset)."""
        revoked, self._revoked_now = self._revoked_now, set()
        keep: list[Any] = []
        first: dict[TP, int] = {}  # the offset of each revoked partition's first dropped record
        for r in records:
            tp = (r.topic, r.partition)
            if tp in revoked:
                first.setdefault(tp, r.offset)
            else:
                keep.append(r)
        for tp, off in first.items():
            self.delivered[tp] = off  # (never delivered)
            if tp in self.owned:  # assigned again: some of the dropped records were its own
                start = self._starts_now[tp] if tp in self._starts_now else off
                self.seek(tp, start)
                if start is None:
                    self.delivered.pop(tp, None)
                else:
                    self.delivered[tp] = start
        return keep

    def seek(self, tp: TP, offset: int | None) -> None:
        from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

        try:
            self.client.seek(TopicPartition(*tp, OFFSET_BEGINNING if offset is None else offset))
        except KafkaException as err:  # not fetched yet: it starts at its assigned offset
            log.debug("seek %s: %s", tp, err)

    def pause(self, tp: TP) -> None:
        self.paused.add(tp)
        if tp in self.owned:  # (re-assigned partitions are paused by the callback)
            self.client.pause([self._part(tp)])

    def resume(self, tp: TP) -> None:
        self.paused.discard(tp)
        if tp in self.owned:  # a revoked partition has nothing to resume
            self.client.resume([self._part(tp)])

    def assigned(self) -> set[TP]:
        return set(self.owned)

    def lag(self) -> dict[TP, int]:
        """High watermark minus position per assigned partition. The high watermark is the one
        of the latest fetch response (no broker round trip); a partition not fetched yet is
        asked for."""
        if not self.owned:
            return {}
        try:
            positions = self.client.position([self._part(tp) for tp in sorted(self.owned)])
        except Exception:
            return {}
        out = {}
        for p in positions:
            key = (p.topic, p.partition)
            try:
                high = self.client.get_watermark_offsets(p, cached=True)[1]
                if high < 0:
                    got = self.client.get_watermark_offsets(p, timeout=1.0)
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

    def _commit_positions(self, partitions: list[Any]) -> None:
        positions = [p for p in self.client.position(partitions) if p.offset >= 0]
        if positions:
            self.client.commit(offsets=positions, asynchronous=False)

    def commit(self, offsets: Mapping[TP, int] | None = None, asynchronous: bool = False) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if offsets is None:
            data = [p for p in self.client.position(list(map(self._part, sorted(self.owned))))]
            data = [p for p in data if p.offset >= 0]
        else:
            data = [TopicPartition(t, p, off) for (t, p), off in offsets.items()]
        if not data:
            return
        try:
            self.client.commit(offsets=data, asynchronous=asynchronous)
        except KafkaException as err:
            e = err.args[0]
            if is_fatal(e) or e.code() == KafkaError.FENCED_INSTANCE_ID:
                self._on_fatal(e)
                return
            if e.code() == KafkaError._NO_OFFSET:
                return
            raise ClientError(f"offset commit failed: {e.str()}") from None
        self._check()

    def committed(self, tps: list[TP]) -> dict[TP, tuple[int, str] | None]:
        from confluent_kafka import TopicPartition

        got = self.client.committed([TopicPartition(*tp) for tp in tps], timeout=10.0)
        out: dict[TP, tuple[int, str] | None] = {}
        for p in got:
            tp = (p.topic, p.partition)
            out[tp] = None if p.offset < 0 else (int(p.offset), p.metadata or "")
        return out

    def group_metadata(self) -> Any:
        return self.client.consumer_group_metadata()

    def close(self) -> None:
        if self.client is not None:
            close_consumer(self.client)


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
