"""The feedback topic of a service: rewards, watermarks and LDP reports (DESIGN §2).

Validate → join by event id under event-time rules (``join.py``) → learn. Feedback never
blocks; anything unusable goes to the dead-letter topic. The stage is handed its
:class:`~.stage.StageContext` (bandits, dead letters, metrics, the stream state it changes:
offsets and paused partitions), the privacy=local bandits and the transport it pauses, never
the service.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import ValidationError

from .clock import record_clock
from .parsing import first_error, too_late, too_old, unreadable, validation_reason
from .schemas import Watermark, parse_feedback
from .stage import StageContext
from .transport import TP, Record, Transport

if TYPE_CHECKING:
    from .local.hook import LocalBandits

__all__ = ["EARLY_PAUSE", "FEEDBACK_OUTCOMES", "FeedbackStage"]

#: Held (early) feedback messages above which the feedback partitions pause (see
#: :meth:`FeedbackStage.pace`; ~0.5 KB each: ~28 MB); they resume at a tenth of it.
EARLY_PAUSE = 50_000

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


class FeedbackStage:
    """Reads a feedback partition's queue.

    Parameters
    ----------
    ctx
        The bandits, dead letters, metrics and stream state (offsets, paused partitions).
    local
        The privacy=local bandits (their LDP reports arrive on the feedback topic).
    transport
        Where the feedback partitions are paused and resumed (:meth:`pace`).
    topic
        The feedback topic's name.
    """

    def __init__(
        self, ctx: StageContext, local: LocalBandits, transport: Transport, topic: str
    ) -> None:
        self.ctx = ctx
        self.local = local
        self.transport = transport
        self.topic = topic
        self._dead: dict[str, functools.partial[None]] = {}

    def __call__(self, tp: TP, q: collections.deque) -> None:
        ctx = self.ctx
        # outcome counters per batch, as differences of the bandits' statistics
        before = {name: rt.stats.copy() for name, rt in ctx.bandits.items()}
        popleft, offsets = q.popleft, ctx.state.offsets
        local = self.local if self.local else None  # privacy=local bandits read LDP reports
        one = self.one
        while q:
            r, _ = q[0]
            if r.value is None:  # a tombstone
                ctx.dead(r, "malformed_json", "the message has no value")
                ctx.metrics.feedback.labels("unknown", "malformed_json").inc()
            elif local is not None and local.claims(r):  # an LDP report
                local.on_record(r, ctx.dead)
            else:
                one(r)
            popleft()  # (Service.pop without its context-cache lookup: feedback is not cached)
            offsets[tp] = r.offset + 1
        self.count(before)
        self.local.after_batch()

    def count(self, before: dict[str, collections.Counter]) -> None:
        for name, rt in self.ctx.bandits.items():
            old = before.get(name)
            if old is None or old == rt.stats:
                continue
            for key, outcome in FEEDBACK_OUTCOMES:
                diff = rt.stats.get(key, 0) - old.get(key, 0)
                if diff:
                    self.ctx.metrics.feedback.labels(name, outcome).inc(diff)

    def one(self, r: Record) -> None:
        ctx = self.ctx
        fb = ctx.metrics.feedback
        limit = ctx.settings.max_message_bytes
        if len(r.value) > limit:
            ctx.dead(r, "oversized", f"{len(r.value)} bytes > {limit}")
            fb.labels("unknown", "oversized").inc()
            return
        try:
            msg = parse_feedback(r.value)
        except ValidationError as err:
            reason = validation_reason(err, "invalid_feedback")
            ctx.dead(r, reason, first_error(err))
            fb.labels("unknown", reason).inc()
            return
        except Exception as err:  # unforeseen: no input may stop the loop
            bad = unreadable(err)
            ctx.dead(r, bad.reason, bad.detail)
            fb.labels("unknown", bad.reason).inc()
            return
        rt = ctx.bandits.get(msg.bandit_id)
        if rt is None and self.local.raw_for_local(msg.bandit_id, r, ctx.dead, msg):
            return  # a raw reward or heartbeat for a privacy=local bandit: never used
        if rt is None:
            bad = ctx.missing_bandit(msg.bandit_id)
            ctx.dead(r, bad.reason, bad.detail)
            fb.labels("unknown", bad.reason).inc()
            return
        # rewards and heartbeats alike: within the skew ahead of, and the lag behind, the
        # record's stream clock (a heartbeat from the future would expire every pending join)
        clock = record_clock(r, ctx.state.wall)
        latest = ctx.time_limit(r)
        when = (
            too_late(msg.event_time, latest, ctx.settings.max_event_time_skew_s)
            if msg.event_time > latest
            else too_old(msg.event_time, clock, ctx.settings.max_event_time_lag_s)
        )
        if when is not None:
            ctx.dead(r, when.reason, when.detail, bandit=rt.bandit_id)
            fb.labels(rt.bandit_id, when.reason).inc()
            return
        if clock is None:  # a record without a timestamp: its event time is its clock
            clock = msg.event_time
        if isinstance(msg, Watermark):  # its record moves the clock (its event time does not)
            rt.last_feedback_wall = time.monotonic()
            rt.advance_watermark(clock)
            fb.labels(rt.bandit_id, "watermark").inc()
            return
        rt.on_feedback(msg, (r.topic, r.partition, r.offset), self.dead_letter(rt.bandit_id), clock)

    def dead_letter(self, bandit_id: str) -> Callable[..., None]:
        """``dead(source, reason, detail)`` of a bandit's feedback (one per bandit)."""
        dead = self._dead.get(bandit_id)
        if dead is None:
            dead = self._dead[bandit_id] = functools.partial(
                self.ctx.dead_letters.source, bandit=bandit_id
            )
        return dead

    def pace(self) -> None:
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
        st, transport = self.ctx.state, self.transport
        held = sum(rt.join.early_count for rt in self.ctx.bandits.values())
        if st.feedback_paused:
            if held <= EARLY_PAUSE // 10 or st.blocked:
                for tp in st.feedback_paused:
                    transport.resume(tp)
                st.feedback_paused = set()
                self.ctx.metrics.feedback_paused.set(0)
        elif held > EARLY_PAUSE and not st.blocked:
            st.feedback_paused = {tp for tp in transport.assigned() if tp[0] == self.topic}
            for tp in st.feedback_paused:
                transport.pause(tp)
            self.ctx.metrics.feedback_paused.set(1)
