"""One big bandit: decision replicas serve the latest released model, one learner learns
(docs/scaling.md, pattern 2).

* :class:`DecisionReplica` (``broadcast.role: decider``) — consumes ``contexts`` in its own
  consumer group (contexts may be keyed by event id, spread over partitions) and follows the
  compacted models topic. It decides every context with the latest released model it holds
  (``decide_frozen``: no rounds, no statistics), or with the policy's initial,
  data-independent model before the first release, and publishes a
  :class:`BroadcastDecision` — tagged with the model version it used and carrying the chosen
  arm's feature row — keyed by the bandit id. Stateless: input offsets are committed to Kafka
  after the decisions they imply are flushed (at-least-once; a context re-decided after a crash
  gets the same decision when the model did not change in between).
* :class:`Learner` (``broadcast.role: learner``) — the single service that owns the bandit's
  statistics, reward join, snapshots and ledger. It is the ordinary service loop with the
  decisions topic in place of the contexts topic: the n-th decision of the bandit's decisions
  partition is round n (a data-independent count), so episodes — and release points — are
  reached exactly as if it had decided itself, and every row enters exactly one fit. At a
  release it persists first (snapshot, then ledger) and then publishes the released model.

Privacy is unaffected: a decision is a function of the user's own context and of released
models only (the billboard model of joint DP), and the learner's releases are exactly the
single service's. What weakens is the utility analysis' assumption that the decisions of
episode k use the model fitted on episode k − 1 from the episode's start: replicas switch after
a pickup delay (docs/scaling.md).
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import signal
import socket
import time

import numpy as np
from pydantic import ValidationError

from ...config import ConfigError, ServiceSettings
from ...metrics import ServiceMetrics
from ..bandit import BadInput, BanditRuntime, Pending, arm_id_kwargs, unreadable
from ..join import EarlyFeedback, JoinStore
from ..schemas import ContextEvent, DeadLetter, Decision
from ..service import (
    DLQ_PAYLOAD_BYTES,
    Service,
    ServiceStartError,
    _first_error,
    _reason,
    dead_letter_bandit,
    out_of_memory_is_a_start_error,
)
from ..transport import TP, Record
from .models_topic import ModelMessage, ModelsReader, ensure_models_topic, model_message

__all__ = [
    "BroadcastDecision",
    "DecisionReplica",
    "Learner",
    "LearnerRuntime",
    "check_broadcast",
    "learner_kafka_settings",
    "run_broadcast",
]

log = logging.getLogger("streaming_dpbandit.broadcast")

#: Decisions per chunk of a decision replica; the models topic is checked between chunks.
REFRESH_CHUNK = 256


class BroadcastDecision(Decision):
    """A decision replica's answer (topic ``decisions``, key = bandit_id).

    Besides :class:`~streaming_dpbandit.stream.schemas.Decision`'s fields (``round`` is 0: the
    learner numbers rounds by arrival; ``episode`` is the model's episode): the context's
    ``event_time`` (for the reward join), the chosen arm's ``features`` (the learner's row) and
    the ``replica`` that decided.
    """

    event_time: float
    features: list[float]
    replica: str


def check_broadcast(settings: ServiceSettings) -> None:
    """Refuse invalid model-broadcast configurations with one clear :class:`ConfigError`."""
    b = settings.broadcast
    if b is None:
        return
    if settings.kafka is None:
        raise ConfigError("broadcast: a model broadcast needs the kafka section")
    t = settings.kafka.topics
    if b.models_topic in {t.contexts, t.feedback, t.decisions, t.dead_letter}:
        raise ConfigError("broadcast.models_topic must differ from the four service topics")
    if not settings.bandits:
        raise ConfigError("broadcast: no bandit is configured")
    for name, bs in settings.bandits.items():
        cls = type(bs.policy.build(seed=0))
        if not cls.supports_released_model:
            raise ConfigError(
                f"broadcast: bandit {name!r} runs policy {cls.name!r}, which cannot be served "
                f"from a released model (supported: fliphat)"
            )


def learner_kafka_settings(settings: ServiceSettings):
    """The learner's transport settings: it reads decisions (not contexts) and feedback in its
    own consumer group; topics are created beforehand."""
    k = settings.kafka
    b = settings.broadcast
    topics = k.topics.model_copy(update={"contexts": k.topics.decisions})
    group = b.learner_group_id or f"{k.group_id}.learner"
    return k.model_copy(update={"topics": topics, "group_id": group, "create_topics": False})


def _ensure_topics(settings: ServiceSettings) -> None:
    from ..kafka.transport import ensure_topics

    if settings.kafka.create_topics:
        ensure_topics(settings.kafka)
        if ensure_models_topic(settings.kafka, settings.broadcast.models_topic):
            log.info("created the compacted models topic %s", settings.broadcast.models_topic)


# -- the learner ------------------------------------------------------------------------------
class ReorderingJoin(JoinStore):
    """The reward join of a learner: decisions of several replicas interleave on the decisions
    partition, so their event times are only roughly ordered. The contexts watermark trails
    the largest decision event time by ``allowance`` seconds; feedback for a decision that
    arrives up to that much out of order is held, not declared an orphan, whatever the
    interleaving of the two topics."""

    def __init__(self, d: int, window: float, capacity: int, retention: float, allowance: float):
        super().__init__(d, window, capacity, retention)
        self.allowance = allowance

    def advance_context_watermark(self, t: float) -> list[EarlyFeedback]:
        return super().advance_context_watermark(t - self.allowance)


class LearnerRuntime(BanditRuntime):
    """A bandit runtime whose decisions were made elsewhere: it numbers and joins them.

    Its join tolerates decisions out of event-time order by up to one feedback window
    (:class:`ReorderingJoin`).
    """

    def __init__(self, bandit_id: str, settings, policy, metrics=None):
        super().__init__(bandit_id, settings, policy, metrics)
        j = self.join
        self.join = ReorderingJoin(j.d, j.window, j.capacity, j.retention, j.window)

    def record(self, batch: list[Pending]) -> None:
        """Register decisions read from the decisions topic as the next rounds.

        ``batch`` must not cross a model update (``policy.max_decide_batch()``).
        """
        rounds = self.policy.record_rounds(len(batch))
        for p, t in zip(batch, rounds.tolist()):
            for early in self.join.add(p.event.event_id, t, p.event.event_time, p.X[0]):
                self._resolved(early, forced=False)
        self.stats["decided"] += len(batch)


class Learner(Service):
    """The single learner of a model broadcast: the service loop over decisions + feedback.

    Parameters
    ----------
    settings
        Settings with ``broadcast.role == "learner"``.
    transport
        A transport over the decisions and feedback topics (see
        :func:`learner_kafka_settings`), or an in-process one in tests.
    metrics
        Collectors (a fresh registry by default).
    """

    def __init__(self, settings: ServiceSettings, transport, metrics=None):
        super().__init__(settings, transport, metrics)
        # the decisions topic plays the part of the contexts topic
        self.topics = self.topics.model_copy(update={"contexts": self.topics.decisions})
        self.models_topic = settings.broadcast.models_topic
        self.published: list[ModelMessage] = []

    def _build_bandits(self) -> None:
        super()._build_bandits()
        self.bandits = {
            name: LearnerRuntime(name, rt.settings, rt.policy, self.metrics)
            for name, rt in self.bandits.items()
        }

    def open(self) -> None:
        super().open()
        # a release persisted before a crash may not have reached the models topic: publish
        # the model in force again (replicas ignore versions they already have)
        for rt in self.bandits.values():
            self._publish(rt)

    def _parse_context(self, r: Record, received: float):
        """(runtime, Pending) of a decision record, or a BadInput."""
        cached = self._parsed.get(id(r))
        if cached is not None:
            return cached
        try:
            if r.value is None:  # a tombstone
                raise BadInput("malformed_json", "the message has no value")
            if len(r.value) > self.settings.max_message_bytes:
                raise BadInput(
                    "oversized", f"{len(r.value)} bytes > {self.settings.max_message_bytes}"
                )
            try:
                dec = BroadcastDecision.model_validate_json(r.value)
            except ValidationError as err:
                raise BadInput(_reason(err, "invalid_decision"), _first_error(err)) from None
            rt = self.bandits.get(dec.bandit_id)
            if rt is None:
                raise BadInput("unknown_bandit", f"bandit {dec.bandit_id!r} is not configured")
            if dec.event_time > self.time_limit:
                raise self._too_late(dec.event_time)
            if len(dec.features) != rt.d:
                raise BadInput(
                    "wrong_dimension", f"{len(dec.features)} features, bandit expects {rt.d}"
                )
            X = np.asarray(dec.features, dtype=np.float64)[None, :]
            out = (rt, Pending(dec, X, [dec.arm_id], received))
        except BadInput as bad:
            bad.__context__ = None  # (no reference cycle through the frames: see Service)
            out = bad.with_traceback(None)
        except Exception as err:  # unforeseen: no input may stop the loop
            out = unreadable(err)
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[id(r)] = out
        return out

    def _decide_run(self, tp: TP, q: collections.deque, rt: BanditRuntime, run: list) -> bool:
        i = 0
        pol = rt.policy
        while i < len(run):
            if pol.refit_due():
                rt.flush_learning()
                if not rt.refit_ready():
                    return False
                self._release(rt)
            n = min(pol.max_decide_batch(), len(run) - i)
            chunk = run[i : i + n]
            rt.record(chunk)
            for _ in chunk:
                self._pop(tp, q)
            self.metrics.events.labels(rt.bandit_id, "recorded").inc(n)
            rt.after_decisions(chunk, functools.partial(self._dead_source, bandit=rt.bandit_id))
            i += n
        if tp in self.blocked:
            self.metrics.blocked.labels(self.blocked.pop(tp)).set(0)
        return True

    def _release(self, rt: BanditRuntime) -> None:
        before = rt.policy.model_version
        super()._release(rt)  # snapshot, then ledger: durable before anyone uses it
        if rt.policy.model_version != before:
            self._publish(rt)

    def _publish(self, rt: BanditRuntime) -> None:
        msg = model_message(rt.bandit_id, rt.policy)
        if msg is None:
            return
        self.transport.send(
            self.models_topic, rt.bandit_id.encode(), msg.model_dump_json().encode()
        )
        self.transport.flush()
        self.published.append(msg)
        log.info(
            "bandit %s: published model version %d",
            rt.bandit_id,
            msg.model_version,
            extra={"bandit": rt.bandit_id, "model_version": msg.model_version},
        )


# -- decision replicas ------------------------------------------------------------------------
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
        from kafka import KafkaConsumer, KafkaProducer

        from ..kafka.transport import JoinWatchdog, _common, producer_options

        check_broadcast(self.settings)
        s, b = self.settings, self.settings.broadcast
        k = s.kafka
        self.replica = b.replica_id or f"{socket.gethostname()}-{os.getpid()}"
        self.topics = k.topics
        self.bandits: dict[str, BanditRuntime] = {}
        for name, bs in s.bandits.items():
            overrides = {"bandit_id": name} if "bandit_id" in type(bs.policy).model_fields else {}
            with out_of_memory_is_a_start_error(f"bandit {name!r}"):
                policy = bs.policy.build(seed=bs.seed, **overrides)
                self.bandits[name] = BanditRuntime(name, bs, policy, None)
        self.pickups: list[tuple[str, int, float, float]] = []
        self.dead_count: collections.Counter = collections.Counter()
        self.decided = 0
        try:
            _ensure_topics(s)
            self.producer = KafkaProducer(**producer_options(k))
            self.models = ModelsReader(k, b.models_topic, self._bad_model).open()
            self._apply(self.models.catch_up())
            self.consumer = KafkaConsumer(
                **_common(k),
                group_id=k.group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_records=k.max_poll_records,
                session_timeout_ms=k.session_timeout_ms,
                heartbeat_interval_ms=k.heartbeat_ms(),
                group_instance_id=k.instance_id(single=False),
            )
        except Exception as err:  # e.g. kafka.errors.NoBrokersAvailable
            raise ServiceStartError(
                f"cannot open the transport: {type(err).__name__}: {err}"
            ) from None
        self._watchdog = JoinWatchdog(k.rejoin_stall_s)
        self.consumer.subscribe([k.topics.contexts], listener=self._listener())
        self.last_refresh = self.last_commit = time.monotonic()
        self.started = time.monotonic()
        self._stop = False

    def _listener(self):
        """On revocation: flush the decisions, commit the offsets of every polled context (all
        of them are decided when poll runs), so the next owner resumes exactly there."""
        import kafka.consumer.subscription_state as subs

        replica = self

        def assigned(parts) -> None:
            assigned = sorted(p.partition for p in parts)
            log.info("contexts partitions assigned: %s", assigned, extra={"partitions": assigned})

        if hasattr(subs, "AsyncConsumerRebalanceListener"):  # kafka-python >= 3

            class AsyncListener(subs.AsyncConsumerRebalanceListener):
                # listeners run on the consumer's IO loop, where the blocking commit() is
                # refused: await the coordinator's commit instead
                async def on_partitions_revoked(self, revoked):
                    replica.producer.flush()
                    c = replica.consumer
                    offsets = c._subscription.all_consumed_offsets()
                    try:
                        await c._coordinator._commit_offsets_sync_async(offsets)
                    except Exception as err:
                        log.warning("offset commit at revocation failed: %s", err)

                async def on_partitions_assigned(self, parts):
                    assigned(parts)

            return AsyncListener()

        class Listener(subs.ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                replica._commit()

            def on_partitions_assigned(self, parts):
                assigned(parts)

        return Listener()

    def request_stop(self, *_args) -> None:
        self._stop = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

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
                self._dead_raw(
                    self.settings.broadcast.models_topic,
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
                self._dead_raw(
                    self.settings.broadcast.models_topic, -1, -1, b"", "invalid_model", str(err)
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
        self._dead_raw(self.settings.broadcast.models_topic, partition, offset, raw, reason, detail)

    # -- the loop -----------------------------------------------------------------------------
    def run(self, progress=None) -> dict:
        """Decide until a stop is requested; returns the summary."""
        k = self.settings.kafka
        refresh = self.settings.broadcast.model_refresh_ms / 1000
        commit_every = self.settings.broadcast.commit_interval_s
        while not self._stop:
            if time.monotonic() - self.last_refresh >= refresh:
                self.refresh_models()
            batches = self.consumer.poll(
                timeout_ms=k.poll_timeout_ms, max_records=k.max_poll_records
            )
            if not batches and self._watchdog.stalled(self.consumer):
                # kafka-python's re-join stall (docs/operations.md): the broker has removed this
                # replica and moved its partitions; exit so that it is restarted (decision
                # replicas are stateless: models come from the models topic, offsets from Kafka)
                self.consumer.close(autocommit=False)
                raise ServiceStartError(
                    f"consumer group membership not stable for {k.rejoin_stall_s:g} s "
                    "(kafka-python re-join stall): exiting so that the replica is restarted"
                )
            received = time.perf_counter()
            for tp, msgs in batches.items():
                self._process(tp.topic, tp.partition, msgs, received)
            if time.monotonic() - self.last_commit >= commit_every:
                self._commit()
            if progress is not None:
                progress(self)
        return self.finish()

    def _process(self, topic: str, partition: int, msgs, received: float) -> None:
        run: list[Pending] = []
        rt_run = None
        for m in msgs:
            parsed = self._parse(topic, partition, m, received)
            if parsed is None:
                continue
            rt, pend = parsed
            if rt is not rt_run or len(run) >= min(self.settings.max_batch, REFRESH_CHUNK):
                self._decide(rt_run, run)
                run, rt_run = [], rt
            run.append(pend)
        self._decide(rt_run, run)

    def _parse(self, topic, partition, m, received):
        raw = m.value if m.value is not None else b""
        try:
            if len(raw) > self.settings.max_message_bytes:
                raise BadInput("oversized", f"{len(raw)} bytes > {self.settings.max_message_bytes}")
            try:
                ev = ContextEvent.model_validate_json(raw)
            except ValidationError as err:
                raise BadInput(_reason(err, "invalid_event"), _first_error(err)) from None
            rt = self.bandits.get(ev.bandit_id)
            if rt is None:
                raise BadInput("unknown_bandit", f"bandit {ev.bandit_id!r} is not configured")
            skew = self.settings.max_event_time_skew_s
            if skew is not None and ev.event_time > time.time() + skew:
                raise BadInput(  # (Service._too_late: it would stall the learner)
                    "event_time_out_of_range",
                    f"event_time is more than max_event_time_skew_s = {skew:g} s ahead of "
                    "the wall clock",
                )
            X, ids = rt.encode(ev)
        except BadInput as bad:
            self._dead_raw(topic, partition, m.offset, raw, bad.reason, bad.detail, m.key)
            return None
        except Exception as err:  # unforeseen: no input may stop the loop
            bad = unreadable(err)
            self._dead_raw(topic, partition, m.offset, raw, bad.reason, bad.detail, m.key)
            return None
        return rt, Pending(ev, X, ids, received)

    def _decide(self, rt: BanditRuntime | None, batch: list[Pending]) -> None:
        if not batch:
            return
        # a long poll batch (a backlog) must not delay a new model: check between chunks
        if time.monotonic() - self.last_refresh >= self.settings.broadcast.model_refresh_ms / 1000:
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
        done = time.perf_counter()
        for i, p in enumerate(batch):
            a = int(dec.arms[i])
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
            )
            self.producer.send(self.topics.decisions, key=key, value=out.model_dump_json().encode())
            self.metrics.decision_latency.labels(rt.bandit_id).observe(done - p.received)
        self.metrics.events.labels(rt.bandit_id, "decided").inc(B)
        self.decided += B

    def _commit(self) -> None:
        """Flush the decisions, then commit the offsets of the contexts they answer."""
        self.producer.flush()
        try:
            self.consumer.commit()
        except Exception as err:  # a rebalance in progress: the next commit covers it
            log.warning("offset commit failed: %s", err)
        self.last_commit = time.monotonic()

    def _dead_raw(self, topic, partition, offset, raw: bytes, reason, detail, key=None) -> None:
        dl = DeadLetter(
            source_topic=topic,
            partition=partition,
            offset=offset,
            reason=reason,
            detail=detail[:500],
            payload=raw[:DLQ_PAYLOAD_BYTES].decode("utf-8", errors="replace"),
            payload_bytes=len(raw),
            at=time.time(),
        )
        self.producer.send(self.topics.dead_letter, key=key, value=dl.model_dump_json().encode())
        bandit = dead_letter_bandit(self.settings.bandits, None, key)
        self.metrics.dead_letters.labels(bandit, topic, reason).inc()
        self.dead_count[reason] += 1

    # -- the end ------------------------------------------------------------------------------
    def finish(self) -> dict:
        self._commit()
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
            "dead_letters": dict(self.dead_count),
        }


def run_broadcast(settings: ServiceSettings, out=None) -> dict:
    """Run this process's role of a model broadcast until SIGTERM/SIGINT."""
    import json
    import sys

    from ..gc_tuning import service_gc
    from ..runner import print_summary, start_metrics_server

    out = sys.stdout if out is None else out
    check_broadcast(settings)
    metrics = ServiceMetrics()
    server, port = start_metrics_server(settings, metrics)
    if port:
        url = f"http://{settings.metrics.host}:{port}/metrics"
        log.info("metrics: %s", url, extra={"url": url})
    try:
        if settings.broadcast.role == "decider":
            replica = DecisionReplica(settings, metrics)
            replica.open()
            replica.install_signal_handlers()
            with service_gc():
                summary = replica.run()
            print(json.dumps(summary), file=out)
            return summary
        from ..kafka.transport import KafkaTransport

        try:
            _ensure_topics(settings)
        except Exception as err:
            raise ServiceStartError(f"cannot create topics: {type(err).__name__}: {err}") from None
        learner = Learner(settings, KafkaTransport(learner_kafka_settings(settings)), metrics)
        learner.open()
        learner.install_signal_handlers()
        with service_gc():
            summary = learner.run()
        summary["role"] = "learner"
        summary["state_directory"] = str(settings.snapshots.directory)
        print_summary(summary, out)
        return summary
    finally:
        if server is not None:
            server.shutdown()
