"""The seam's group consumer on kafka-python, and the workarounds that client needs.

* kafka-python 3 runs rebalance listeners on its I/O loop, where blocking stops the
  heartbeats: :class:`KafkaPythonGroupConsumer` only notes the changes there and calls the
  seam's :class:`~.seam.Rebalance` after ``poll()`` returns, on the application's thread; the
  records that poll returned for a partition then sought elsewhere are dropped (they are read
  again from the new position). A decision replica's consumer (``commit_on_revoke``) commits
  its consumed offsets inside the listener, before the partitions go (the blocking
  ``commit()`` is refused there: the coordinator's commit is awaited instead).
* kafka-python 3.0.12 can stall in a group re-join: the member stops heartbeating, the broker
  removes it, and the client never joins again (docs/operations.md). :class:`JoinWatchdog`
  notices a membership that has not been stable for ``kafka.rejoin_stall_s``; the consumer
  then tells its listener the partitions are lost and joins again with a new client.
* A paused partition that resumes is fetched again (:func:`resume_partition`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...settings import KafkaSettings
from ..transport import TP, Record
from .seam import ClientError, GroupConsumer, Rebalance, cached_partition

__all__ = [
    "JoinWatchdog",
    "KafkaPythonGroupConsumer",
    "MemberFenced",
    "consumer_lag",
    "resume_partition",
    "wait_for_partitions",
]

log = logging.getLogger("streaming_dpbandit.kafka")


class MemberFenced(ClientError):
    """Another process joined the group with this member's ``group.instance.id``."""


def wait_for_partitions(consumer, topics, timeout_s: float = 30.0) -> None:
    """Wait until the consumer's metadata lists partitions of every topic. Joining a group
    while a just-created topic has no partition metadata yet gives an empty assignment, and
    kafka-python 3.0 can then stay without partitions (its rejoin stalls)."""
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


def _log_commit_failure(offsets, response) -> None:
    if isinstance(response, Exception):
        log.debug("offset commit failed: %s", response)


def _tps(parts) -> list[TP]:
    return sorted((p.topic, p.partition) for p in parts)


