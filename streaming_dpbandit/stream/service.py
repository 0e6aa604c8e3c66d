"""The service loop: decide, join rewards, learn privately, survive crashes (DESIGN §2, §5).

Per poll: records go to per-partition queues and are processed in partition order.

* **contexts** — validate (schema, finite numbers, size, dimension, known bandit and arms, new
  event id; ``parsing.py``) → group consecutive events of one bandit → decide with the frozen
  private model → publish decisions. If the policy's next private release is due, it happens
  first — but only once every decision it reads has its reward resolved; until then the
  partition waits ("blocked"). The release is made durable *before* any decision uses it:
  producer flushed, snapshot written, ledger appended.
* **feedback** — validate → join by event id under event-time rules (``join.py``) → learn
  (``feedback.py``).
* anything unusable → the dead-letter topic with a reason (``dead_letters.py``); the service
  keeps going.

A snapshot (policies, joins, next offset of every input partition, releases not yet in the
ledger) is written on an interval, at every release and on SIGTERM/SIGINT; on start the service
loads it and resumes at those offsets. Decisions are a function of (state, event id), so events
re-processed after a crash get the same decisions (decisions are at-least-once and idempotent).

Every service shape is this loop with other collaborators, never a subclass: the state backend
(``state.py``: a state directory, or a group task's Kafka topics), the context parser
(``parsing.py``), what happens to a decided chunk and after a release (``hooks.py``), and how
a message naming a bandit this service lacks is dead-lettered. ``stream/scaling/`` composes
the group task and the broadcast learner from them; ``runner.py`` builds every shape.
"""

from __future__ import annotations

import collections
import itertools
import logging
import operator
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..metrics import ServiceMetrics
from ..privacy.accountant import load_pld
from ..settings import BanditSettings, ServiceSettings, TopicsSettings
from .bandit import BanditRuntime
from .clock import repair_snapshot_clocks
from .contexts import ContextStage
from .dead_letters import DeadLetters
from .errors import (
    ServiceStartError,
    input_overrun,
    out_of_memory_is_a_start_error,
    refuse_changed_policy,
)
from .feedback import FeedbackStage
from .hooks import (
    Decider,
    LocalFactory,
    PublishDecisions,
    ReleaseHook,
    RuntimeFactory,
    build_runtime,
)
from .local.hook import LocalBandits
from .parsing import BadInput, ContextParser, unknown_bandit
from .reporting import learned_state_bytes, service_summary
from .signals import StopSwitch
from .spend import SpendGauges
from .stage import StageContext, StreamState
from .state import DirectoryState, StateBackend, tp_key
from .transport import TP, Queue, Record, Transport

__all__ = ["Service", "ServiceStartError", "build_runtime", "learned_state_bytes"]

log = logging.getLogger("streaming_dpbandit.service")

QUEUE_PAUSE = 50_000
#: Gauges (spend, pending joins, lag, ...) are refreshed at most this often from the loop, and
#: at the end; Prometheus scrapes every few seconds.
METRICS_EXPORT_INTERVAL_S = 0.5


