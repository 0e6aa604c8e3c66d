"""Several replicas in one consumer group: per-partition tasks with Kafka transactions
(docs/scaling.md, pattern 1).

A *task* is an input partition index p: the bandits whose id hashes to p and partition p of both
input topics (contexts and feedback are keyed by ``bandit_id`` and co-partitioned). Each task is
a :class:`~streaming_dpbandit.stream.service.Service` over its own bandits with its own
transactional producer (``transactional.id = <group>-task-<p>``). Everything the task writes —
decisions, dead letters, its snapshot (in partition p of the compacted state topic) and its
ledger records (partition p of the compacted ledger topic) — belongs to the task's open
transaction, committed every ``scaling.commit_interval_s`` and at every private release before
the release is used.

When a replica gains a task it calls ``init_transactions()`` for the task's id: this fences every
older producer of that id (a crashed, paused or partitioned replica) and aborts its open
transaction. Only then does it read the task's last committed snapshot and seek to its offsets.
A replica that lost a task can never commit for it again; any error of a task's producer drops
the task and makes the replica rejoin the group. A membership stuck outside the stable state
for ``kafka.rejoin_stall_s`` (kafka-python's re-join stall) drops every task and joins again
with a new consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ...metrics import ServiceMetrics
from ...settings import ServiceSettings
from ..errors import ServiceStartError
from ..kafka.ledger import KafkaLedger
from ..kafka.state_store import KafkaChangelogStore
from ..kafka.transport import (
    JoinWatchdog,
    client_options,
    close_stalled,
    group_consumer_options,
    producer_options,
    wait_for_partitions,
)
from ..signals import StopSwitch
from ..state import tp_key
from ..transport import Record
from .task import SNAPSHOT_AT, TaskLost, TaskService

__all__ = ["GroupService", "committed_lag"]

log = logging.getLogger("streaming_dpbandit.group")


def _partition_count(admin, topic: str, wait_s: float = 30.0) -> int:
    """Partitions of ``topic`` (0 if it does not exist); waits for a just-created topic."""
    deadline = time.monotonic() + wait_s
    while True:
        (meta,) = admin.describe_topics([topic])
        if meta.get("error_code", 0) == 3:  # UNKNOWN_TOPIC_OR_PARTITION
            n = 0
        else:
            n = len(meta["partitions"])
        if n > 0 or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


class GroupService:
    """One ``dpbandit serve`` replica in a consumer group (``scaling.mode: group``).

    Parameters
    ----------
    settings
        Validated settings with a ``kafka`` section.
    metrics
        Collectors (a fresh registry by default).
    """

    def __init__(self, settings: ServiceSettings, metrics=None):
        self.settings = settings
        self.metrics = metrics or ServiceMetrics()

    # -- set-up -----------------------------------------------------------------------------
    @property
    def state_topic(self) -> str:
        return (
            self.settings.scaling.state_topic or f"{self.settings.kafka_section().group_id}.state"
        )

    @property
    def ledger_topic(self) -> str:
        return (
            self.settings.scaling.ledger_topic or f"{self.settings.kafka_section().group_id}.ledger"
        )

    def _prepare_topics(self) -> int:
        """Create the topics when allowed; check co-partitioning; returns the partition count."""
        from kafka.admin import KafkaAdminClient, NewTopic
        from kafka.errors import TopicAlreadyExistsError

        k = self.settings.kafka_section()
        t = k.topics
        admin = KafkaAdminClient(**client_options(k))
        try:
            existing = set(admin.list_topics())
            if k.create_topics:
                new = [
                    NewTopic(n, k.partitions, k.replication_factor)
                    for n in (t.contexts, t.feedback, t.decisions, t.dead_letter)
                    if n not in existing
                ]
                if new:
                    try:
                        admin.create_topics(new)
                    except TopicAlreadyExistsError:
                        pass
            c, f = t.contexts, t.feedback
            counts = {name: _partition_count(admin, name) for name in (c, f)}
            for name, n in counts.items():
                if n == 0:
                    raise ServiceStartError(f"input topic {name} does not exist")
            if counts[c] != counts[f]:
                raise ServiceStartError(
                    f"contexts ({counts[c]} partitions) and feedback ({counts[f]}) must have "
                    "the same number of partitions"
                )
            n = counts[c]
            for topic in (self.state_topic, self.ledger_topic):
                if topic not in existing:
                    if not k.create_topics:
                        raise ServiceStartError(f"topic {topic} does not exist")
                    KafkaChangelogStore.ensure_topic(admin, topic, n, k.replication_factor)
                have = _partition_count(admin, topic)
                if have != n:
                    raise ServiceStartError(
                        f"topic {topic} has {have} partitions; the input topics have {n}: "
                        "one state and ledger partition per task"
                    )
            return n
        finally:
            admin.close()

    def open(self) -> None:
        """Check the topics and join the consumer group (tasks arrive with the assignment)."""
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        k = self.settings.kafka_section()
        try:
            self.n_partitions = self._prepare_topics()
            self.consumer = self._consumer()
        except ServiceStartError:
            raise
        except Exception as err:
            raise ServiceStartError(f"cannot reach Kafka: {type(err).__name__}: {err}") from None
        self.tasks: dict[int, TaskService] = {}
        self.rebalances: list[dict] = []
        self.lost: list[str] = []
        group = self

        class Listener(ConsumerRebalanceListener):
            # kafka-python 3 runs these on the client's event loop: blocking here would stop
            # the heartbeats, so they only take note; the loop acts after poll() returns
            def on_partitions_revoked(self, revoked):
                group._revoked |= {p.partition for p in revoked}

            def on_partitions_assigned(self, assigned):
                group._assigned = sorted({p.partition for p in assigned})

        self._listener = Listener()
        self._watchdog = JoinWatchdog(k.rejoin_stall_s)
        self.join_restarts = 0
        self._subscribe()
        self.started = time.monotonic()
        self.stop = StopSwitch()
        self._rejoin = False
        self._revoked: set[int] = set()
        self._assigned: list[int] | None = None

    def _consumer(self):
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        k = self.settings.kafka_section()
        return KafkaConsumer(
            **group_consumer_options(k, k.instance_id(single=False)),
            # the same indices of both input topics: a replica owns whole tasks
            partition_assignment_strategy=[RangePartitionAssignor],
        )

    def _subscribe(self) -> None:
        """Join once the input topics' partitions are known (an empty first assignment is
        where kafka-python's re-join stall starts; docs/operations.md)."""
        k = self.settings.kafka_section()
        wait_for_partitions(self.consumer, [k.topics.contexts, k.topics.feedback])
        self.consumer.subscribe([k.topics.contexts, k.topics.feedback], listener=self._listener)

    def _recreate_consumer(self) -> None:
        """kafka-python's re-join stall: the broker has removed this member and moved its
        tasks to the other replicas, which fence this one's producers. Drop every task without
        committing (its open transaction is aborted; the new owner resumes from the last
        commit, state and offsets from Kafka) and join again with a new consumer: what a
        process restart would do, without losing the process."""
        self.join_restarts += 1
        close_stalled(
            self.consumer,
            self.settings.kafka_section().rejoin_stall_s,
            self.join_restarts,
            dropping=f"tasks {sorted(self.tasks)}",
        )
        for p in list(self.tasks):
            self.tasks.pop(p).abandon()
        self._revoked, self._assigned, self._rejoin = set(), None, False
        try:
            self.consumer = self._consumer()
            self._subscribe()
        except Exception as err:
            raise ServiceStartError(
                f"cannot re-create the consumer: {type(err).__name__}: {err}"
            ) from None

    def _producer(self, partition: int):
        from kafka import KafkaProducer

        k = self.settings.kafka_section()
        return KafkaProducer(
            **producer_options(k),
            transactional_id=f"{k.group_id}-task-{partition}",
            transaction_timeout_ms=self.settings.scaling.transaction_timeout_ms,
        )

    # -- rebalances -------------------------------------------------------------------------
    def _revoke(self, partitions: set[int]) -> None:
        t0 = time.monotonic()
        for p in sorted(partitions):
            task = self.tasks.pop(p, None)
            if task is None:
                continue
            try:
                task.close_task("rebalance")
            except TaskLost as err:
                log.warning(
                    "task %d lost while handing it over: %s", p, err, extra={"partition": p}
                )
                self.lost.append(str(err))
        self.rebalances.append({"revoked": sorted(partitions), "s": time.monotonic() - t0})
        log.info(
            "revoked tasks %s in %.2f s",
            sorted(partitions),
            time.monotonic() - t0,
            extra={"partitions": sorted(partitions)},
        )

    def _rebalanced(self) -> set[int]:
        """Act on what the listener noted during the last poll: hand over the revoked tasks
        (a commit; fenced if their new owner was faster), then open the assigned ones. Returns
        the partitions whose records of that poll must be dropped (they are re-read)."""
        revoked, self._revoked = self._revoked, set()
        assigned, self._assigned = self._assigned, None
        if revoked:
            self._revoke(revoked)
        if assigned is None:
            return revoked
        try:
            self._open_tasks(assigned)
        except ServiceStartError:
            raise
        except Exception as err:
            raise ServiceStartError(
                f"cannot take over a task: {type(err).__name__}: {err}"
            ) from err
        return revoked | set(assigned)

    def _open_tasks(self, partitions: list[int]) -> None:
        from kafka import TopicPartition

        t0 = time.monotonic()
        new = [p for p in partitions if p not in self.tasks]
        if not new:
            return
        producers = {}
        for p in new:  # fence every previous owner first: their open transactions are aborted
            producers[p] = self._producer(p)
            producers[p].init_transactions()
        t_fenced = time.monotonic()
        # then read the committed state and ledger of all the new tasks at once
        k = self.settings.kafka_section()
        extra = {key: v for key, v in client_options(k).items() if key != "bootstrap_servers"}
        boot = k.bootstrap_servers.split(",")
        store = KafkaChangelogStore(boot, self.state_topic, None, extra, new)
        for p in new:
            start = self._snapshot_start(p)
            if start is not None:
                store.start_reading_at(p, start)
        store.refresh()
        ledger = KafkaLedger(boot, self.ledger_topic, None, extra, new).open()
        t_read = time.monotonic()
        for p in new:
            task = TaskService(self.settings, p, producers[p], self.consumer, self.metrics)
            offsets = task.open_task(self.n_partitions, store, ledger)
            for tp in task.tps:
                part = TopicPartition(*tp)
                off = offsets.get(tp)
                if off is None:
                    self.consumer.seek_to_beginning(part)
                else:
                    self.consumer.seek(part, off)
            self.tasks[p] = task
        t1 = time.monotonic()
        self.rebalances.append({"assigned": partitions, "s": t1 - t0})
        log.info(
            "assigned tasks %s in %.2f s (fencing %.2f s, reading state %.2f s, restoring %.2f s)",
            partitions,
            t1 - t0,
            t_fenced - t0,
            t_read - t_fenced,
            t1 - t_read,
            extra={"partitions": sorted(partitions)},
        )

    def _snapshot_start(self, p: int) -> int | None:
        """Offset of task p's last committed snapshot in the state topic, from the metadata of
        the group's committed offsets (written in the same transaction), if any."""
        from kafka import TopicPartition

        tp = TopicPartition(self.settings.kafka_section().topics.contexts, p)
        try:
            committed = self.consumer.committed(tp, metadata=True)
        except Exception as err:  # read the whole partition instead
            log.debug("no committed offset for %s: %s", tp, err)
            return None
        meta = getattr(committed, "metadata", None) or ""
        if not meta.startswith(SNAPSHOT_AT):
            return None
        try:
            return int(meta[len(SNAPSHOT_AT) :])
        except ValueError:
            return None

    def _drop(self, p: int, err: TaskLost) -> None:
        """A task's producer failed: forget the task (its new owner resumes it from the last
        commit). Fenced: another replica owns it now and the group protocol will tell our
        consumer; anything else: rejoin the group so that the task is reopened cleanly."""
        from kafka import TopicPartition

        task = self.tasks.pop(p, None)
        if task is not None:
            task.abandon()
            for tp in task.tps:
                try:
                    self.consumer.pause(TopicPartition(*tp))
                except Exception:  # already unassigned
                    pass
        self.lost.append(str(err))
        if err.fenced:
            log.warning(
                "task %d dropped: fenced by a newer owner (%s)", p, err, extra={"partition": p}
            )
        else:
            log.warning(
                "task %d dropped (%s); rejoining the consumer group",
                p,
                err,
                extra={"partition": p},
            )
            self._rejoin = True

    # -- the loop ---------------------------------------------------------------------------
    def request_stop(self, *_args) -> None:
        self.stop.request()

    def install_signal_handlers(self) -> None:
        self.stop.install()

    def run(self, progress: Callable[[Any], object] | None = None) -> dict[str, Any]:
        """Serve until a stop is requested; returns the summary of the tasks owned at the end."""
        k = self.settings.kafka_section()
        last_commit = time.monotonic()
        while not self.stop.requested:
            if self._rejoin:
                self._rejoin = False
                self.consumer.unsubscribe()
                self.consumer.subscribe(
                    [k.topics.contexts, k.topics.feedback], listener=self._listener
                )
            batches = self.consumer.poll(
                timeout_ms=k.poll_timeout_ms, max_records=k.max_poll_records
            )
            # kafka-python's re-join stall (docs/operations.md): the broker has removed this
            # member and moved its tasks; drop them and join again with a new consumer
            if not batches and self._watchdog.stalled(self.consumer):
                self._recreate_consumer()
                continue
            skip = set()
            if self._revoked or self._assigned is not None:
                try:
                    skip = self._rebalanced()
                except ServiceStartError:
                    self.consumer.close()
                    raise
            now = time.perf_counter()
            for tp, msgs in batches.items():
                task = self.tasks.get(tp.partition)
                if task is None or tp.partition in skip:  # re-read from the task's offsets
                    continue
                q = task.service.queues[(tp.topic, tp.partition)]
                for m in msgs:
                    q.append(
                        (Record(tp.topic, tp.partition, m.offset, m.key, m.value, m.timestamp), now)
                    )
            for p in list(self.tasks):
                task = self.tasks[p]
                try:
                    if any(task.service.queues.values()):
                        task.service.process()
                        task.dirty = True
                    elif task.service.blocked:
                        task.service.idle_check()
                except TaskLost as err:
                    self._drop(p, err)
            if time.monotonic() - last_commit >= self.settings.scaling.commit_interval_s:
                for p in list(self.tasks):
                    try:
                        self.tasks[p].commit()
                    except TaskLost as err:
                        self._drop(p, err)
                last_commit = time.monotonic()
                for task in self.tasks.values():
                    task.service.export_metrics()
            if progress is not None:
                progress(self)
        return self.finish()

    def finish(self) -> dict:
        """Commit and close every task, leave the group; returns the summary."""
        summary = self.summary()
        for p in list(self.tasks):
            task = self.tasks.pop(p)
            try:
                task.close_task("shutdown")
            except TaskLost as err:
                log.warning("task %d: final commit failed: %s", p, err)
        self.consumer.close()
        return summary

    def summary(self) -> dict:
        out: dict[str, Any] = {
            "elapsed_s": time.monotonic() - self.started,
            "tasks": sorted(self.tasks),
            "bandits": {},
            "dead_letters": {},
            "rebalances": len(self.rebalances),
            "tasks_lost": len(self.lost),
        }
        decided = 0
        for task in self.tasks.values():
            s = task.service.summary()
            out["bandits"].update(s["bandits"])
            for reason, n in s["dead_letters"].items():
                out["dead_letters"][reason] = out["dead_letters"].get(reason, 0) + n
            decided += s["decisions"]
        out["decisions"] = decided
        out["events_per_s"] = decided / out["elapsed_s"] if out["elapsed_s"] > 0 else 0.0
        return out

    @property
    def bandits(self) -> dict:
        """The bandit runtimes of the tasks this replica owns now."""
        out = {}
        for task in self.tasks.values():
            out.update(task.service.bandits)
        return out

    def offsets(self) -> dict[str, int]:
        return {
            tp_key(tp): off for t in self.tasks.values() for tp, off in t.service.offsets.items()
        }


def committed_lag(bootstrap: str, group_id: str, topics: list[str]) -> int | None:
    """Input records a replica group has not committed yet, summed over the partitions of
    ``topics`` (empty partitions count as done); None while a non-empty partition has no
    commit. With ``scaling.mode: group`` a commit means processed *and* durable."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False)
    try:
        parts = [
            TopicPartition(t, p) for t in topics for p in sorted(c.partitions_for_topic(t) or [])
        ]
        ends = c.end_offsets(parts)
        lag = 0
        for tp in parts:
            off = c.committed(tp)
            if off is None:
                if ends[tp] == 0:
                    continue
                return None
            lag += ends[tp] - off
        return lag
    finally:
        c.close()