class KafkaPythonGroupConsumer(GroupConsumer):
    """kafka-python's ``KafkaConsumer`` as a group member (see the module docstring).

    Parameters
    ----------
    settings
        The ``kafka`` settings (``rejoin_stall_s``, the group).
    options
        ``KafkaConsumer`` keyword arguments.
    instance_id
        The static member id (None: a dynamic member).
    commit_on_revoke
        If given, called before partitions are revoked (a decision replica flushes its
        decisions), after which every consumed offset is committed.

    Attributes
    ----------
    client
        The current ``KafkaConsumer`` (replaced after a re-join stall).
    join_restarts
        Consumers re-created after a re-join stall.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        options: dict[str, Any],
        instance_id: str | None,
        commit_on_revoke: Callable[[], None] | None = None,
    ):
        self.settings = settings
        self.options = options
        self.instance_id = instance_id
        self.commit_on_revoke = commit_on_revoke
        self.paused: set[TP] = set()
        self.owned: set[TP] = set()
        self.delivered: dict[TP, int] = {}
        self.watchdog = JoinWatchdog(settings.rejoin_stall_s)
        self.join_restarts = 0
        self._parts: dict[TP, Any] = {}  # kafka-python TopicPartitions, made once each
        self._events: list[tuple[str, list[TP]]] = []
        self.client: Any = None

    # -- membership -------------------------------------------------------------------------
    def subscribe(self, topics: list[str], listener: Rebalance) -> None:
        self.topics, self.listener = list(topics), listener
        self._join()

    def _join(self) -> None:
        from kafka import KafkaConsumer

        self.client = KafkaConsumer(**self.options)
        wait_for_partitions(self.client, self.topics)
        self.client.subscribe(self.topics, listener=self._client_listener())

    def _client_listener(self) -> Any:
        """kafka-python's listener: it notes the changes (see the module docstring)."""
        import kafka.consumer.subscription_state as subs

        me = self
        before = self.commit_on_revoke or (lambda: None)

        if self.commit_on_revoke is not None and not hasattr(
            subs, "AsyncConsumerRebalanceListener"
        ):  # kafka-python 2 runs listeners inside poll(), on the application's thread

            class CommittingInPoll(subs.ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    me._events.append(("revoked", _tps(revoked)))
                    try:
                        before()
                        me.client.commit()
                    except Exception as err:
                        log.warning("offset commit at revocation failed: %s", err)

                def on_partitions_assigned(self, assigned):
                    me._events.append(("assigned", _tps(assigned)))

            return CommittingInPoll()

        if self.commit_on_revoke is not None:

            class Committing(subs.AsyncConsumerRebalanceListener):
                # the blocking commit() is refused on the I/O loop: await the coordinator's
                async def on_partitions_revoked(self, revoked):
                    me._events.append(("revoked", _tps(revoked)))
                    c = me.client
                    try:
                        before()
                        offsets = c._subscription.all_consumed_offsets()
                        await c._coordinator._commit_offsets_sync_async(offsets)
                    except Exception as err:
                        log.warning("offset commit at revocation failed: %s", err)

                async def on_partitions_assigned(self, assigned):
                    me._events.append(("assigned", _tps(assigned)))

            return Committing()

        class Noting(subs.ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                me._events.append(("revoked", _tps(revoked)))

            def on_partitions_assigned(self, assigned):
                me._events.append(("assigned", _tps(assigned)))

        return Noting()

    def unsubscribe(self) -> None:
        self.client.unsubscribe()

    def rejoin(self) -> None:
        """Leave the assignment and subscribe again (the group rebalances)."""
        self.client.unsubscribe()
        self.client.subscribe(self.topics, listener=self._client_listener())

    def _rejoin_stalled(self) -> None:
        """kafka-python's re-join stall: the broker has removed this member and moved its
        partitions; tell the listener they are lost and join again with a new consumer."""
        self.join_restarts += 1
        lost = sorted(self.owned)
        log.warning(
            "consumer group membership not stable for %.0f s (kafka-python re-join stall): "
            "%sre-creating the consumer (restart %d)",
            self.settings.rejoin_stall_s,
            f"dropping partitions {lost} and " if lost else "",
            self.join_restarts,
        )
        try:
            self.client.close(autocommit=False)
        except Exception as err:  # a stalled client may fail to leave the group cleanly
            log.debug("closing the stalled consumer failed: %s", err)
        self._events.clear()
        self.owned = set()
        if lost:
            self.listener.lost(lost)
        try:
            self._join()
        except Exception as err:
            raise ClientError(
                f"cannot re-create the consumer: {type(err).__name__}: {err}"
            ) from None

    def _fenced(self) -> MemberFenced:
        return MemberFenced(
            f"another process joined consumer group {self.settings.group_id!r} as static "
            f"member {self.instance_id!r}"
        )

    # -- the loop ---------------------------------------------------------------------------
    def _part(self, tp: TP) -> Any:
        from kafka import TopicPartition

        return cached_partition(self._parts, tp, TopicPartition)

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        from kafka.errors import FencedInstanceIdError

        try:
            batches = self.client.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except FencedInstanceIdError:
            raise self._fenced() from None
        if not batches and self.watchdog.stalled(self.client):
            self._rejoin_stalled()
            return []
        out: list[Any] = []  # kafka-python's ConsumerRecords: every field of a Record
        sought = self._rebalanced() if self._events else ()
        delivered = self.delivered
        for part, msgs in batches.items():
            if msgs:
                tp = (part.topic, part.partition)
                if tp in sought:
                    continue
                out.extend(msgs)
                delivered[tp] = msgs[-1].offset + 1
        return out

    def _rebalanced(self) -> set[TP]:
        """Tell the listener what changed during the last poll; seek where it says. Returns
        the partitions whose records of that poll are not to be delivered."""
        events, self._events = self._events, []
        skip: set[TP] = set()
        for kind, tps in events:
            if kind == "revoked":
                self.owned -= set(tps)
                skip |= set(tps)
                self.listener.revoked(tps)
                continue
            self.owned |= set(tps)
            for tp, off in self.listener.assigned(tps).items():
                if off is None:
                    self.client.seek_to_beginning(self._part(tp))
                else:
                    self.client.seek(self._part(tp), off)
                skip.add(tp)
            again = [self._part(tp) for tp in sorted(set(tps) & self.paused)]
            if again:  # the owner's pauses outlive a re-assignment
                self.client.pause(*again)
        return skip

    def seek(self, tp: TP, offset: int | None) -> None:
        if offset is None:
            self.client.seek_to_beginning(self._part(tp))
        else:
            self.client.seek(self._part(tp), offset)

    def pause(self, tp: TP) -> None:
        self.paused.add(tp)
        if tp in self.assigned():  # (re-assigned partitions are paused after the listener)
            self.client.pause(self._part(tp))

    def resume(self, tp: TP) -> None:
        self.paused.discard(tp)
        if tp in self.assigned():  # a revoked partition has nothing to resume
            resume_partition(self.client, self._part(tp))

    def assigned(self) -> set[TP]:
        if self.client is None:  # not opened yet (or closed): nothing assigned
            return set()
        return {(p.topic, p.partition) for p in self.client.assignment()}

    def lag(self) -> dict[TP, int]:
        return consumer_lag(self.client, list(self.client.assignment()))

    def commit(self, offsets: Mapping[TP, int] | None = None, asynchronous: bool = False) -> None:
        from kafka.errors import FencedInstanceIdError
        from kafka.structs import OffsetAndMetadata

        data = None
        if offsets is not None:
            mine = self.assigned()
            data = {
                self._part(tp): OffsetAndMetadata(off, "", -1)
                for tp, off in offsets.items()
                if tp in mine
            }
            if not data:
                return
        try:
            if asynchronous:
                self.client.commit_async(data, callback=_log_commit_failure)
            else:
                self.client.commit(data)
        except FencedInstanceIdError:
            raise self._fenced() from None
        except Exception as err:  # a rebalance in progress, the broker away
            raise ClientError(f"offset commit failed: {type(err).__name__}: {err}") from err

    def committed(self, tps: list[TP]) -> dict[TP, tuple[int, str] | None]:
        out: dict[TP, tuple[int, str] | None] = {}
        for tp in tps:
            got = self.client.committed(self._part(tp), metadata=True)
            out[tp] = None if got is None else (int(got.offset), got.metadata or "")
        return out

    def group_metadata(self) -> Any:
        return self.client.group_metadata()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    def open(self, start_offsets: dict[TP, int]) -> None:
        return None
