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
the task and makes the replica rejoin the group. Partitions taken without a revocation (a
session that ended; kafka-python's re-join stall, after which it joins again with a new
consumer) drop their tasks without a commit.

The replica runs on either client of ``kafka.client`` through the seam (``stream/kafka/
seam.py``): the client's group consumer tells it which partitions it gained and lost
(:class:`_Tasks`), and each task has the client's transactional producer.
"""

from __future__ import annotations

import itertools
import logging
import operator
import time
from collections.abc import Callable, Mapping
from typing import Any

from ...metrics import ServiceMetrics
from ...settings import ServiceSettings
from ..errors import ServiceStartError
from ..kafka.compacted import COMPACTED
from ..kafka.ledger import KafkaLedger
from ..kafka.seam import ClientError, NewTopic, Rebalance, kafka_client
from ..kafka.state_store import KafkaChangelogStore
from ..signals import StopSwitch
from ..state import tp_key
from ..transport import TP
from .task import SNAPSHOT_AT, TaskLost, TaskService

__all__ = ["GroupService", "committed_lag"]

log = logging.getLogger("streaming_dpbandit.group")

by_partition = operator.attrgetter("topic", "partition")


class _Tasks(Rebalance):
    """The consumer's partitions as tasks: a task opens when the replica holds both of its
    partitions and closes when it loses one (with the classic protocol every rebalance revokes
    everything first; with the consumer protocol partitions move one by one)."""

    def __init__(self, group: GroupService):
        self.group = group
        self.owned: set[TP] = set()

    def assigned(self, tps: list[TP]) -> Mapping[TP, int | None]:
        g = self.group
        self.owned |= set(tps)
        ready = sorted(
            p
            for p in {p for _t, p in tps}
            if p not in g.tasks and all(tp in self.owned for tp in g.task_tps(p))
        )
        offsets = g.open_tasks(ready) if ready else {}
        out = {}
        for tp, off in offsets.items():
            if tp in tps:
                out[tp] = off
            else:  # held before its sibling came: read it again from the task's offset
                g.consumer.seek(tp, off)
        return out

    def revoked(self, tps: list[TP]) -> None:
        self.owned -= set(tps)
        self.group.revoke({p for _t, p in tps})

    def lost(self, tps: list[TP]) -> None:
        self.owned -= set(tps)
        self.group.abandon({p for _t, p in tps})


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
        self.client = kafka_client(settings.kafka_section().client)

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

    def task_tps(self, p: int) -> list[TP]:
        t = self.settings.kafka_section().topics
        return [(t.contexts, p), (t.feedback, p)]

    def _prepare_topics(self) -> int:
        """Create the topics when allowed; check co-partitioning; returns the partition count."""
        k = self.settings.kafka_section()
        t = k.topics
        with self.client.admin(k) as admin:
            existing = admin.list_topics()
            if k.create_topics:
                admin.create_topics(
                    [
                        NewTopic(n, k.partitions, k.replication_factor)
                        for n in (t.contexts, t.feedback, t.decisions, t.dead_letter)
                    ]
                )
            c, f = t.contexts, t.feedback
            counts = {name: admin.partition_count(name) for name in (c, f)}
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
                    admin.create_topics([NewTopic(topic, n, k.replication_factor, COMPACTED)])
                have = admin.partition_count(topic)
                if have != n:
                    raise ServiceStartError(
                        f"topic {topic} has {have} partitions; the input topics have {n}: "
                        "one state and ledger partition per task"
                    )
            return n

    def open(self) -> None:
        """Check the topics and join the consumer group (tasks arrive with the assignment)."""
        k = self.settings.kafka_section()
        self.tasks: dict[int, TaskService] = {}
        self.rebalances: list[dict] = []
        self.lost: list[str] = []
        try:
            self.n_partitions = self._prepare_topics()
            self.consumer = self.client.group_consumer(
                k, k.instance_id(single=False), co_partitioned=True
            )
            self._listener = _Tasks(self)
            self.consumer.subscribe([k.topics.contexts, k.topics.feedback], self._listener)
        except ServiceStartError:
            raise
        except Exception as err:
            raise ServiceStartError(f"cannot reach Kafka: {type(err).__name__}: {err}") from None
        self.started = time.monotonic()
        self.stop = StopSwitch()
        self._rejoin = False

    @property
    def join_restarts(self) -> int:
        """Consumers re-created (kafka-python's re-join stall; librdkafka's fencing right
        after broker trouble)."""
        return int(getattr(self.consumer, "join_restarts", 0))

    def _producer(self, partition: int):
        k = self.settings.kafka_section()
        return self.client.transactional_producer(
            k, f"{k.group_id}-task-{partition}", self.settings.scaling.transaction_timeout_ms
        )

    # -- rebalances -------------------------------------------------------------------------
    def revoke(self, partitions: set[int]) -> None:
        """Hand over the tasks of revoked partitions: a final commit each (fenced if their new
        owner was faster)."""
        t0 = time.monotonic()
        closed = sorted(p for p in partitions if p in self.tasks)
        for p in closed:
            task = self.tasks.pop(p)
            try:
                task.close_task("rebalance")
            except TaskLost as err:
                log.warning(
                    "task %d lost while handing it over: %s", p, err, extra={"partition": p}
                )
                self.lost.append(str(err))
        if not closed:
            return
        self.rebalances.append({"revoked": closed, "s": time.monotonic() - t0})
        log.info(
            "revoked tasks %s in %.2f s",
            closed,
            time.monotonic() - t0,
            extra={"partitions": closed},
        )

    def abandon(self, partitions: set[int]) -> None:
        """Partitions taken without a revocation (this member's session ended; kafka-python's
        re-join stall): the broker has moved them, and their new owners fence this replica's
        producers. Drop the tasks without committing (their open transactions are aborted;
        the new owner resumes from the last commit)."""
        dropped = sorted(p for p in partitions if p in self.tasks)
        for p in dropped:
            self.tasks.pop(p).abandon()
        if dropped:
            log.warning("tasks %s lost without a revocation: dropped uncommitted", dropped)

    def open_tasks(self, partitions: list[int]) -> dict[TP, int | None]:
        """Open the tasks of ``partitions``; returns where each of their input partitions
        resumes (None: from the beginning)."""
        try:
            return self._open_tasks(partitions)
        except ServiceStartError:
            raise
        except Exception as err:
            raise ServiceStartError(
                f"cannot take over a task: {type(err).__name__}: {err}"
            ) from err

    def _open_tasks(self, partitions: list[int]) -> dict[TP, int | None]:
        t0 = time.monotonic()
        new = [p for p in partitions if p not in self.tasks]
        if not new:
            return {}
        producers = {}
        for p in new:  # fence every previous owner first: their open transactions are aborted
            producers[p] = self._producer(p)
            producers[p].init_transactions()
        t_fenced = time.monotonic()
        # then read the committed state and ledger of all the new tasks at once
        k = self.settings.kafka_section()
        store = KafkaChangelogStore(k, self.state_topic, partitions=new, client=self.client)
        for p, start in self._snapshot_starts(new).items():
            store.start_reading_at(p, start)
        store.refresh()
        ledger = KafkaLedger(k, self.ledger_topic, partitions=new, client=self.client).open()
        t_read = time.monotonic()
        out: dict[TP, int | None] = {}
        for p in new:
            task = TaskService(self.settings, p, producers[p], self.consumer, self.metrics)
            offsets = task.open_task(self.n_partitions, store, ledger)
            for tp in task.tps:
                out[tp] = offsets.get(tp)
                self.consumer.resume(tp)  # (a task dropped before paused its partitions)
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
        return out

    def _snapshot_starts(self, partitions: list[int]) -> dict[int, int]:
        """Offsets of the tasks' last committed snapshots in the state topic, from the
        metadata of the group's committed offsets (written in the same transaction)."""
        contexts = self.settings.kafka_section().topics.contexts
        try:
            committed = self.consumer.committed([(contexts, p) for p in partitions])
        except Exception as err:  # read the whole partitions instead
            log.debug("no committed offsets: %s", err)
            return {}
        out = {}
        for (_t, p), got in committed.items():
            meta = got[1] if got is not None else ""
            if meta.startswith(SNAPSHOT_AT):
                try:
                    out[p] = int(meta[len(SNAPSHOT_AT) :])
                except ValueError:
                    continue
        return out

    def _drop(self, p: int, err: TaskLost) -> None:
        """A task's producer failed: forget the task (its new owner resumes it from the last
        commit). Fenced: another replica owns it now and the group protocol will tell our
        consumer; anything else: rejoin the group so that the task is reopened cleanly."""
        task = self.tasks.pop(p, None)
        if task is not None:
            task.abandon()
            for tp in task.tps:
                try:
                    self.consumer.pause(tp)
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
        timeout = k.poll_timeout_ms / 1000
        while not self.stop.requested:
            if self._rejoin:
                self._rejoin = False
                self.consumer.rejoin()
            try:  # (tasks are handed over inside, by the listener)
                records = self.consumer.poll(k.max_poll_records, timeout)
            except ServiceStartError:
                self.consumer.close()
                raise
            except ClientError as err:
                self.consumer.close()
                raise ServiceStartError(str(err)) from None
            now = time.perf_counter()
            busy = set()
            for (_topic, p), run in itertools.groupby(records, by_partition):
                task = self.tasks.get(p)
                if task is not None:
                    task.transport.inbox.extend(run)
                    busy.add(p)
            for p in list(self.tasks):
                task = self.tasks[p]
                try:
                    if p in busy:  # (a poll holds runs of one partition's records)
                        for tp, run in itertools.groupby(
                            task.transport.poll(k.max_poll_records, 0.0), by_partition
                        ):
                            task.service.queues[tp].extend(zip(run, itertools.repeat(now)))
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


def committed_lag(
    bootstrap: str, group_id: str, topics: list[str], client: str = "kafka-python"
) -> int | None:
    """Input records a replica group has not committed yet, summed over the partitions of
    ``topics`` (empty partitions count as done); None while a non-empty partition has no
    commit. With ``scaling.mode: group`` a commit means processed *and* durable."""
    from ...settings import KafkaSettings

    settings = KafkaSettings(bootstrap_servers=bootstrap, client=client)
    kc = kafka_client(client)
    with kc.admin(settings) as admin:
        committed = admin.group_offsets(group_id)
    reader = kc.reader(settings, read_committed=False)
    try:
        parts = [(t, p) for t in topics for p in reader.partitions(t)]
        ends = reader.end_offsets(parts)
    finally:
        reader.close()
    lag = 0
    for tp in parts:
        off = committed.get(tp)
        if off is None:
            if ends[tp] == 0:
                continue
            return None
        lag += ends[tp] - off
    return lag
