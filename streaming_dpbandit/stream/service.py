"""The service loop: decide, join rewards, learn privately, survive crashes (DESIGN §2, §5).

Per poll: records go to per-partition queues and are processed in partition order.

* **contexts** — validate (schema, finite numbers, size, dimension, known bandit and arms, new
  event id) → group consecutive events of one bandit → decide with the frozen private model →
  publish decisions. If the policy's next private release is due, it happens first — but only
  once every decision it reads has its reward resolved; until then the partition waits
  ("blocked"). The release is made durable *before* any decision uses it: producer flushed,
  snapshot written, ledger appended.
* **feedback** — validate → join by event id under event-time rules (``join.py``) → learn.
* anything unusable → the dead-letter topic with a reason; the service keeps going.

A snapshot (policies, joins, next offset of every input partition, releases not yet in the
ledger) is written on an interval, at every release and on SIGTERM/SIGINT; on start the service
loads it and resumes at those offsets. Decisions are a function of (state, event id), so events
re-processed after a crash get the same decisions (decisions are at-least-once and idempotent).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import os
import signal
import time
from pathlib import Path

from pydantic import ValidationError

from ..config import BanditSettings, ServiceSettings, TopicsSettings
from ..metrics import ServiceMetrics, observe_many
from ..privacy.accountant import Accountant, load_pld
from ..privacy.ledger import Ledger, LedgerCorruptError
from ..utils.serialization import dumps
from .bandit import BadInput, BanditRuntime, Pending, unreadable
from .join import EARLY_SOURCE_KEYS
from .local.hook import LocalBandits
from .schemas import ContextEvent, DeadLetter, Watermark, parse_feedback
from .slates.runtime import SlateBanditRuntime
from .snapshot import SnapshotCorruptError, SnapshotStore
from .transport import TP, Record, Transport

__all__ = ["Service", "ServiceStartError"]


#: Feedback outcomes (``dpbandit_feedback_total{outcome}``) by the bandit statistic counting
#: them; counted per batch of feedback messages.
FEEDBACK_OUTCOMES = (
    ("joined", "joined"),
    ("fb_early", "held_early"),
    ("fb_duplicate", "duplicate_feedback"),
    ("fb_after_expiry", "feedback_after_expiry"),
    ("fb_unknown", "unknown_event"),
    ("fb_before_decision", "feedback_before_decision"),
    ("fb_out_of_range", "reward_out_of_range"),
    ("fb_slate_unsupported", "slate_unsupported"),
    ("fb_slate_required", "slate_required"),
    ("fb_unknown_item", "unknown_item"),
    ("fb_not_in_slate", "item_not_in_slate"),
)


def dead_letter_bandit(bandits, bandit: str | None, key: bytes | None) -> str:
    """The ``bandit`` label of a dead letter: a configured bandit (named, or the Kafka key),
    else "" — never a name taken from a message (label values must stay bounded).

    >>> dead_letter_bandit({"shop": None}, None, b"shop"), dead_letter_bandit({}, "x", None)
    ('shop', '')
    """
    if bandit is None and key:
        try:
            bandit = key.decode("utf-8")
        except UnicodeDecodeError:
            bandit = None
    return bandit if bandit is not None and bandit in bandits else ""


class ServiceStartError(RuntimeError):
    """The service cannot start safely (changed configuration, damaged state, no broker)."""


log = logging.getLogger("streaming_dpbandit.service")

DLQ_PAYLOAD_BYTES = 2048
QUEUE_PAUSE = 50_000
#: Held (early) feedback messages above which the feedback partitions pause (see
#: ``Service._pace_feedback``; ~0.5 KB each: ~28 MB); they resume at a tenth of it.
EARLY_PAUSE = 50_000
#: Gauges (spend, pending joins, lag, ...) are refreshed at most this often from the loop, and
#: at the end; Prometheus scrapes every few seconds.
METRICS_EXPORT_INTERVAL_S = 0.5
#: Failed model updates per bandit, kept across restarts for ``dpbandit_refit_failures_total``.
REFIT_FAILURES_FILE = "refit-failures.json"


@contextlib.contextmanager
def out_of_memory_is_a_start_error(what: str):
    """Turn a failed allocation while building a bandit (e.g. ``d: 1000000000``) into a
    :class:`ServiceStartError`: one line naming the bandit and the size, not a traceback."""
    try:
        yield
    except MemoryError as err:  # numpy's ArrayMemoryError included
        raise ServiceStartError(
            f"{what}: its state does not fit in memory ({err}); lower its dimension d"
        ) from None


def _tp_key(tp: TP) -> str:
    return f"{tp[0]}|{tp[1]}"


def _reason(err: ValidationError, default: str) -> str:
    """Dead-letter reason of a validation error."""
    kind = err.errors()[0]["type"]
    if kind in ("json_invalid", "json_type"):
        return "malformed_json"
    if kind == "finite_number":
        return "non_finite_number"
    return default


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    return f"{loc}: {e['msg']}" if loc else e["msg"]


class Service:
    """One ``dpbandit serve`` process.

    Parameters
    ----------
    settings
        Validated :class:`~streaming_dpbandit.config.ServiceSettings`.
    transport
        Kafka or in-process.
    metrics
        Collectors (a fresh registry by default).
    """

    def __init__(self, settings: ServiceSettings, transport: Transport, metrics=None):
        self.settings = settings
        self.transport = transport
        self.metrics = metrics or ServiceMetrics()
        self.topics = settings.kafka.topics if settings.kafka else TopicsSettings()
        self._record_labels: dict[str, tuple[str, str, str]] = {}

    # -- set-up -----------------------------------------------------------------------------
    def _build_bandits(self) -> None:
        self.bandits: dict[str, BanditRuntime] = {}
        # privacy=local bandits (devices privatise, the server only sees reports): stream/local/
        with out_of_memory_is_a_start_error("a privacy=local bandit"):
            self.local = LocalBandits(self.settings, self.transport, self.topics, self.metrics)
        for name, b in self.settings.bandits.items():
            if b.privacy == "local":
                continue
            overrides = {"bandit_id": name} if "bandit_id" in type(b.policy).model_fields else {}
            with out_of_memory_is_a_start_error(f"bandit {name!r}"):
                policy = b.policy.build(seed=b.seed, **overrides)
                runtime = SlateBanditRuntime if getattr(policy, "slates", False) else BanditRuntime
                self.bandits[name] = runtime(name, b, policy, self.metrics)
            dp_valid = (
                getattr(policy, "calibration", "certified") == "certified" or not policy.private
            )
            self.metrics.calibration.labels(
                name,
                policy.name,
                getattr(policy, "calibration", "non-private"),
                str(dp_valid).lower(),
            ).set(1)
            if b.epsilon_budget is not None:
                self.metrics.eps_budget.labels(name).set(b.epsilon_budget)

    @staticmethod
    def _fingerprint(b: BanditSettings) -> str:
        return b.policy.model_dump_json()

    def open(self) -> None:
        """Load the snapshot (if any), open the ledger, start consuming at the stored offsets."""
        self._build_bandits()
        state_dir = Path(self.settings.snapshots.directory)
        self.store = SnapshotStore(state_dir)
        try:
            self.ledger = Ledger(state_dir / "ledger.jsonl").open()  # locks the directory
            stale = self.store.remove_stale_temps()
            if stale:
                log.warning("removed %d temporary snapshot file(s) left by a crash", stale)
            snap = self.store.load()
        except (LedgerCorruptError, SnapshotCorruptError, OSError) as err:
            raise ServiceStartError(f"state directory {state_dir}: {err}") from None
        except RuntimeError as err:  # the ledger is locked by another process
            raise ServiceStartError(str(err)) from None
        try:
            self._check_ledger(snap)
        except ServiceStartError:
            self.ledger.close()
            raise
        if self.ledger.repaired_bytes:
            log.warning(
                "ledger: repaired a torn final line (%d bytes of an unacknowledged release)",
                self.ledger.repaired_bytes,
            )
        self.refit_failures = self._load_refit_failures(state_dir)
        for name in self.bandits:  # 0 from the start, so a first failure is an increase
            self.metrics.refit_failures.labels(name).inc(self.refit_failures.get(name, 0))
        self.metrics.checkpoint_interval.set(self.settings.snapshots.interval_s)
        offsets = self._restore(snap)
        try:
            self.transport.open(offsets)
        except Exception as err:  # e.g. kafka.errors.NoBrokersAvailable
            self.ledger.close()
            raise ServiceStartError(
                f"cannot open the transport: {type(err).__name__}: {err}"
            ) from None
        self.local.open(self.ledger)  # ledger records not yet appended; publish current models
        self.last_snapshot = time.monotonic()
        if self._unsaved_keys(snap):
            # Persist every secret key (tie-break coins, noise) before the first message is
            # read: drawn from OS entropy when there is no seed, a key lost in a crash before
            # the first snapshot would re-decide, differently, events already published.
            self.snapshot("start")
        # computed at scrape time: the age keeps growing even if the loop hangs
        self.metrics.checkpoint_age.set_function(lambda: time.monotonic() - self.last_snapshot)
        self.started = time.monotonic()
        self._last_export = 0.0
        self._stop = False

    def _unsaved_keys(self, snap: dict | None) -> bool:
        """True when a bandit's state (and its secret keys) is in no snapshot yet: a new state
        directory, or a bandit added to the configuration since the last snapshot."""
        if snap is None:
            return True
        saved = set(snap["bandits"]) | set(snap.get("local", {}))
        return bool(set(self.bandits) - saved or set(self.local.runtimes) - saved)

    def _restore(self, snap: dict | None) -> dict[TP, int]:
        """Load a snapshot's bandit states and offsets; ledger its unledgered releases; returns
        the input offsets to resume at."""
        offsets: dict[TP, int] = {}
        if snap is not None:
            try:
                self.local.load(snap, self._fingerprint)
            except RuntimeError as err:  # a local bandit's configuration changed, or vanished
                raise ServiceStartError(str(err)) from None
            for name, st in snap["bandits"].items():
                if name not in self.bandits:
                    raise ServiceStartError(
                        f"snapshot has bandit {name!r} that is not configured; "
                        "refusing to drop its state"
                    )
                if snap["fingerprints"][name] != self._fingerprint(self.settings.bandits[name]):
                    raise ServiceStartError(
                        f"the policy configuration of bandit {name!r} changed since "
                        "the snapshot; restore the old configuration or start a new "
                        "state directory"
                    )
                self.bandits[name].load_state_dict(st)
            for k, v in snap["offsets"].items():
                topic, part = k.rsplit("|", 1)
                offsets[(topic, int(part))] = int(v)
            self.snapshot_seq = int(snap["seq"])
            log.info("restored snapshot %d (%d bandits)", self.snapshot_seq, len(snap["bandits"]))
        else:
            self.snapshot_seq = 0
        self.offsets: dict[TP, int] = dict(offsets)
        self.queues: dict[TP, collections.deque] = collections.defaultdict(collections.deque)
        self.blocked: dict[TP, str] = {}
        self.paused: set[TP] = set()
        self.feedback_paused: set[TP] = set()
        self._parsed: dict[int, object] = {}
        self.dead_count = collections.Counter()
        for rt in self.bandits.values():  # releases made but not yet in the ledger
            self._ledger_append(rt)
        self._export_spend()
        return offsets

    # -- the loop ---------------------------------------------------------------------------
    def request_stop(self, *_args) -> None:
        self._stop = True

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)

    def run(self, progress=None) -> dict:
        """Serve until the input is exhausted (finite sources) or a stop is requested."""
        load_pld()  # the spend gauges' accountant: its import would stall the first release
        timeout = (self.settings.kafka.poll_timeout_ms / 1000) if self.settings.kafka else 0.0
        max_records = (
            self.settings.kafka.max_poll_records if self.settings.kafka else self.settings.max_batch
        )
        while not self._stop:
            records = self.transport.poll(max_records, timeout)
            now = time.perf_counter()
            for r in records:
                self.queues[(r.topic, r.partition)].append((r, now))
            self.process()
            if progress is not None:
                progress(self)
            if time.monotonic() - self.last_snapshot >= self.settings.snapshots.interval_s:
                self.snapshot("interval")
            if time.monotonic() - self._last_export >= METRICS_EXPORT_INTERVAL_S:
                self._export_metrics()
            if self.transport.exhausted and not any(self.queues.values()):
                self._check_overrun()
                break
            if not records and self.blocked:
                self._idle_check()
        return self.finish()

    def _refresh_time_limit(self) -> None:
        """The latest event time accepted now: the wall clock plus the allowed skew."""
        skew = self.settings.max_event_time_skew_s
        self.time_limit = float("inf") if skew is None else time.time() + skew

    def _too_late(self, event_time: float) -> BadInput | None:
        """A BadInput for an event stamped beyond :attr:`time_limit`, else None.

        One event from the future would stall its bandit: its decision stays pending (and
        blocks the next release) until the feedback watermark reaches its time, and the
        contexts watermark it sets turns every later reward into ``unknown_event``.
        """
        if event_time <= self.time_limit:
            return None
        ahead = event_time - self.time_limit + self.settings.max_event_time_skew_s
        return BadInput(
            "event_time_out_of_range",
            f"event_time is {ahead:.6g} s ahead of the wall clock (max_event_time_skew_s = "
            f"{self.settings.max_event_time_skew_s:g})",
        )

    def _check_overrun(self) -> None:
        """A finite input that ended before the snapshot's offsets: not this state's input."""
        overrun = getattr(self.transport, "overrun", None)
        over = overrun() if overrun is not None else {}
        if not over:
            return
        where = ", ".join(f"{t}: offset {at} of {n}" for (t, _p), (at, n) in sorted(over.items()))
        self.ledger.close()
        self.transport.close()
        raise ServiceStartError(
            f"the input ends before the snapshot's offsets ({where}): the state directory "
            f"{self.settings.snapshots.directory} was written from a longer input; use this "
            "input's state directory, or a new one"
        )

    def process(self) -> None:
        """Process every queue as far as possible (contexts may block; feedback never does)."""
        self._refresh_time_limit()
        for _ in range(3):  # feedback can unblock contexts processed in the same round
            progressed = False
            for tp in list(self.queues):
                q = self.queues[tp]
                if not q:
                    continue
                before = len(q)
                if tp[0] == self.topics.contexts:
                    self._process_contexts(tp, q)
                elif tp[0] == self.topics.feedback:
                    self._process_feedback(tp, q)
                else:
                    while q:
                        self._dead(q[0][0], "unknown_topic", f"not an input topic: {tp[0]}")
                        self._pop(tp, q)
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
        self._pace_feedback()

    def _pace_feedback(self) -> None:
        """Stop reading feedback that runs far ahead of the contexts.

        Catching up on a backlog, the consumer fetches many small feedback messages per large
        context, so the feedback of contexts not read yet piles up as held ("early") feedback:
        memory, and work (held, then judged again when the context arrives). Above
        ``EARLY_PAUSE`` held messages the feedback partitions pause until nine tenths of them
        are taken. Never while a contexts partition is blocked (its release may wait for
        feedback behind the pause). The join is the same whatever the interleaving
        (docs/service.md), so pacing changes nothing that is learned.

        Each resume costs a fetch: kafka-python drops what it had fetched for the paused
        partition (``resume_partition``), up to a fetch's worth (1 MB, ~10,000 feedback
        messages), which is read and decoded again. Hence the wide gap between pausing and
        resuming: at half, about every second feedback message was decoded twice in a
        catch-up (measured 2026-11-27: 9 µs more per context).
        """
        held = sum(rt.join.early_count for rt in self.bandits.values())
        if self.feedback_paused:
            if held <= EARLY_PAUSE // 10 or self.blocked:
                for tp in self.feedback_paused:
                    self.transport.resume(tp)
                self.feedback_paused = set()
                self.metrics.feedback_paused.set(0)
        elif held > EARLY_PAUSE and not self.blocked:
            fb = self.topics.feedback
            self.feedback_paused = {tp for tp in self.transport.assigned() if tp[0] == fb}
            for tp in self.feedback_paused:
                self.transport.pause(tp)
            self.metrics.feedback_paused.set(1)

    def _idle_check(self) -> None:
        """A blocked bandit whose feedback stopped: expire its joins after the idle timeout."""
        for name in list(self.blocked.values()):
            rt = self.bandits[name]
            if time.monotonic() - rt.last_feedback_wall > self.settings.idle_timeout_s:
                n = rt.force_expire()
                self.metrics.forced_expiries.labels(name).inc(n)
                log.warning(
                    "bandit %s: no feedback for %.0f s while waiting for its next release; "
                    "expired %d pending joins (idle timeout)",
                    name,
                    self.settings.idle_timeout_s,
                    n,
                )
                rt.last_feedback_wall = time.monotonic()

    # -- contexts ---------------------------------------------------------------------------
    def _parse_context(self, r: Record, received: float):
        """(runtime, Pending) or a BadInput."""
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
                ev = ContextEvent.model_validate_json(r.value)
            except ValidationError as err:
                raise BadInput(_reason(err, "invalid_event"), _first_error(err)) from None
            rt = self.bandits.get(ev.bandit_id)
            if rt is None and ev.bandit_id in self.local:
                raise BadInput(
                    "raw_data_for_local_bandit",
                    f"bandit {ev.bandit_id!r} is privacy=local: contexts stay on the devices",
                )
            if rt is None:
                raise BadInput(*self._missing_bandit(ev.bandit_id))
            if ev.event_time > self.time_limit:
                raise self._too_late(ev.event_time)
            X, ids = rt.encode(ev)
            out = (rt, Pending(ev, X, ids, received))
        except BadInput as bad:
            # cached without its traceback and the validation error it replaced: their frames
            # hold this one, which holds it (and, through the callers' frames, their queued
            # events): a reference cycle per bad message that only the collector frees
            bad.__context__ = None
            out = bad.with_traceback(None)
        except Exception as err:  # unforeseen: no input may stop the loop
            out = unreadable(err)
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[id(r)] = out
        return out

    def _pop(self, tp: TP, q: collections.deque) -> Record:
        r, _ = q.popleft()
        self._parsed.pop(id(r), None)
        self.offsets[tp] = r.offset + 1
        return r

    def _pop_many(self, tp: TP, q: collections.deque, n: int) -> None:
        """:meth:`_pop` ``n`` times (a decided chunk)."""
        popleft, forget = q.popleft, self._parsed.pop
        r = None
        for _i in range(n):
            r, _received = popleft()
            forget(id(r), None)
        if r is not None:
            self.offsets[tp] = r.offset + 1

    def _process_contexts(self, tp: TP, q: collections.deque) -> None:
        cap = self.settings.max_batch
        while q:
            r, received = q[0]
            parsed = self._parse_context(r, received)
            if isinstance(parsed, BadInput):
                self._dead(r, parsed.reason, parsed.detail)
                self._count_event(r, parsed.reason)
                self._pop(tp, q)
                continue
            rt, pend = parsed
            try:
                rt.check_new(pend.event)
            except BadInput as bad:
                self._dead(r, bad.reason, bad.detail, bandit=rt.bandit_id)
                self.metrics.events.labels(rt.bandit_id, bad.reason).inc()
                self._pop(tp, q)
                continue
            if not self._release_gate(rt):
                # blocked before deciding anything: the queued contexts behind this one are
                # not read (a blocked bandit polled 20 records at a time re-read up to
                # max_batch queued contexts per poll, issue 19)
                self._block(tp, rt)
                return
            run = [pend]
            seen = {pend.event.event_id}
            js = rt.join
            j = 1
            # up to the next release: contexts past it would be read now and again after it
            limit = min(cap, rt.policy.max_decide_batch())
            while j < len(q) and len(run) < limit:
                r2, rec2 = q[j]
                nxt = self._parse_context(r2, rec2)
                if isinstance(nxt, BadInput) or nxt[0] is not rt:
                    break
                eid = nxt[1].event.event_id
                if eid in seen:
                    break
                # a duplicate context ends the run (status() only for ids the join knows)
                if (eid in js.pending or eid in js.resolved) and js.status(
                    eid, by="context"
                ) is not None:
                    break
                run.append(nxt[1])
                seen.add(eid)
                j += 1
            if not self._decide_run(tp, q, rt, run):
                self._block(tp, rt)
                return
        if tp in self.blocked:
            self.metrics.blocked.labels(self.blocked.pop(tp)).set(0)

    def _release_gate(self, rt: BanditRuntime) -> bool:
        """Make the bandit's due release, if any: False while it waits for rewards (the
        release reads decisions not resolved yet), True once the bandit may decide."""
        if rt.policy.refit_due():
            rt.flush_learning()
            if not rt.refit_ready():
                return False
            self._release(rt)
        return True

    def _block(self, tp: TP, rt: BanditRuntime) -> None:
        self.blocked[tp] = rt.bandit_id
        self.metrics.blocked.labels(rt.bandit_id).set(1)

    def _decide_run(
        self, tp: TP, q: collections.deque, rt: BanditRuntime, run: list[Pending]
    ) -> bool:
        i = 0
        pol = rt.policy
        while i < len(run):
            if not self._release_gate(rt):
                return False
            n = min(pol.max_decide_batch(), len(run) - i)
            chunk = run[i : i + n]
            messages = rt.decide_messages(chunk)
            now = time.perf_counter()
            self.transport.send_many(self.topics.decisions, rt.bandit_id.encode(), messages)
            self._pop_many(tp, q, len(messages))
            observe_many(
                self.metrics.decision_latency.labels(rt.bandit_id),
                [now - p.received for p in chunk],
            )
            self.metrics.events.labels(rt.bandit_id, "decided").inc(n)
            rt.after_decisions(chunk, functools.partial(self._dead_source, bandit=rt.bandit_id))
            i += n
        if tp in self.blocked:
            self.metrics.blocked.labels(self.blocked.pop(tp)).set(0)
        return True

    def _missing_bandit(self, bandit_id: str) -> tuple[str, str]:
        """Dead-letter (reason, detail) for a message naming a bandit this service lacks."""
        return "unknown_bandit", f"bandit {bandit_id!r} is not configured"

    def _count_event(self, r: Record, reason: str) -> None:
        bandit = "unknown"
        if reason not in ("malformed_json", "invalid_event", "oversized") and r.key:
            bandit = r.key.decode(errors="replace")[:64]
        if bandit not in self.bandits:
            bandit = "unknown"
        self.metrics.events.labels(bandit, reason).inc()

    # -- feedback ---------------------------------------------------------------------------
    def _process_feedback(self, tp: TP, q: collections.deque) -> None:
        # outcome counters per batch, as differences of the bandits' statistics
        before = {name: rt.stats.copy() for name, rt in self.bandits.items()}
        while q:
            r, _ = q[0]
            if r.value is None:  # a tombstone
                self._dead(r, "malformed_json", "the message has no value")
                self.metrics.feedback.labels("unknown", "malformed_json").inc()
            elif self.local.claims(r):  # an LDP report (privacy=local bandits)
                self.local.on_record(r, self._dead)
            else:
                self._feedback_one(r)
            self._pop(tp, q)
        self._count_feedback(before)
        self.local.after_batch()

    def _count_feedback(self, before: dict[str, collections.Counter]) -> None:
        for name, rt in self.bandits.items():
            old = before.get(name)
            if old is None or old == rt.stats:
                continue
            for key, outcome in FEEDBACK_OUTCOMES:
                diff = rt.stats.get(key, 0) - old.get(key, 0)
                if diff:
                    self.metrics.feedback.labels(name, outcome).inc(diff)

    def _feedback_one(self, r: Record) -> None:
        if len(r.value) > self.settings.max_message_bytes:
            self._dead(r, "oversized", f"{len(r.value)} bytes > {self.settings.max_message_bytes}")
            self.metrics.feedback.labels("unknown", "oversized").inc()
            return
        try:
            msg = parse_feedback(r.value)
        except ValidationError as err:
            reason = _reason(err, "invalid_feedback")
            self._dead(r, reason, _first_error(err))
            self.metrics.feedback.labels("unknown", reason).inc()
            return
        except Exception as err:  # unforeseen: no input may stop the loop
            bad = unreadable(err)
            self._dead(r, bad.reason, bad.detail)
            self.metrics.feedback.labels("unknown", bad.reason).inc()
            return
        rt = self.bandits.get(msg.bandit_id)
        if rt is None and self.local.raw_for_local(msg.bandit_id, r, self._dead, msg):
            return  # a raw reward or heartbeat for a privacy=local bandit: never used
        if rt is None:
            reason, detail = self._missing_bandit(msg.bandit_id)
            self._dead(r, reason, detail)
            self.metrics.feedback.labels("unknown", reason).inc()
            return
        if isinstance(msg, Watermark):  # (not bounded: an end-of-stream heartbeat may be
            rt.last_feedback_wall = time.monotonic()  # far ahead on purpose)
            rt.advance_watermark(msg.event_time)
            self.metrics.feedback.labels(rt.bandit_id, "watermark").inc()
            return
        if msg.event_time > self.time_limit:
            bad = self._too_late(msg.event_time)
            self._dead(r, bad.reason, bad.detail, bandit=rt.bandit_id)
            self.metrics.feedback.labels(rt.bandit_id, bad.reason).inc()
            return
        rt.on_feedback(
            msg,
            (r.topic, r.partition, r.offset),
            functools.partial(self._dead_source, bandit=rt.bandit_id),
        )

    # -- dead letters -----------------------------------------------------------------------
    def _dead(self, r: Record, reason: str, detail: str = "", bandit: str | None = None) -> None:
        value = r.value if r.value is not None else b""  # (a tombstone has none)
        payload = value[:DLQ_PAYLOAD_BYTES].decode("utf-8", errors="replace")
        if reason == "raw_data_for_local_bandit":
            payload = ""  # raw contexts/rewards of a privacy=local bandit are not copied
        dl = DeadLetter(
            source_topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            reason=reason,
            detail=detail[:500],
            payload=payload,
            payload_bytes=len(value),
            at=time.time(),
        )
        self.transport.send(self.topics.dead_letter, r.key, dl.model_dump_json().encode())
        self.metrics.dead_letters.labels(self._dl_bandit(bandit, r.key), r.topic, reason).inc()
        self.dead_count[reason] += 1

    def _dl_bandit(self, bandit: str | None, key: bytes | None) -> str:
        return dead_letter_bandit(self.settings.bandits, bandit, key)

    def _dead_source(
        self, source: tuple[str, int, int], reason: str, detail: str, bandit: str | None = None
    ) -> None:
        """Dead-letter a message known by (topic, partition, offset), e.g. held feedback."""
        topic, part, off = source
        dl = DeadLetter(
            source_topic=topic,
            partition=part,
            offset=off,
            reason=reason,
            detail=detail[:500],
            payload="",
            payload_bytes=0,
            at=time.time(),
        )
        self.transport.send(self.topics.dead_letter, None, dl.model_dump_json().encode())
        self.metrics.dead_letters.labels(self._dl_bandit(bandit, None), topic, reason).inc()
        self.dead_count[reason] += 1

    # -- releases, snapshots, ledger --------------------------------------------------------
    def _release(self, rt: BanditRuntime) -> None:
        try:
            records = rt.refit()
        except Exception as err:
            # The policy may be half-updated: stop without a snapshot; a restart resumes from
            # the last one. Only the error's type is logged (messages could carry values).
            self._count_refit_failure(rt.bandit_id)
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
        self._ledger_append(rt)
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

    @staticmethod
    def _load_refit_failures(state_dir: Path) -> dict[str, int]:
        path = state_dir / REFIT_FAILURES_FILE
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            return {str(k): int(v) for k, v in data.items() if int(v) >= 0}
        except (OSError, ValueError, TypeError, AttributeError) as err:
            log.warning("ignoring unreadable %s (%s)", path, type(err).__name__)
            return {}

    def _count_refit_failure(self, bandit: str) -> None:
        self.refit_failures[bandit] = self.refit_failures.get(bandit, 0) + 1
        self.metrics.refit_failures.labels(bandit).inc()
        state_dir = Path(self.settings.snapshots.directory)
        path = state_dir / REFIT_FAILURES_FILE
        tmp = path.with_suffix(".tmp")
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(self.refit_failures, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as err:  # monitoring only: never mask the refit error
            log.warning("could not record the refit failure in %s (%s)", path, err)

    def _ledger_append(self, rt: BanditRuntime) -> None:
        if not rt.unledgered:
            return
        for rec in rt.unledgered:
            self.ledger.append(rec)
        rt.unledgered = []
        self._export_spend()

    def snapshot(self, reason: str) -> None:
        for rt in self.bandits.values():
            rt.flush_learning()
        self.local.after_batch()
        self.transport.flush()  # decisions and dead letters before the offsets that imply them
        offsets = {_tp_key(tp): off for tp, off in self.offsets.items()}
        # partitions with queued but unprocessed records resume at the first of them
        for tp, q in self.queues.items():
            if q:
                offsets[_tp_key(tp)] = q[0][0].offset
        self.snapshot_seq += 1
        state = {
            "seq": self.snapshot_seq,
            "written_at": time.time(),
            "offsets": offsets,
            "bandits": {name: rt.state_dict() for name, rt in self.bandits.items()},
            "fingerprints": {
                name: self._fingerprint(self.settings.bandits[name]) for name in self.bandits
            },
        }
        mark = self._ledger_mark()
        if mark is not None:
            state["ledger"] = mark
        self.local.add_to_snapshot(state, self._fingerprint)
        size = self._save_state(state)
        self.last_snapshot = time.monotonic()
        self.metrics.checkpoints.labels(reason).inc()
        self.metrics.checkpoint_bytes.set(size)

    def _ledger_mark(self) -> dict | None:
        """Where the ledger stood when a snapshot was written: its length, its last release id
        and its hash chain's value (checked at start by :meth:`_check_ledger`)."""
        chain_hash = getattr(self.ledger, "chain_hash", None)
        if chain_hash is None:  # (a group task's ledger lives in a Kafka topic)
            return None
        records = self.ledger.records()
        return {
            "releases": len(records),
            "last_release": records[-1].release_id if records else None,
            "chain_hash": chain_hash(),
        }

    def _check_ledger(self, snap: dict | None) -> None:
        """Refuse to start when the ledger lacks releases the snapshot was written after (a
        deleted, truncated or swapped ledger): the spend would be under-reported."""
        mark = None if snap is None else snap.get("ledger")
        if mark is None:  # a new state directory, or a snapshot from before the mark
            return
        n, path = int(mark["releases"]), self.ledger.path
        have = len(self.ledger)
        if have < n:
            raise ServiceStartError(
                f"ledger {path} holds {have} releases but the snapshot was written after {n} "
                f"(the last {mark['last_release']!r}): the ledger is missing or truncated; "
                "restore it from a backup — refusing to serve with an incomplete privacy ledger"
            )
        if self.ledger.chain_hash(n) != mark["chain_hash"]:
            raise ServiceStartError(
                f"ledger {path} does not match the snapshot: its first {n} releases differ "
                f"from those the snapshot was written after (the last {mark['last_release']!r}); "
                "was it replaced by another state directory's ledger? Refusing to serve"
            )

    def _save_state(self, state: dict) -> int:
        """Write a snapshot durably (the local directory); returns its size in bytes."""
        size = self.store.save(state)
        commit = getattr(self.transport, "commit", None)
        if commit is not None:  # for monitoring tools; the snapshot is authoritative
            commit({tp: off for tp, off in self.offsets.items()})
        return size

    def _export_spend(self) -> None:
        records = self.ledger.records()
        acc = Accountant(records)
        for name, rt in self.bandits.items():
            recs = [r for r in records if r.bandit_id == name]
            self.metrics.ledger_releases.labels(name).set(len(recs))
            if not recs:
                continue
            delta = getattr(rt.policy, "delta", None)
            sp = acc.spend(name, delta=delta if delta else None)
            calib = ",".join(sp.calibrations)
            for cand in sp.candidates():  # pure, pld, zcdp (at the policy's δ), basic
                self.metrics.eps_spent.labels(name, calib, cand["accountant"]).set(cand["epsilon"])
            rec = sp.of_record()
            labels = (name, calib, rec["accountant"])
            old = self._record_labels.get(name)
            if old is not None and old != labels:  # the accountant of record changed
                self.metrics.eps_of_record.remove(*old)
                self.metrics.delta_of_record.remove(*old)
            self._record_labels[name] = labels
            self.metrics.eps_of_record.labels(*labels).set(rec["epsilon"])
            self.metrics.delta_of_record.labels(*labels).set(rec["delta"])
            self.metrics.delta_spent.labels(name, calib).set(sp.basic_delta)
            if sp.rho is not None:
                self.metrics.rho_spent.labels(name).set(sp.rho)

    def _export_metrics(self) -> None:
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
    def finish(self) -> dict:
        """Final snapshot; for a finished finite input, expire what is still pending."""
        if self.transport.exhausted:
            for rt in self.bandits.values():
                rt.end_of_stream()
        self.snapshot("shutdown" if self._stop else "end")
        self._export_metrics()
        summary = self.summary()
        self.ledger.close()
        self.transport.close()
        return summary

    def summary(self) -> dict:
        elapsed = time.monotonic() - self.started
        out = {"elapsed_s": elapsed, "bandits": {}, "dead_letters": dict(self.dead_count)}
        acc = Accountant(self.ledger.records())
        for name, rt in self.bandits.items():
            delta = getattr(rt.policy, "delta", None)
            sp = acc.spend(name, delta=delta) if acc.records else None
            out["bandits"][name] = {
                "policy": rt.policy.name,
                "rounds": rt.policy.t,
                "model_version": rt.policy.model_version,
                "stats": dict(rt.stats),
                "mean_reward_window": (sum(rt.window) / len(rt.window)) if rt.window else None,
                "privacy": None if sp is None else sp.to_dict(),
            }
        if self.local:
            out["local_bandits"] = self.local.summary()
        decided = sum(rt.stats["decided"] for rt in self.bandits.values())
        out["decisions"] = decided
        out["events_per_s"] = decided / elapsed if elapsed > 0 else 0.0
        return out

    def state_bytes(self) -> bytes:
        """What the service learned — every policy's state and every join's outcome — encoded
        exactly. Two runs over the same input must agree on it byte for byte, whatever the
        batching, interleaving or crashes. (Diagnostics such as the reward window are excluded:
        they depend on arrival order by design.)"""
        central = learned_state_bytes({name: rt.state_dict() for name, rt in self.bandits.items()})
        return central + self.local.state_bytes() if self.local else central


def learned_state_bytes(bandit_states: dict) -> bytes:
    """Exact encoding of what bandits learned (policies, join outcomes, unledgered releases),
    from runtime state dicts — e.g. the ``bandits`` section of a snapshot."""
    out = {}
    for name, st in bandit_states.items():
        # where held feedback came from (topic, partition, offset) is routing, not learning
        join = {k: v for k, v in st["join"].items() if k not in EARLY_SOURCE_KEYS}
        if "early" in join:  # a snapshot from before the columns
            join["early"] = [e[:3] + e[4:] for e in join["early"]]
        out[name] = {
            "policy": st["policy"],
            "join": join,
            "unledgered": st["unledgered"],
            "held_rows": st.get("held_rows"),
        }
    return dumps(out)
