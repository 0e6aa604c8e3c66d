"""One task of a partitioned group (``scaling.mode: group``; docs/scaling.md, pattern 1).

A task is the service of one partition index: a
:class:`~streaming_dpbandit.stream.service.Service` over the task's contexts and feedback
partitions whose state (:class:`TaskState`) is a snapshot in the compacted state topic, with
its ledger records and input offsets committed in the same Kafka transaction. The replica that
owns it (:class:`~.group.GroupService`) moves it on a rebalance.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ...privacy.ledger import LedgerConflictError, ReleaseRecord
from ...settings import ServiceSettings
from ..kafka.ledger import KafkaLedger
from ..kafka.seam import GroupConsumer, TransactionalProducer, is_fenced
from ..kafka.state_store import KafkaChangelogStore
from ..parsing import BadInput, unknown_bandit
from ..service import Service
from ..state import StateBackend
from ..transport import TP, Record, Transport
from .partitioning import partition_of

__all__ = ["SNAPSHOT_AT", "TaskLost", "TaskService", "TaskState"]


SNAPSHOT_AT = "dpbandit-snapshot-at="


class TaskLost(RuntimeError):
    """A task's producer failed (fenced by a newer owner, or a broken transaction)."""

    @property
    def fenced(self) -> bool:
        """True when another producer of the task's transactional id took over."""
        return is_fenced(self.__cause__) or "Fenced" in str(self)


class _TaskTransport(Transport):
    """A task's view of the replica's clients: the records the replica's consumer polled for
    the task's partitions (routed by the group service), and sends into the task's
    transaction."""

    def __init__(
        self, producer: TransactionalProducer, consumer: GroupConsumer, tps: list[TP], replica: str
    ):
        self.producer = producer
        self.consumer = consumer
        self.tps = tps
        self.headers = [("replica", replica.encode())]
        self.inbox: list[Record] = []

    def open(self, start_offsets: dict[TP, int]) -> None:  # the group service seeks
        return None

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """The records the group service routed to this task since the last call."""
        out, self.inbox = self.inbox, []
        return out

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        try:
            self.producer.send(topic, key, value, headers=self.headers)
        except Exception as err:  # fenced, or the transaction is in an error state
            raise TaskLost(f"send failed: {type(err).__name__}: {err}") from err

    def flush(self) -> None:
        """Wait until every record sent is answered (a failed one fails the transaction; the
        commit is the durability point)."""
        try:
            self.producer.flush()
        except Exception as err:
            raise TaskLost(f"flush failed: {type(err).__name__}: {err}") from err

    def pause(self, tp: TP) -> None:
        self.consumer.pause(tp)

    def resume(self, tp: TP) -> None:
        self.consumer.resume(tp)

    def assigned(self) -> set[TP]:
        return set(self.tps)

    def lag(self) -> dict[TP, int]:
        return {tp: n for tp, n in self.consumer.lag().items() if tp in self.tps}


class _TaskLedger:
    """The task's ledger: the replica's :class:`KafkaLedger` (the partitions of its tasks),
    written with the task's producer to the task's partition."""

    def __init__(self, ledger: KafkaLedger, send) -> None:
        self.ledger = ledger
        self.send = send
        self.repaired_bytes = 0

    def append(self, record: ReleaseRecord) -> bool:
        return self.ledger.append(record, self.send)

    def records(self) -> list[ReleaseRecord]:
        return self.ledger.records()

    def close(self) -> None:
        return None


class TaskState(StateBackend):
    """A group task's state: its snapshot in the compacted state topic, its ledger records
    and its input offsets committed in the task's Kafka transaction. A producer error loses
    the task (:class:`TaskLost`); a ledger conflict (a re-drawn release) stops the replica.

    Parameters
    ----------
    task
        The task (its name, producer, consumer and input partitions).
    store
        The replica's changelog store, read up to date for the task's partition.
    ledger
        The replica's view of the ledger topic.
    """

    def __init__(self, task: TaskService, store: KafkaChangelogStore, ledger: KafkaLedger):
        self.task = task
        self.store = store
        self.ledger = _TaskLedger(ledger, task.send_to_partition)

    def load(self) -> dict | None:
        snap = self.store.load(self.task.name, refresh=False)
        with self.task.losing_the_task():
            self.task.producer.begin()  # unledgered releases go into the first transaction
        return snap

    def save(self, state: dict) -> int:
        with self.task.losing_the_task():
            return self.store.save(self.task.name, state, self.task.send_to_partition)

    def after_save(self, service) -> None:
        """Ledger records and input offsets, committed with the snapshot in one transaction."""
        task = self.task
        with task.losing_the_task():
            for rt in service.bandits.values():
                service.ledger_append(rt)
            # the committed input offsets carry where this snapshot starts in the state topic:
            # a new owner reads the task's state from there, not from the beginning
            task.producer.flush()
            start = self.store.last_start.get(task.name)
            meta = f"{SNAPSHOT_AT}{task.producer.offset_of(start)}" if start is not None else ""
            offsets = {}
            for tp in task.tps:
                q = service.queues.get(tp)
                off = q[0][0].offset if q else service.offsets.get(tp)
                if off is not None:
                    offsets[tp] = (off, meta)
            if offsets:  # for monitoring tools (consumer-group lag); the snapshot rules
                task.producer.send_offsets(offsets, task.consumer)
            task.producer.commit()
            task.producer.begin()
        task.dirty = False