class Service:
    """One ``dpbandit serve`` process (or one shape of it).

    Parameters
    ----------
    settings
        Validated :class:`~streaming_dpbandit.settings.ServiceSettings`.
    transport
        Kafka or in-process.
    metrics
        Collectors (a fresh registry by default).
    topics
        The topics read and written (``settings.kafka.topics`` by default).
    state
        Where snapshots and the ledger go (the state directory by default).
    parser
        What the contexts topic carries (:class:`~.parsing.ContextParser`).
    runtime
        ``runtime(name, bandit_settings, policy, metrics)``: a bandit's runtime.
    decider
        What happens to a chunk of validated contexts (publish decisions by default).
    hooks
        Called with a bandit's runtime once its release is durable, and at start.
    missing_bandit
        ``missing_bandit(bandit_id) -> BadInput`` for a message naming a bandit this service
        lacks (``unknown_bandit`` by default).
    local
        ``local(settings, transport, topics, metrics)``: the privacy=local bandits.

    The stages get a :class:`~.stage.StageContext` and their collaborators, not the service.
    """

    def __init__(
        self,
        settings: ServiceSettings,
        transport: Transport,
        metrics: ServiceMetrics | None = None,
        *,
        topics: TopicsSettings | None = None,
        state: StateBackend | None = None,
        parser: ContextParser | None = None,
        runtime: RuntimeFactory = build_runtime,
        decider: Decider | None = None,
        hooks: Sequence[ReleaseHook] = (),
        missing_bandit: Callable[[str], BadInput] = unknown_bandit,
        local: LocalFactory = LocalBandits,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.metrics = metrics or ServiceMetrics()
        self.topics = topics or (settings.kafka.topics if settings.kafka else TopicsSettings())
        self.state = state or DirectoryState(settings.snapshots.directory, transport)
        self.parser = parser or ContextParser()
        self.runtime = runtime
        self.decider = decider or PublishDecisions(transport, self.topics.decisions, self.metrics)
        self.hooks = list(hooks)
        self.missing = missing_bandit
        self.local_factory = local
        self.spend = SpendGauges(self.metrics)
        self.stream = StreamState(wall=time.time())  # what the stages change

    offsets = property(lambda self: self.stream.offsets)  # the stream state's, read here too
    blocked = property(lambda self: self.stream.blocked)
    feedback_paused = property(lambda self: self.stream.feedback_paused)
    wall = property(lambda self: self.stream.wall, lambda self, w: setattr(self.stream, "wall", w))

    # -- set-up -----------------------------------------------------------------------------
    def build_bandits(self) -> None:
        """The runtimes of the configured bandits (and the privacy=local ones)."""
        self.bandits: dict[str, BanditRuntime] = {}
        self.dead_letters = DeadLetters(
            self.transport.send, self.topics.dead_letter, self.settings.bandits, self.metrics
        )
        # privacy=local bandits (devices privatise, the server only sees reports): stream/local/
        with out_of_memory_is_a_start_error("a privacy=local bandit"):
            self.local = self.local_factory(
                self.settings, self.transport, self.topics, self.metrics
            )
        for name, b in self.settings.bandits.items():
            if b.privacy == "local":
                continue
            overrides = {"bandit_id": name} if "bandit_id" in type(b.policy).model_fields else {}
            with out_of_memory_is_a_start_error(f"bandit {name!r}"):
                if b.user_level is not None:  # group-calibrated policy behind the bound
                    policy = b.user_level.build(b.policy, seed=b.seed, **overrides)
                else:
                    policy = b.policy.build(seed=b.seed, **overrides)
                self.bandits[name] = rt = self.runtime(name, b, policy, self.metrics)
                rt.on_refused = self.dead_letters.refused_rows  # unreachable: the join dedups
            dp_valid = (
                getattr(policy, "calibration", "certified") == "certified" or not policy.private
            )
            cal = getattr(policy, "calibration", "non-private")
            self.metrics.calibration.labels(name, policy.name, cal, str(dp_valid).lower()).set(1)
            if b.epsilon_budget is not None:
                self.metrics.eps_budget.labels(name).set(b.epsilon_budget)
        ctx = StageContext(
            self.settings, self.stream, self.bandits, self.dead_letters, self.metrics,
            self.missing_bandit,
        )  # fmt: skip
        self.contexts = ContextStage(ctx, self.parser, self.decider, self.release)
        self.feedback = FeedbackStage(ctx, self.local, self.transport, self.topics.feedback)

    fingerprint = staticmethod(BanditSettings.fingerprint)  # what a snapshot records

    def restore_state(self) -> tuple[dict[TP, int], dict[str, Any] | None]:
        """Build the bandits and load the state backend's snapshot into them; returns the
        input offsets to resume at, and the snapshot."""
        self.build_bandits()
        snap = self.state.load()
        self.ledger = self.state.ledger
        self.refit_failures = self.state.load_refit_failures()
        for name in self.bandits:  # 0 from the start, so a first failure is an increase
            self.metrics.refit_failures.labels(name).inc(self.refit_failures.get(name, 0))
        try:
            return self._restore(snap), snap
        except ServiceStartError:  # a refused snapshot leaves the ledger unlocked
            self.ledger.close()
            raise

    def open(self) -> None:
        """Load the snapshot (if any), open the ledger, start consuming at the stored offsets."""
        self.metrics.checkpoint_interval.set(self.settings.snapshots.interval_s)
        offsets, snap = self.restore_state()
        try:
            self.transport.open(offsets)
        except Exception as err:  # e.g. kafka.errors.NoBrokersAvailable
            self.ledger.close()
            raise ServiceStartError(
                f"cannot open the transport: {type(err).__name__}: {err}"
            ) from None
        self.local.open(self.ledger)  # ledger records not yet appended; publish current models
        self.started = self.last_snapshot = time.monotonic()
        if self.unsaved_keys(snap):
            # Persist every secret key (tie-break coins, noise) before the first message is
            # read: drawn from OS entropy when there is no seed, a key lost in a crash before
            # the first snapshot would re-decide, differently, events already published.
            self.snapshot("start")
        # computed at scrape time: the age keeps growing even if the loop hangs
        self.metrics.checkpoint_age.set_function(lambda: time.monotonic() - self.last_snapshot)
        # a release persisted before a crash may not have reached its consumers
        for rt in self.bandits.values():
            for hook in self.hooks:
                hook(rt)

    def unsaved_keys(self, snap: dict[str, Any] | None) -> bool:
        """True when a bandit's state (and its secret keys) is in no snapshot yet: a new state
        directory, or a bandit added to the configuration since the last snapshot."""
        if snap is None:
            return True
        saved = set(snap["bandits"]) | set(snap.get("local", {}))
        return bool(set(self.bandits) - saved or set(self.local.runtimes) - saved)

    def _restore(self, snap: dict[str, Any] | None) -> dict[TP, int]:
        """Load a snapshot's bandit states and offsets; ledger its unledgered releases; returns
        the input offsets to resume at."""
        offsets: dict[TP, int] = {}
        if snap is not None:
            try:
                self.local.load(snap, self.fingerprint)
            except RuntimeError as err:  # a local bandit's configuration changed, or vanished
                raise ServiceStartError(str(err)) from None
            for name, st in snap["bandits"].items():
                if name not in self.bandits:
                    raise ServiceStartError(
                        f"snapshot has bandit {name!r} that is not configured; "
                        "refusing to drop its state"
                    )
                refuse_changed_policy(name, self.settings.bandits[name], snap["fingerprints"][name])
                repair_snapshot_clocks(self.bandits[name].load_state_dict(st), self.settings)
            for k, v in snap["offsets"].items():
                topic, part = k.rsplit("|", 1)
                offsets[(topic, int(part))] = int(v)
            self.snapshot_seq = int(snap["seq"])
            log.info("restored snapshot %d (%d bandits)", self.snapshot_seq, len(snap["bandits"]))
        else:
            self.snapshot_seq = 0
        self.stream.reset(offsets)
        self.queues: dict[TP, Queue] = collections.defaultdict(collections.deque)
        self.paused: set[TP] = set()
        self.contexts.reset()
        self._last_export = 0.0
        self.stop = StopSwitch()
        for rt in self.bandits.values():  # releases made but not yet in the ledger
            self.ledger_append(rt)
        self.export_spend()
        return offsets

    @property
    def dead_count(self) -> collections.Counter[str]:
        """Dead letters by reason."""
        return self.dead_letters.count

    # -- the loop ---------------------------------------------------------------------------
    def request_stop(self, *_args: object) -> None:
        self.stop.request()

    def install_signal_handlers(self) -> None:
        self.stop.install()

    def run(self, progress: Callable[[Service], object] | None = None) -> dict[str, Any]:
        """Serve until the input is exhausted (finite sources) or a stop is requested."""
        load_pld()  # the spend gauges' accountant: its import would stall the first release
        kafka = self.settings.kafka
        timeout = (kafka.poll_timeout_ms / 1000) if kafka else 0.0
        max_records = kafka.max_poll_records if kafka else self.settings.max_batch
        while not self.stop.requested:
            records = self.transport.poll(max_records, timeout)
            now = time.perf_counter()
            # a poll holds runs of one partition's records: queued a run at a time
            for tp, run in itertools.groupby(records, operator.attrgetter("topic", "partition")):
                self.queues[tp].extend(zip(run, itertools.repeat(now)))
            self.process()
            if progress is not None:
                progress(self)
            if time.monotonic() - self.last_snapshot >= self.settings.snapshots.interval_s:
                self.snapshot("interval")
            if time.monotonic() - self._last_export >= METRICS_EXPORT_INTERVAL_S:
                self.export_metrics()
            if self.transport.exhausted and not any(self.queues.values()):
                self._check_overrun()
                break
            if not records and self.blocked:
                self.idle_check(ended=self.transport.exhausted)
        return self.finish()

    def _check_overrun(self) -> None:
        """A finite input that ended before the snapshot's offsets: not this state's input."""
        err = input_overrun(self.transport, self.settings.snapshots.directory)
        if err is not None:
            self.ledger.close()
            self.transport.close()
            raise err

    def process(self) -> None:
        """Process every queue as far as possible (contexts may block; feedback never does)."""
        self.stream.wall = time.time()  # the wall clock of the event-time bound, once per pass
        for _ in range(3):  # feedback can unblock contexts processed in the same round
            progressed = False
            for tp in list(self.queues):
                q = self.queues[tp]
                if not q:
                    continue
                before = len(q)
                if tp[0] == self.topics.contexts:
                    self.contexts(tp, q)
                elif tp[0] == self.topics.feedback:
                    self.feedback(tp, q)
                else:
                    while q:
                        self.dead(q[0][0], "unknown_topic", f"not an input topic: {tp[0]}")
                        self.pop(tp, q)
                progressed |= len(q) != before
            for rt in self.bandits.values():
                rt.flush_learning()
            if not progressed or not self.blocked:
                break
        for tp, q in self.queues.items():  # backpressure for blocked partitions
            if tp in self.blocked and len(q) > QUEUE_PAUSE and tp not in self.paused:
                self.transport.pause(tp)
                self.paused.add(tp)
            elif tp not in self.blocked and tp in self.paused:
                self.transport.resume(tp)
                self.paused.discard(tp)
        self.feedback.pace()

    def idle_check(self, ended: bool = False) -> None:
        """A blocked bandit whose feedback stopped: expire its joins after the idle timeout, at
        once when a finished input (``ended``) holds nothing but blocked records."""
        done = ended and all(not q or tp in self.blocked for tp, q in self.queues.items())
        self.contexts.expire_idle(done)

    # -- contexts ---------------------------------------------------------------------------
    def missing_bandit(self, bandit_id: str) -> BadInput:
        """The dead letter of a message naming a bandit that this service does not decide."""
        if bandit_id in self.local:
            return BadInput(
                "raw_data_for_local_bandit",
                f"bandit {bandit_id!r} is privacy=local: contexts stay on the devices",
            )
        return self.missing(bandit_id)

    def pop(self, tp: TP, q: Queue) -> Record:
        """Take the first record of a queue: processed, its offset is the partition's next."""
        r, _ = q.popleft()
        self.contexts.forget(r)
        self.offsets[tp] = r.offset + 1
        return r

    def dead(self, r: Record, reason: str, detail: str = "", bandit: str | None = None) -> None:
        """Dead-letter a polled record."""
        self.dead_letters.record(r, reason, detail, bandit)

    # -- releases, snapshots, ledger --------------------------------------------------------
    def release(self, rt: BanditRuntime) -> None:
        """Make a due release durable (snapshot, then ledger), then run the hooks."""
        before = rt.policy.model_version
        try:
            records = rt.refit()
        except Exception as err:
            # The policy may be half-updated: stop without a snapshot; a restart resumes from
            # the last one. Only the error's type is logged (messages could carry values).
            self.refit_failures[rt.bandit_id] = self.refit_failures.get(rt.bandit_id, 0) + 1
            self.metrics.refit_failures.labels(rt.bandit_id).inc()
            self.state.count_refit_failure(self.refit_failures)
            log.error(
                "bandit %s: model update failed (%s); stopping, a restart resumes from the "
                "last snapshot",
                rt.bandit_id,
                type(err).__name__,
                extra={"bandit": rt.bandit_id},
            )
            raise
        if not records:
            return
        self.snapshot("release")  # the release is durable before anything uses it
        self.ledger_append(rt)
        for rec in records:
            log.info(
                "bandit %s: release %s (%s, calibration %s, model version %s)",
                rt.bandit_id,
                rec.release_id,
                rec.mechanism,
                rec.calibration,
                rec.model_version,
                extra={
                    "bandit": rt.bandit_id,
                    "release_id": rec.release_id,
                    "model_version": rec.model_version,
                },
            )
        if rt.policy.model_version != before:
            for hook in self.hooks:
                hook(rt)

    def ledger_append(self, rt: BanditRuntime) -> None:
        """Append a bandit's releases not yet in the ledger (after the snapshot holding them)."""
        if not rt.unledgered:
            return
        for rec in rt.unledgered:
            self.ledger.append(rec)
        rt.unledgered = []
        self.export_spend()

    def snapshot(self, reason: str) -> None:
        for rt in self.bandits.values():
            rt.flush_learning()
        self.local.after_batch()
        self.transport.flush()  # decisions and dead letters before the offsets that imply them
        offsets = {tp_key(tp): off for tp, off in self.offsets.items()}
        # partitions with queued but unprocessed records resume at the first of them
        for tp, q in self.queues.items():
            if q:
                offsets[tp_key(tp)] = q[0][0].offset
        self.snapshot_seq += 1
        state = {
            "seq": self.snapshot_seq,
            "written_at": time.time(),
            "offsets": offsets,
            "bandits": {name: rt.state_dict() for name, rt in self.bandits.items()},
            "fingerprints": {
                name: self.fingerprint(self.settings.bandits[name]) for name in self.bandits
            },
        }
        mark = self.state.ledger_mark()
        if mark is not None:
            state["ledger"] = mark
        self.local.add_to_snapshot(state, self.fingerprint)
        size = self.state.save(state)
        self.state.after_save(self)
        self.last_snapshot = time.monotonic()
        self.metrics.checkpoints.labels(reason).inc()
        self.metrics.checkpoint_bytes.set(size)

    def export_spend(self) -> None:
        self.spend.export(self.ledger.records(), self.bandits)

    def export_metrics(self) -> None:
        """Refresh the gauges (and the consumer lag: one broker request, hence not per poll)."""
        self._last_export = time.monotonic()
        blocked = set(self.blocked.values())
        for name, rt in self.bandits.items():
            rt.export_metrics()
            self.metrics.blocked.labels(name).set(1 if name in blocked else 0)
        lag = self.transport.lag()
        for tp, q in self.queues.items():  # read but not processed (e.g. behind a release)
            if q:
                lag[tp] = lag.get(tp, 0) + len(q)
        for (topic, part), n in lag.items():
            self.metrics.lag.labels(topic, str(part)).set(n)
        self.local.export_metrics()

    # -- the end ----------------------------------------------------------------------------
    def finish(self) -> dict[str, Any]:
        """Final snapshot; for a finished finite input, expire what is still pending."""
        if self.transport.exhausted:
            for rt in self.bandits.values():
                rt.end_of_stream()
        self.snapshot("shutdown" if self.stop.requested else "end")
        self.export_metrics()
        summary = self.summary()
        self.state.close()
        self.transport.close()
        return summary

    def summary(self) -> dict[str, Any]:
        return service_summary(self)

    def state_bytes(self) -> bytes:
        """What the service learned — every policy's state and every join's outcome — encoded
        exactly. Two runs over the same input must agree on it byte for byte, whatever the
        batching, interleaving or crashes. (Diagnostics such as the reward window are excluded:
        they depend on arrival order by design.)"""
        central = learned_state_bytes({name: rt.state_dict() for name, rt in self.bandits.items()})
        return central + self.local.state_bytes() if self.local else central
