"""Where the gateway's records go: the learner service over Kafka, or one in this process.

* :class:`KafkaOutlet` — a forwarder thread reads the write-ahead log in order, produces each
  record to its topic of docs/events.md (decisions → ``decisions``, rewards and heartbeats →
  ``feedback``, key = the bandit id) through a :class:`~..stream.kafka.sink.Sink`, and marks
  them delivered only when the sink's flush succeeded (else it sends them again: the learner
  de-duplicates by event id). A models reader follows the compacted models topic the learner
  publishes to.
* :class:`EmbeddedOutlet` — without a broker, the learner runs in this process: the broadcast
  learner's service loop (``stream/scaling/broadcast.py``) over :class:`WalTransport`, whose
  topics are the log's records; its snapshots name the log offsets it has learned through,
  and the log keeps every record after them, so a restart resumes exactly there.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..stream.transport import TP, Record, Transport
from .wal import Entry, WriteAheadLog

__all__ = ["EmbeddedOutlet", "KafkaOutlet", "WalTransport"]

log = logging.getLogger("streaming_dpbandit.gateway")

#: records produced per flush by the forwarder, at most
FORWARD_BATCH = 2048
#: the forwarder waits this long for more records before a flush of a short batch
LINGER_S = 0.002
#: the delivery mark (a file) is written at most this often
CHECKPOINT_S = 0.1


class Outlet:
    """What the gateway needs from an outlet."""

    def submit(self, entry: Entry) -> None:
        raise NotImplementedError

    @property
    def backlog(self) -> int:
        """Records written but not yet delivered."""
        raise NotImplementedError

    def oldest_wait_s(self) -> float:
        """How long the oldest undelivered record has waited (0 when none)."""
        return 0.0

    def healthy(self) -> tuple[bool, str]:
        return True, ""

    def close(self) -> None:
        raise NotImplementedError


# -- Kafka ------------------------------------------------------------------------------------
class KafkaOutlet(Outlet):
    """Forward the log to Kafka; follow the models topic (module docstring).

    Parameters
    ----------
    settings
        The service settings (its ``kafka`` section, topics, the gateway section).
    wal
        The log (:meth:`WriteAheadLog.release` is called as records are delivered).
    bandit
        The bandit id: the key of every record.
    on_model
        Called with every newer :class:`~..stream.scaling.models_topic.ModelMessage`.
    models_topic
        The compacted models topic.
    """

    def __init__(
        self,
        settings: Any,
        wal: WriteAheadLog,
        bandit: str,
        on_model: Callable[[Any], object],
        models_topic: str,
        metrics: Any = None,
    ):
        self.settings = settings
        self.wal = wal
        self.key = bandit.encode()
        self.on_model = on_model
        self.models_topic = models_topic
        self.metrics = metrics
        t = settings.kafka.topics
        self.topic_names = {"decisions": t.decisions, "feedback": t.feedback}
        self.checkpoint = Path(wal.directory) / "delivered"

    def delivered_seq(self) -> int:
        try:
            return int(self.checkpoint.read_text().strip() or -1)
        except (OSError, ValueError):
            return -1

    def open(self, entries: list[Entry]) -> None:
        from ..stream.kafka.sink import open_sink
        from ..stream.scaling.models_topic import ModelsReader, ensure_models_topic

        k = self.settings.kafka
        if k.create_topics:
            from ..stream.kafka.transport import ensure_topics

            ensure_topics(k)
            ensure_models_topic(k, self.models_topic)
        done = self.delivered_seq()
        self.queue: collections.deque[Entry] = collections.deque(e for e in entries if e.seq > done)
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.last_ok = time.monotonic()
        self.failures = 0
        self.error = ""
        self.delivered = done
        self.checkpointed_at = time.monotonic()
        self.sink = open_sink(k)
        self.models = ModelsReader(k, self.models_topic, self._bad_model).open()
        for msg in self.models.catch_up().values():
            self.on_model(msg)
        self.threads = [
            threading.Thread(target=self._forward, name="gateway-forwarder", daemon=True),
            threading.Thread(target=self._follow_models, name="gateway-models", daemon=True),
        ]
        for th in self.threads:
            th.start()
        if self.queue:
            log.info("forwarding %d records written before the restart", len(self.queue))

    def _bad_model(self, partition, offset, raw, reason, detail) -> None:
        log.warning("models topic %s[%d]@%d: %s (%s)", self.models_topic, partition, offset,
                    reason, detail[:200])  # fmt: skip

    def submit(self, entry: Entry) -> None:
        with self.cond:
            self.queue.append(entry)
            self.cond.notify()

    @property
    def backlog(self) -> int:
        return len(self.queue)

    def oldest_wait_s(self) -> float:
        try:
            first = self.queue[0]
        except IndexError:
            return 0.0
        return max(0.0, time.time() - first.time)

    def healthy(self) -> tuple[bool, str]:
        wait = self.oldest_wait_s()
        limit = self.settings.gateway.unready_after_s
        if wait > limit:
            return False, f"records wait {wait:.1f} s for the broker ({self.error})"
        return True, ""

    def _forward(self) -> None:
        timeout = self.settings.gateway.delivery_timeout_s
        while not self.stop.is_set():
            with self.cond:
                if not self.queue:
                    self.cond.wait(0.2)
                    continue
            if len(self.queue) < FORWARD_BATCH:  # linger: one flush for the records of 2 ms
                self.stop.wait(LINGER_S)
            with self.cond:
                batch = [self.queue[i] for i in range(min(len(self.queue), FORWARD_BATCH))]
            try:
                for e in batch:
                    if e.topic is not None:
                        self.sink.send(self.topic_names[e.topic], self.key, e.value)
                self.sink.flush(timeout)
            except Exception as err:  # Undelivered, or the client's own error
                self.failures += 1
                self.error = f"{type(err).__name__}: {err}"
                if self.metrics is not None:
                    self.metrics.delivery_failures.inc()
                if self.failures == 1 or self.failures % 30 == 0:
                    log.warning("cannot deliver %d records to Kafka (%s); retrying",
                                len(self.queue), self.error[:300])  # fmt: skip
                self.sink.reset()
                self.stop.wait(min(1.0, 0.1 * self.failures))
                continue
            if self.failures:
                log.info("Kafka reachable again; %d records waiting", len(self.queue))
            self.failures, self.error = 0, ""
            self.last_ok = time.monotonic()
            with self.cond:
                for _ in batch:
                    self.queue.popleft()
            self.delivered = batch[-1].seq
            if time.monotonic() - self.checkpointed_at >= CHECKPOINT_S:
                self._checkpoint(self.delivered)

    def _checkpoint(self, seq: int) -> None:
        """Record that the log is delivered through ``seq`` (at most every CHECKPOINT_S: a
        restart sends again what was delivered after the last mark; the learner drops the
        repeats by event id)."""
        if seq < 0:
            return
        tmp = self.checkpoint.with_suffix(".tmp")
        tmp.write_text(str(seq))
        tmp.replace(self.checkpoint)
        self.checkpointed_at = time.monotonic()
        self.wal.release(seq)

    def _follow_models(self) -> None:
        every = self.settings.gateway.model_refresh_ms / 1000
        while not self.stop.wait(every):
            try:
                for msg in self.models.poll(0.0).values():
                    self.on_model(msg)
            except Exception as err:  # the broker away: the next poll retries
                log.debug("models topic poll failed: %s", err)

    def close(self) -> None:
        """Deliver what is buffered (a few seconds at most), then stop."""
        deadline = time.monotonic() + self.settings.gateway.delivery_timeout_s
        while self.queue and time.monotonic() < deadline and not self.failures:
            time.sleep(0.02)
        self.stop.set()
        with self.cond:
            self.cond.notify_all()
        for th in self.threads:
            th.join(timeout=10)
        self._checkpoint(self.delivered)
        for closing in (self.sink.close, self.models.close):
            try:
                closing()
            except Exception as err:
                log.debug("closing failed: %s", err)


# -- embedded ------------------------------------------------------------------------------------
class WalTransport(Transport):
    """The embedded learner's transport: the log's records as the decisions and feedback
    topics (one partition each, offsets = the records' topic offsets), models to a callback.

    ``poll`` waits up to ``idle_s`` for new records (the service asks with timeout 0 when it
    has no broker). ``commit`` (called after each of the learner's snapshots) tells the log
    which records the learner's state now includes.
    """

    def __init__(
        self,
        topics: dict[str, str],
        models_topic: str,
        on_model: Callable[[bytes], object],
        on_commit: Callable[[dict[str, int]], None],
        entries: list[Entry],
        idle_s: float = 0.05,
    ):
        self.names = topics  # "decisions"/"feedback" → topic name
        self.models_topic = models_topic
        self.on_model = on_model
        self.on_commit = on_commit
        self.entries = entries
        self.idle_s = idle_s
        self.cond = threading.Condition()
        self.dead_letters: collections.Counter[str] = collections.Counter()

    def open(self, start_offsets: dict[TP, int]) -> None:
        self.queue: collections.deque[Record] = collections.deque()
        self.start = {k: int(start_offsets.get((name, 0), 0)) for k, name in self.names.items()}
        for e in self.entries:
            if e.topic is not None and e.offset >= self.start[e.topic]:
                self.queue.append(self._record(e))
        self.entries = []
        self.polled = 0

    def _record(self, e: Entry) -> Record:
        return Record(self.names[e.topic], 0, e.offset, None, e.value)  # type: ignore[index]

    def feed(self, e: Entry) -> None:
        if e.topic is None:
            return
        with self.cond:
            self.queue.append(self._record(e))
            self.cond.notify()

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        with self.cond:
            if not self.queue:
                self.cond.wait(max(timeout_s, self.idle_s))
            n = min(len(self.queue), max_records)
            out = [self.queue.popleft() for _ in range(n)]
        self.polled += n
        return out

    @property
    def backlog(self) -> int:
        return len(self.queue)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        if topic == self.models_topic:
            self.on_model(value)
        else:  # the learner's dead letters (it publishes no decisions)
            self.dead_letters[topic] += 1
            log.warning("learner dead letter: %s", value[:500].decode(errors="replace"))

    def flush(self) -> None:
        return None

    def commit(self, offsets: dict[TP, int]) -> None:
        by_topic = {k: int(offsets.get((name, 0), self.start[k])) for k, name in self.names.items()}
        self.on_commit(by_topic)

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()


class EmbeddedOutlet(Outlet):
    """The learner in this process (module docstring).

    Parameters
    ----------
    learner_settings
        Service settings of the learner: one bandit, a ``broadcast`` section with
        ``role: learner``, no ``kafka`` section, its state directory.
    wal
        The gateway's log.
    on_model
        Called with every :class:`~..stream.scaling.models_topic.ModelMessage` it releases.
    metrics
        The learner's collectors (exported on the gateway's ``/metrics``).
    """

    def __init__(self, learner_settings: Any, wal: WriteAheadLog, on_model, metrics=None):
        self.settings = learner_settings
        self.wal = wal
        self.on_model = on_model
        self.metrics = metrics
        self.error = ""

    def open(self, entries: list[Entry]) -> None:
        from ..settings import TopicsSettings
        from ..stream.scaling.broadcast import learner_service
        from ..stream.scaling.models_topic import ModelMessage

        t = TopicsSettings()
        self.topics = {"decisions": t.decisions, "feedback": t.feedback}
        # log offset of the first record of each topic with its seq, to map commits to seqs
        self.unlearned: dict[str, collections.deque[tuple[int, int]]] = {
            "decisions": collections.deque(),
            "feedback": collections.deque(),
        }

        def model(value: bytes) -> None:
            self.on_model(ModelMessage.model_validate_json(value))

        self.transport = WalTransport(
            self.topics, self.settings.broadcast.models_topic, model, self._committed, entries
        )
        self.service = learner_service(self.settings, self.transport, self.metrics)
        self.service.open()  # loads the snapshot: transport.open(its offsets) sees the log
        for e in entries:
            if e.topic is not None and e.offset >= self.transport.start[e.topic]:
                self.unlearned[e.topic].append((e.offset, e.seq))
        self.thread = threading.Thread(target=self._run, name="gateway-learner", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.summary = self.service.run()
        except Exception as err:  # the learner stopped (e.g. a refit failure): not ready
            self.error = f"{type(err).__name__}: {err}"
            log.exception("the embedded learner stopped")

    def submit(self, entry: Entry) -> None:
        if entry.topic is not None:
            self.unlearned[entry.topic].append((entry.offset, entry.seq))
        self.transport.feed(entry)

    def _committed(self, offsets: dict[str, int]) -> None:
        """The learner's snapshot includes every record before ``offsets``: release them."""
        low = None
        for topic, q in self.unlearned.items():
            while q and q[0][0] < offsets[topic]:
                q.popleft()
            if q:
                low = q[0][1] if low is None else min(low, q[0][1])
        self.wal.release(self.wal.written_seq if low is None else low - 1)

    @property
    def backlog(self) -> int:
        return self.transport.backlog

    def healthy(self) -> tuple[bool, str]:
        if self.error or not self.thread.is_alive():
            return False, f"the embedded learner stopped: {self.error or 'exited'}"
        return True, ""

    def close(self) -> None:
        self.service.stop.request()
        self.transport.wake()
        self.thread.join(timeout=60)
