"""Decision replicas of a model broadcast (``broadcast.role: decider``; docs/scaling.md).

A replica consumes ``contexts`` in its own consumer group (contexts may be keyed by event id,
spread over partitions) and follows the compacted models topic. It decides every context with
the latest released model it holds (``decide_frozen``: no rounds, no statistics), or with the
policy's initial, data-independent model before the first release, and publishes a
:class:`~.broadcast.BroadcastDecision` — tagged with the model version it used and carrying the
chosen arm's feature row — keyed by the bandit id. Stateless: input offsets are committed to
Kafka after the decisions they imply are flushed (at-least-once; a context re-decided after a
crash gets the same decision when the model did not change in between; a decision that could
not be written stops the replica before the offsets that imply it are committed). It runs on
either client of ``kafka.client`` through the seam (``stream/kafka/seam.py``). It reads
contexts with the service's parser (:func:`~streaming_dpbandit.stream.parsing.parse_context`)
and writes dead letters with the service's writer.
"""

from __future__ import annotations

import itertools
import logging
import operator
import os
import socket
import time

import numpy as np

from ...metrics import ServiceMetrics
from ...settings import ServiceSettings
from ..arms import arm_id_kwargs
from ..bandit import BanditRuntime
from ..clock import record_clock
from ..dead_letters import DeadLetters
from ..errors import ServiceStartError, out_of_memory_is_a_start_error
from ..kafka.seam import ClientError, Rebalance, UndeliveredRecords, kafka_client
from ..parsing import BadInput, Pending, event_time_limit, parse_context
from ..signals import StopSwitch
from .broadcast import (
    BroadcastDecision,
    check_broadcast,
    ensure_broadcast_topics,
    user_hashes,
)
from .models_topic import ModelMessage, ModelsReader

__all__ = ["REFRESH_CHUNK", "DecisionReplica"]

log = logging.getLogger("streaming_dpbandit.broadcast")

#: Decisions per chunk of a decision replica; the models topic is checked between chunks.
REFRESH_CHUNK = 256


