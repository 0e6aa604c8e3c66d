"""The contexts topic of a service: validate, group, decide (DESIGN §2).

Consecutive events of one bandit form a run, up to the next release; a due release is made
first, once every decision it reads has its reward (until then the partition is blocked). What
a decided chunk becomes is the service's :class:`~.hooks.Decider`. The stage is handed its
:class:`~.stage.StageContext` (bandits, dead letters, metrics, the stream state it changes:
offsets and blocked partitions), the parser, the decider and the release step, never the
service.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .bandit import BanditRuntime
from .clock import record_clock
from .parsing import BadInput, ContextParser, parse_context
from .stage import StageContext
from .stalls import BlockedWatch
from .transport import TP, Record

if TYPE_CHECKING:
    from .hooks import Decider

__all__ = ["ContextStage"]

log = logging.getLogger("streaming_dpbandit.service")  # (the service's log: one story)


class ContextStage:
    """Reads a contexts partition's queue; caches each record's parse until the record leaves
    its queue (a blocked run is read again).

    Parameters
    ----------
    ctx
        The bandits, dead letters, metrics and stream state (offsets, blocked partitions).
    parser
        What the contexts topic carries.
    decider
        What a decided chunk becomes.
    release
        ``release(runtime)``: make the bandit's due release durable (the service's).
    """

    def __init__(
        self,
        ctx: StageContext,
        parser: ContextParser,
        decider: Decider,
        release: Callable[[BanditRuntime], None],
    ) -> None:
        self.ctx = ctx
        self.parser = parser
        self.decider = decider
        self.release = release
        st = ctx.settings
        self.watch = BlockedWatch(st.blocked_warning_s, st.idle_timeout_s)
        self.reset()

    def reset(self) -> None:
        self._parsed: dict[int, object] = {}

    def forget(self, r: Record) -> None:
        self._parsed.pop(id(r), None)

    def parse(self, r: Record, received: float):
        """(runtime, Pending) or a BadInput, cached until the record leaves its queue."""
        cached = self._parsed.get(id(r))
        if cached is not None:
            return cached
        p, ctx, st = self.parser, self.ctx, self.ctx.settings
        out = parse_context(
            r.value,
            received,
            ctx.bandits,
            max_bytes=st.max_message_bytes,
            time_limit=ctx.time_limit(r),
            skew=st.max_event_time_skew_s,
            clock=record_clock(r, ctx.state.wall),
            lag=st.max_event_time_lag_s,
            schema=p.schema,
            invalid=p.invalid,
            rows=p.rows,
            missing=ctx.missing_bandit,
        )
        if len(self._parsed) > 100_000:
            self._parsed.clear()
        self._parsed[id(r)] = out
        return out

    def pop_many(self, tp: TP, q: collections.deque, n: int) -> None:
        """Take the first ``n`` records of a queue (a decided chunk), in one step."""
        popleft, forget = q.popleft, self._parsed.pop
        r = None
        for _i in range(n):
            r, _received = popleft()
            forget(id(r), None)
        if r is not None:
            self.ctx.state.offsets[tp] = r.offset + 1

    def __call__(self, tp: TP, q: collections.deque) -> None:
        ctx = self.ctx
        cap = ctx.settings.max_batch
        while q:
            r, received = q[0]
            parsed = self.parse(r, received)
            if isinstance(parsed, BadInput):
                ctx.dead(r, parsed.reason, parsed.detail)
                self.count_event(r, parsed.reason)
                self.pop_many(tp, q, 1)
                continue
            rt, pend = parsed
            try:
                rt.check_new(pend.event)
            except BadInput as bad:
                ctx.dead(r, bad.reason, bad.detail, bandit=rt.bandit_id)
                ctx.metrics.events.labels(rt.bandit_id, bad.reason).inc()
                self.pop_many(tp, q, 1)
                continue
            if not self.release_gate(rt):
                # blocked before deciding anything: the queued contexts behind this one are
                # not read (a blocked bandit polled 20 records at a time re-read up to
                # max_batch queued contexts per poll, issue 19)
                self.block(tp, rt, len(q))
                return
            run = [pend]
            seen = {pend.event.event_id}
            js = rt.join
            j = 1
            # up to the next release: contexts past it would be read now and again after it
            limit = min(cap, rt.policy.max_decide_batch())
            while j < len(q) and len(run) < limit:
                r2, rec2 = q[j]
                nxt = self.parse(r2, rec2)
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
            if not self.decide_run(tp, q, rt, run):
                self.block(tp, rt, len(q))
                return
        self.unblock(tp)

    def release_gate(self, rt: BanditRuntime) -> bool:
        """Make the bandit's due release, if any: False while it waits for rewards (the
        release reads decisions not resolved yet) or for room in its join (``max_pending``
        decisions pending: they expire on the feedback clock, never early, so that which
        rewards join depends on nothing but the feedback partition), True once the bandit may
        decide."""
        if rt.policy.refit_due():
            rt.flush_learning()
            if not rt.refit_ready():
                return False
            self.release(rt)
        if rt.room() > 0:
            return True
        rt.stats["join_full"] += 1  # the feedback clock frees room (or the idle timeout)
        return False

    def block(self, tp: TP, rt: BanditRuntime, queued: int) -> None:
        blocked = self.ctx.state.blocked
        if tp not in blocked:  # the idle timeout counts while blocked, from now
            rt.last_feedback_wall = max(rt.last_feedback_wall, time.monotonic())
        blocked[tp] = rt.bandit_id
        self.ctx.metrics.blocked.labels(rt.bandit_id).set(1)
        self.watch.blocked(rt, queued)  # a warning once blocked for blocked_warning_s

    def unblock(self, tp: TP) -> None:
        blocked = self.ctx.state.blocked
        if tp in blocked:
            name = blocked.pop(tp)
            self.ctx.metrics.blocked.labels(name).set(0)
            self.watch.decided(name)

    def decide_run(self, tp: TP, q: collections.deque, rt: BanditRuntime, run: list) -> bool:
        i = 0
        pol = rt.policy
        decide, outcome, ctx = self.decider, self.decider.outcome, self.ctx
        while i < len(run):
            if not self.release_gate(rt):
                return False
            n = min(pol.max_decide_batch(), len(run) - i, rt.room())
            chunk = run[i : i + n]
            decide(rt, chunk)
            self.pop_many(tp, q, n)
            ctx.metrics.events.labels(rt.bandit_id, outcome).inc(n)
            rt.after_decisions(
                chunk, functools.partial(ctx.dead_letters.source, bandit=rt.bandit_id)
            )
            i += n
        self.unblock(tp)
        return True

    def expire_idle(self, done: bool) -> None:
        """Expire the joins of a blocked bandit whose feedback stopped (the idle timeout; at
        once when ``done``: a finished input holds nothing but blocked records)."""
        ctx = self.ctx
        timeout = 0.0 if done else ctx.settings.idle_timeout_s
        for name in list(ctx.state.blocked.values()):
            rt = ctx.bandits[name]
            if time.monotonic() - rt.last_feedback_wall >= timeout:
                n = rt.force_expire()
                ctx.metrics.forced_expiries.labels(name).inc(n)
                idle = f"no feedback for {timeout:.0f} s (idle timeout)"
                log.warning(
                    "bandit %s: %s while blocked (release, or a full join); expired %d pending "
                    "joins", name, "the input ended" if done else idle, n,
                )  # fmt: skip
                rt.last_feedback_wall = time.monotonic()

    def count_event(self, r: Record, reason: str) -> None:
        bandit = "unknown"
        if reason not in ("malformed_json", "invalid_event", "oversized") and r.key:
            bandit = r.key.decode(errors="replace")[:64]
        if bandit not in self.ctx.bandits:
            bandit = "unknown"
        self.ctx.metrics.events.labels(bandit, reason).inc()