class TaskService:
    """The service of one task (partition index) inside a :class:`GroupService`: a
    :class:`~streaming_dpbandit.stream.service.Service` over the task's two partitions, with
    the task's transactional state (:class:`TaskState`).

    Parameters
    ----------
    settings
        The replica's settings (the task keeps only the bandits of its partition).
    partition
        The task's partition index.
    producer
        The task's transactional producer, after ``init_transactions()``.
    consumer
        The replica's group consumer (shared by its tasks).
    metrics
        The replica's collectors.
    """

    def __init__(
        self,
        settings: ServiceSettings,
        partition: int,
        producer: TransactionalProducer,
        consumer: GroupConsumer,
        metrics: Any,
    ):
        self.settings = settings
        self.partition = partition
        self.producer = producer
        self.consumer = consumer
        self.metrics = metrics
        topics = settings.kafka_section().topics
        self.tps = [(topics.contexts, partition), (topics.feedback, partition)]
        self.transport = _TaskTransport(
            producer, consumer, self.tps, settings.kafka_section().client_id
        )
        self.dirty = False

    @property
    def name(self) -> str:
        return f"task-{self.partition}"

    @contextlib.contextmanager
    def losing_the_task(self):
        """Producer errors lose the task (:class:`TaskLost`); a ledger conflict propagates."""
        try:
            yield
        except (LedgerConflictError, TaskLost):  # a re-drawn release: stop loudly, never retry
            raise
        except Exception as err:
            raise TaskLost(f"{self.name}: {type(err).__name__}: {err}") from err

    def send_to_partition(
        self, topic: str, key: bytes | None, value: bytes | None, track: bool = False
    ) -> Any:
        with self.losing_the_task():
            return self.producer.send(topic, key, value, partition=self.partition, track=track)

    def open_task(
        self, n_partitions: int, store: KafkaChangelogStore, ledger: KafkaLedger
    ) -> dict[TP, int]:
        """Restore the task's last committed snapshot from ``store`` (already read up to date
        for this task's partition); returns the offsets to seek to."""
        self.n_partitions = n_partitions
        mine = {
            name: b
            for name, b in self.settings.bandits.items()
            if partition_of(name, n_partitions) == self.partition
        }
        self.service = Service(
            self.settings.model_copy(update={"bandits": mine}),
            self.transport,
            self.metrics,
            state=TaskState(self, store, ledger),
            missing_bandit=self.wrong_partition,
        )
        offsets, snap = self.service.restore_state()
        self.dirty = True
        self.service.started = self.service.last_snapshot = time.monotonic()
        if self.service.unsaved_keys(snap):
            # a new task (or a bandit new to it): commit its fresh state (the bandits' noise and
            # tie-break keys) before any record is processed, so that a release re-made after a
            # crash is the same draw — never a second one — and a decision re-made is the same
            # (an aborted transaction stays readable to a read_uncommitted client)
            self.snapshot("open")
        return offsets

    def wrong_partition(self, bandit_id: str) -> BadInput:
        """The dead letter of a message naming a bandit of another task."""
        if bandit_id in self.settings.bandits:
            p = partition_of(bandit_id, self.n_partitions)
            return BadInput(
                "wrong_partition",
                f"bandit {bandit_id!r} belongs to partition {p}, not {self.partition}: "
                "key contexts and feedback by bandit_id",
            )
        return unknown_bandit(bandit_id)

    def snapshot(self, reason: str) -> None:
        """Snapshot, ledger records and input offsets, committed in one transaction."""
        self.service.snapshot(reason)

    def commit(self) -> None:
        """Commit the open transaction when anything happened since the last commit."""
        if self.dirty:
            self.snapshot("interval")

    def close_task(self, reason: str) -> None:
        """Commit a final snapshot and close the producer (the task moves elsewhere)."""
        try:
            self.snapshot(reason)
        finally:
            self.producer.close(timeout_s=5)

    def abandon(self) -> None:
        """Drop the task without committing (it was fenced or its transaction broke)."""
        try:
            self.producer.close(timeout_s=0)
        except Exception:  # the producer may be in any state
            pass