class DecisionReplica:
    """A decide-only replica of a model broadcast.

    Parameters
    ----------
    settings
        Settings with ``broadcast.role == "decider"`` and a ``kafka`` section.
    metrics
        Collectors (a fresh registry by default).

    Attributes
    ----------
    pickups
        One entry per model version taken into use: ``(bandit, version, published_at,
        loaded_at)`` (wall-clock seconds), for monitoring and the tests.
    """

    def __init__(self, settings: ServiceSettings, metrics=None):
        self.settings = settings
        self.metrics = metrics or ServiceMetrics()

    # -- set-up -------------------------------------------------------------------------------
    def open(self) -> None:
        check_broadcast(self.settings)
        s, b = self.settings, self.settings.broadcast_section()
        k = s.kafka_section()
        self.client = kafka_client(k.client)
        self.replica = b.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.topics = k.topics
        self.bandits: dict[str, BanditRuntime] = {}
        for name, bs in s.bandits.items():
            overrides = {"bandit_id": name} if "bandit_id" in type(bs.policy).model_fields else {}
            with out_of_memory_is_a_start_error(f"bandit {name!r}"):
                if bs.user_level is not None:  # the learner's policy, and its user-id hash key
                    policy = bs.user_level.build(bs.policy, seed=bs.seed, **overrides)
                else:
                    policy = bs.policy.build(seed=bs.seed, **overrides)
                self.bandits[name] = BanditRuntime(name, bs, policy, None)
        self.pickups: list[tuple[str, int, float, float]] = []
        self.decided = 0
        try:
            ensure_broadcast_topics(s, self.client)
            self.producer = self.client.producer(k)
            self.dead_letters = dead_letters_of(
                self.producer, k.topics.dead_letter, s, self.metrics
            )
            self.models = ModelsReader(k, b.models_topic, self._bad_model, self.client).open()
            self._apply(self.models.catch_up())
            self._join()
        except Exception as err:  # e.g. kafka.errors.NoBrokersAvailable
            raise ServiceStartError(
                f"cannot open the transport: {type(err).__name__}: {err}"
            ) from None
        self.last_refresh = self.last_commit = time.monotonic()
        self.started = time.monotonic()
        self.stop = StopSwitch()

    def _join(self) -> None:
        """Join the contexts topic's group. Before partitions are given away, the decisions
        are flushed and the offsets of every polled context committed (all of them are
        decided when poll runs), so the next owner resumes exactly there. Partitions lost
        without a revocation (kafka-python's re-join stall; a session that ended) were taken
        by the others, which resume from the last commit: the decisions published since may
        be published again, as after a process restart (at-least-once)."""
        k = self.settings.kafka_section()
        self.consumer = self.client.group_consumer(
            k,
            k.instance_id(single=False),
            commit_on_revoke=self.producer.flush,
            max_poll_records=k.max_poll_records,
        )
        self.consumer.subscribe([k.topics.contexts], _LogAssignment())

    def assigned(self) -> set[tuple[str, int]]:
        """The contexts partitions this replica decides now (the probes' ``partitions``)."""
        return self.consumer.assigned()

    @property
    def join_restarts(self) -> int:
        """Consumers re-created (kafka-python's re-join stall)."""
        return int(getattr(self.consumer, "join_restarts", 0))

    def request_stop(self, *_args) -> None:
        self.stop.request()

    def install_signal_handlers(self) -> None:
        self.stop.install()

    # -- models -------------------------------------------------------------------------------
    def model_version(self, bandit: str) -> int:
        return self.bandits[bandit].policy.model_version

    def refresh_models(self) -> None:
        self._apply(self.models.poll(0.0))
        self.last_refresh = time.monotonic()

    def _apply(self, models: dict[str, ModelMessage]) -> None:
        now = time.time()
        for name, msg in models.items():
            rt = self.bandits.get(name)
            if rt is None or msg.model_version <= rt.policy.model_version:
                continue  # another deployment's bandit, or not newer
            if msg.policy != rt.policy.name or msg.calibration != getattr(
                rt.policy, "calibration", "non-private"
            ):
                self.dead_letters.raw(
                    self.settings.broadcast_section().models_topic,
                    -1,
                    -1,
                    b"",
                    "model_mismatch",
                    f"model of {msg.policy}/{msg.calibration} for a {rt.policy.name} bandit",
                )
                continue
            try:
                rt.policy.load_released_model(msg.released_model())
            except ValueError as err:
                self.dead_letters.raw(
                    self.settings.broadcast_section().models_topic,
                    -1,
                    -1,
                    b"",
                    "invalid_model",
                    str(err),
                )
                continue
            self.pickups.append((name, msg.model_version, msg.published_at, now))
            self.metrics.model_version.labels(name).set(msg.model_version)
            log.info(
                "bandit %s: deciding with model version %d (published %.3f s ago)",
                name,
                msg.model_version,
                now - msg.published_at,
                extra={"bandit": name, "model_version": msg.model_version},
            )

    def _bad_model(self, partition, offset, raw, reason, detail) -> None:
        self.dead_letters.raw(
            self.settings.broadcast_section().models_topic, partition, offset, raw, reason, detail
        )

    # -- the loop -----------------------------------------------------------------------------
    def run(self, progress=None) -> dict:
        """Decide until a stop is requested; returns the summary."""
        k = self.settings.kafka_section()
        refresh = self.settings.broadcast_section().model_refresh_ms / 1000
        commit_every = self.settings.broadcast_section().commit_interval_s
        timeout = k.poll_timeout_ms / 1000
        while not self.stop.requested:
            if time.monotonic() - self.last_refresh >= refresh:
                self.refresh_models()
            try:
                records = self.consumer.poll(k.max_poll_records, timeout)
            except ClientError as err:
                raise ServiceStartError(str(err)) from None
            received = time.perf_counter()
            for (topic, partition), msgs in itertools.groupby(records, _by_partition):
                self._process(topic, partition, msgs, received)
            if time.monotonic() - self.last_commit >= commit_every:
                self._commit()
            if progress is not None:
                progress(self)
        return self.finish()

    def _process(self, topic: str, partition: int, msgs, received: float) -> None:
        run: list[Pending] = []
        rt_run = None
        for m in msgs:
            parsed = self.parse(topic, partition, m, received)
            if parsed is None:
                continue
            rt, pend = parsed
            if rt is not rt_run or len(run) >= min(self.settings.max_batch, REFRESH_CHUNK):
                self._decide(rt_run, run)
                run, rt_run = [], rt
            run.append(pend)
        self._decide(rt_run, run)

    def parse(self, topic: str, partition: int, m, received: float):
        """(runtime, Pending) of a polled context, or None (it was dead-lettered)."""
        skew = self.settings.max_event_time_skew_s
        wall = time.time()
        out = parse_context(
            m.value,
            received,
            self.bandits,
            max_bytes=self.settings.max_message_bytes,
            time_limit=event_time_limit(m, skew, wall),
            skew=skew,
            clock=record_clock(m, wall),
            lag=self.settings.max_event_time_lag_s,
        )
        if isinstance(out, BadInput):
            self.dead_letters.raw(
                topic, partition, m.offset, m.value, out.reason, out.detail, m.key
            )
            return None
        return out

    def _decide(self, rt: BanditRuntime | None, batch: list[Pending]) -> None:
        if not batch or rt is None:  # (a batch always comes with its bandit's runtime)
            return
        # a long poll batch (a backlog) must not delay a new model: check between chunks
        if (
            time.monotonic() - self.last_refresh
            >= self.settings.broadcast_section().model_refresh_ms / 1000
        ):
            self.refresh_models()
        B = len(batch)
        K = max(p.X.shape[0] for p in batch)
        X = np.zeros((B, K, rt.d))
        mask = np.zeros((B, K), dtype=bool)
        for i, p in enumerate(batch):
            X[i, : p.X.shape[0]] = p.X
            mask[i, : p.X.shape[0]] = True
        pol = rt.policy
        dec = pol.decide_frozen(
            X,
            event_ids=[p.event.event_id for p in batch],
            mask=None if mask.all() else mask,
            **arm_id_kwargs(pol, batch),
        )
        now = time.time()
        calibration = getattr(pol, "calibration", "non-private")
        key = rt.bandit_id.encode()
        users: dict[str, object] = {}
        if rt.user_level:  # the learner admits by the keyed hash; the id goes no further
            hashes, key_id = user_hashes(pol, [p.event.user_id for p in batch])
            users = {"user_key": key_id}
        done = time.perf_counter()
        for i, p in enumerate(batch):
            a = int(dec.arms[i])
            if users:
                users["user_hash"] = hashes[i]
            out = BroadcastDecision(
                event_id=p.event.event_id,
                bandit_id=rt.bandit_id,
                arm_id=p.arm_ids[a],
                arm_index=a,
                propensity=float(dec.propensities[i]),
                model_version=int(dec.model_version),
                episode=int(dec.model_version),
                round=0,
                calibration=calibration,
                policy=pol.name,
                decided_at=now,
                event_time=p.event.event_time,
                features=p.X[a].tolist(),
                replica=self.replica,
                **users,
            )
            value = out.model_dump_json(exclude_none=True).encode()
            # the context's record timestamp goes on: the learner's contexts clock is the
            # contexts' stream clock (docs/service.md, The stream clock)
            stamp = None if p.clock is None else round(p.clock * 1000)
            self.producer.send(self.topics.decisions, key=key, value=value, timestamp_ms=stamp)
            self.metrics.decision_latency.labels(rt.bandit_id).observe(done - p.received)
        self.metrics.events.labels(rt.bandit_id, "decided").inc(B)
        self.decided += B

    def _commit(self) -> None:
        """Flush the decisions, then commit the offsets of the contexts they answer. A decision
        that could not be written stops the replica first: its context is decided again by
        whoever resumes from the last commit."""
        try:
            self.producer.flush()
        except UndeliveredRecords as err:
            raise ServiceStartError(
                f"decisions not written, offsets not committed: {err}"
            ) from None
        try:
            self.consumer.commit()
        except ClientError as err:  # a rebalance in progress: the next commit covers it
            log.warning("offset commit failed: %s", err)
        self.last_commit = time.monotonic()

    # -- the end ------------------------------------------------------------------------------
    def finish(self) -> dict:
        try:
            self._commit()
        finally:
            summary = self.summary()
            self.consumer.close()
            self.models.close()
            self.producer.close()
        return summary

    def summary(self) -> dict:
        elapsed = time.monotonic() - self.started
        return {
            "role": "decider",
            "replica": self.replica,
            "elapsed_s": elapsed,
            "decisions": self.decided,
            "events_per_s": self.decided / elapsed if elapsed > 0 else 0.0,
            "model_versions": {name: self.model_version(name) for name in self.bandits},
            "pickups": len(self.pickups),
            "dead_letters": dict(self.dead_letters.count),
        }


_by_partition = operator.attrgetter("topic", "partition")


class _LogAssignment(Rebalance):
    """A decision replica's partitions start at the group's committed offsets: it only logs
    them."""

    def assigned(self, tps):
        parts = sorted(p for _t, p in tps)
        log.info("contexts partitions assigned: %s", parts, extra={"partitions": parts})
        return {}


def dead_letters_of(producer, topic: str, settings: ServiceSettings, metrics) -> DeadLetters:
    """The dead-letter writer of a replica: through its Kafka producer."""

    def send(topic: str, key: bytes | None, value: bytes) -> None:
        producer.send(topic, key=key, value=value)

    return DeadLetters(send, topic, settings.bandits, metrics)
