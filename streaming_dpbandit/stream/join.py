"""The reward join: decisions waiting for feedback, matched by event id under event-time rules.

Deterministic by construction (docs/service.md, "Why the join is deterministic"): whether a
reward is used depends only on the decision itself and on the order of the *feedback* partition,
never on how the contexts and feedback topics happen to interleave. That is what makes a run
with crashes end in exactly the state of a run without them.

Two clocks drive it, both read from the records, never from a producer's event time
(docs/service.md, "The stream clock"): the *feedback clock* (``feedback_watermark``) — the
largest stream-clock reading (record timestamp, or the wall clock where earlier) of the bandit's
feedback records — and the *contexts clock* (``context_watermark``), the same for its decided
contexts. A record without a timestamp (a ``--file`` line without one) reads as its own event
time.

* A decision made at event time τ accepts the first feedback with τ ≤ time ≤ τ + window.
* It expires (default reward or drop) once the feedback clock passes τ + window.
* Feedback for an event that has not been decided yet is held (``early``) together with the
  feedback clock before it. When the context arrives, the held feedback is judged as if the
  decision had been made first: if the clock had already passed the decision's window, the
  decision had expired by then. Held feedback is declared an orphan once the contexts clock
  passes its event time (a context always precedes its feedback).
* Resolved event ids are remembered for ``retention`` seconds of the clocks to recognise
  duplicate contexts and duplicate feedback.

Memory is bounded: the pending store holds at most ``capacity`` decisions (a service's contexts
wait for room rather than expire the oldest early: ``BanditRuntime.room``), chosen contexts live
in one preallocated array, and the early and resolved memories are pruned by the clocks.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import operator

import numpy as np

from .join_state import join_state, load_join_state

__all__ = ["EarlyFeedback", "JoinStore", "Pending", "Resolution"]


@dataclasses.dataclass(slots=True)
class Pending:
    """A decision waiting for its reward.

    ``clock`` is its context record's stream clock (its event time for a record without a
    timestamp). It expires once the feedback clock passes min(event time, clock) + window (a
    context stamped ahead of its record waits no longer than its window), and once resolved its
    id is remembered until the clocks pass max(event time, clock) + retention (a context stamped
    behind its record is still recognised when repeated).
    """

    event_id: str
    round: int
    event_time: float
    slot: int
    clock: float


@dataclasses.dataclass(slots=True)
class EarlyFeedback:
    """Feedback read before its decision; ``watermark`` is the feedback clock *before* it.

    The clock decides later whether the decision's window had already closed at this
    feedback's position in the partition, exactly as if the decision had been made first.
    """

    event_id: str
    reward: float | dict[str, float]  # a slate's rewards are per item
    event_time: float
    source: tuple[str, int, int]  # topic, partition, offset (for dead letters)
    watermark: float = float("-inf")


@dataclasses.dataclass
class Resolution:
    """What happened to a decision: ``joined`` or ``expired``, with the reward used (if any)."""

    event_id: str
    round: int
    outcome: str
    reward: float | None
    context: np.ndarray | None


class JoinStore:
    """Pending decisions, early feedback and recently resolved ids of one bandit.

    Parameters
    ----------
    d
        Width of the stored chosen context (the policy's d).
    window
        Feedback window in seconds of event time.
    capacity
        Maximum number of pending decisions (beyond it :meth:`add` expires the oldest).
    retention
        Seconds (of the clocks) for which resolved ids are remembered.

    Examples
    --------
    >>> import numpy as np
    >>> js = JoinStore(d=2, window=10.0, capacity=4, retention=60.0)
    >>> js.add("e1", round=1, event_time=100.0, context=np.array([1.0, 2.0]))
    []
    >>> js.match("e1", 0.5, 105.0).outcome
    'joined'
    >>> js.status("e1")
    'joined'
    >>> js.add("e2", round=2, event_time=101.0, context=np.zeros(2))
    []
    >>> [r.outcome for r in js.advance_feedback_watermark(112.0)]
    ['expired']

    """

    def __init__(self, d: int, window: float, capacity: int, retention: float):
        self.d = d
        self.window = window
        self.capacity = capacity
        self.retention = retention
        self.pending: collections.OrderedDict[str, Pending] = collections.OrderedDict()
        self._last_round = -(1 << 62)  # the round of the latest decision added
        self._rounds_in_order = True  # every decision was added after a smaller round
        self._contexts = np.zeros((min(capacity, 1024), d))
        self._free: list[int] = list(range(self._contexts.shape[0] - 1, -1, -1))
        self._by_time: list[tuple[float, int, str]] = []  # heap of (due, seq, id), lazy
        self._seq = 0
        self.early: dict[str, list[EarlyFeedback]] = {}
        # heap of (feedback event time, insertion seq of its id, id), one item per held
        # feedback; lazy (items of ids taken meanwhile are skipped when popped)
        self._early_heap: list[tuple[float, int, str]] = []
        self._early_seq: dict[str, int] = {}
        self._early_n = 0
        self._early_count = 0  # held feedback messages (sum of the lists' lengths)
        # id -> (outcome, decision time, remembered from: max(decision time, record clock))
        self.resolved: dict[str, tuple[str, float, float]] = {}
        self._resolved_heap: list[tuple[float, str]] = []  # (remembered from, id), lazy
        self.feedback_watermark = float("-inf")
        self.context_watermark = float("-inf")

    # -- decisions --------------------------------------------------------------------------
    def _slot(self) -> int:
        if not self._free:
            n = self._contexts.shape[0]
            grow = min(n * 2, self.capacity) - n
            if grow <= 0:
                raise RuntimeError("pending store is full")
            self._contexts = np.vstack([self._contexts, np.zeros((grow, self.d))])
            self._free = list(range(n + grow - 1, n - 1, -1))
        return self._free.pop()

    def add(
        self,
        event_id: str,
        round: int,
        event_time: float,
        context: np.ndarray,
        clock: float | None = None,
    ) -> list[Resolution]:
        """Register a decision (``clock``: its context record's stream clock, None: its event
        time); returns decisions expired early to stay within capacity (never in a service: its
        contexts wait for room, ``BanditRuntime.room``)."""
        evicted = []
        while len(self.pending) >= self.capacity:
            evicted.append(self.resolve(next(iter(self.pending)), "expired", None))
        slot = self._slot()
        self._contexts[slot] = context
        clock = event_time if clock is None else clock
        due = min(event_time, clock)
        self.pending[event_id] = Pending(event_id, round, event_time, slot, clock)
        if round < self._last_round:
            self._rounds_in_order = False
        self._last_round = round
        heapq.heappush(self._by_time, (due, self._seq, event_id))
        self._seq += 1
        return evicted

    def add_many(
        self,
        event_ids: list[str],
        rounds: list[int],
        event_times: list[float],
        contexts,
        clocks: list[float | None] | None = None,
    ) -> list[Resolution]:
        """:meth:`add` for a batch, in order (its contexts, ``(B, d)``, written in one step);
        the same outcome as adding them one by one.

        >>> js = JoinStore(d=2, window=10.0, capacity=4, retention=60.0)
        >>> js.add_many(["a", "b"], [1, 2], [5.0, 6.0], np.array([[1.0, 2.0], [3.0, 4.0]]))
        []
        >>> js.match("b", 1.0, 7.0).context.tolist(), list(js.pending)
        ([3.0, 4.0], ['a'])
        """
        if len(self.pending) + len(event_ids) > self.capacity:  # evictions: one at a time
            out = []
            for eid, r, t, x, c in zip(
                event_ids, rounds, event_times, contexts, clocks or [None] * len(event_ids)
            ):
                out.extend(self.add(eid, r, t, x, c))
            return out
        slots = [self._slot() for _ in event_ids]  # may grow the array: before writing
        self._contexts[slots] = contexts
        pending, heap, seq = self.pending, self._by_time, self._seq
        given: list[float | None] | list[float] = event_times if clocks is None else clocks
        for eid, r, t, slot, c in zip(event_ids, rounds, event_times, slots, given):
            c = t if c is None else c
            pending[eid] = Pending(eid, r, t, slot, c)
            heapq.heappush(heap, (t if t <= c else c, seq, eid))
            seq += 1
        self._seq = seq
        if rounds:
            if rounds[0] < self._last_round or any(map(operator.lt, rounds[1:], rounds)):
                self._rounds_in_order = False
            self._last_round = rounds[-1]
        return []

    def _clock(self, by: str) -> float:
        return self.context_watermark if by == "context" else self.feedback_watermark

    def status(self, event_id: str, by: str = "feedback") -> str | None:
        """``pending``, ``joined``, ``expired`` or None (unknown or forgotten).

        A resolved id is remembered while its decision time is within ``retention`` of the
        watermark of the partition asking (``by="context"`` for duplicate contexts,
        ``"feedback"`` for feedback): each partition sees a canonical answer, however the two
        interleave.
        """
        if event_id in self.pending:
            return "pending"
        r = self.resolved.get(event_id)
        if r is None or r[2] < self._clock(by) - self.retention:
            return None
        return r[0]

    def status_at(self, event_id: str, feedback_watermark: float) -> str | None:
        """:meth:`status` as a feedback message saw it at its position in the partition."""
        if event_id in self.pending:
            return "pending"
        r = self.resolved.get(event_id)
        if r is None or r[2] < feedback_watermark - self.retention:
            return None
        return r[0]

    def decision_time(self, event_id: str) -> float | None:
        """Event time of the decision's context, if the decision is pending or remembered."""
        p = self.pending.get(event_id)
        if p is not None:
            return p.event_time
        r = self.resolved.get(event_id)
        if r is None or r[2] < self.feedback_watermark - self.retention:
            return None  # feedback lookups use the feedback partition's clock
        return r[1]

    def _take(self, event_id: str, outcome: str) -> tuple[int, np.ndarray]:
        """Resolve a pending decision: free its slot, remember its outcome; returns its
        (round, chosen context)."""
        p = self.pending.pop(event_id)
        ctx = self._contexts[p.slot].copy()  # (a slot is written whole when it is taken again)
        self._free.append(p.slot)
        self._remember(event_id, outcome, p.event_time, p.clock)
        return p.round, ctx

    def resolve(self, event_id: str, outcome: str, reward: float | None) -> Resolution:
        """Take a pending decision out of the join with its outcome (joined or expired)."""
        rnd, ctx = self._take(event_id, outcome)
        return Resolution(event_id, rnd, outcome, reward, ctx)

    def take_joined(self, event_id: str) -> tuple[int, np.ndarray]:
        """:meth:`match` without the :class:`Resolution`: the (round, chosen context) of a
        pending decision whose reward arrived in its window (the caller checked it). The
        service's hot path: a catch-up joins tens of thousands of held rewards.

        >>> js = JoinStore(d=2, window=10.0, capacity=4, retention=60.0)
        >>> js.add("a", 7, 5.0, np.array([1.0, 2.0]))
        []
        >>> rnd, ctx = js.take_joined("a")
        >>> rnd, ctx.tolist(), js.status("a")
        (7, [1.0, 2.0], 'joined')
        """
        return self._take(event_id, "joined")

    def take_joined_many(self, event_ids: list[str]) -> tuple[list[int], np.ndarray]:
        """:meth:`take_joined` for several pending decisions, in order: their rounds and their
        chosen contexts as one ``(n, d)`` array (one copy for all). Held rewards of a decided
        batch are joined this way (``BanditRuntime.after_decisions``).

        >>> js = JoinStore(d=2, window=10.0, capacity=4, retention=60.0)
        >>> js.add_many(["a", "b"], [1, 2], [5.0, 6.0], np.array([[1.0, 2.0], [3.0, 4.0]]))
        []
        >>> rounds, ctx = js.take_joined_many(["b", "a"])
        >>> rounds, ctx.tolist(), js.status("a"), js.status("b")
        ([2, 1], [[3.0, 4.0], [1.0, 2.0]], 'joined', 'joined')
        """
        pop = self.pending.pop
        taken = [pop(e) for e in event_ids]
        slots = [p.slot for p in taken]
        contexts = self._contexts[slots]
        self._free.extend(slots)
        resolved, heap, push = self.resolved, self._resolved_heap, heapq.heappush
        for e, p in zip(event_ids, taken):  # (what _remember does)
            t, c = p.event_time, p.clock
            keep = c if c > t else t
            resolved[e] = ("joined", t, keep)
            push(heap, (keep, e))
        return [p.round for p in taken], contexts

    # -- feedback ---------------------------------------------------------------------------
    def match(self, event_id: str, reward: float, event_time: float) -> Resolution:
        """Join a reward to a pending decision (caller checked the window)."""
        return self.resolve(event_id, "joined", reward)

    def window_check(self, event_id: str, event_time: float) -> str:
        """``ok``, ``before_decision`` or ``after_expiry`` for feedback of a pending decision."""
        p = self.pending[event_id]
        if event_time < p.event_time:
            return "before_decision"
        if event_time > p.event_time + self.window:
            return "after_expiry"
        return "ok"

    def hold_early(self, fb: EarlyFeedback) -> None:
        held = self.early.get(fb.event_id)
        if held is None:
            held = self.early[fb.event_id] = []
            self._early_n += 1  # not state: only the relative order of held ids matters
            self._early_seq[fb.event_id] = self._early_n
        held.append(fb)
        self._early_count += 1
        heapq.heappush(self._early_heap, (fb.event_time, self._early_seq[fb.event_id], fb.event_id))

    def take_early(self, event_id: str) -> list[EarlyFeedback]:
        self._early_seq.pop(event_id, None)
        held = self.early.pop(event_id, [])
        self._early_count -= len(held)
        return held

    @property
    def early_count(self) -> int:
        """Feedback messages held for decisions not made yet."""
        return self._early_count

    def advance_context_watermark(self, t: float) -> list[EarlyFeedback]:
        """Contexts read up to stream clock t: early feedback older than t is orphaned."""
        if t <= self.context_watermark:
            return []
        self.context_watermark = t
        self._prune()
        # ids whose every held feedback is at or before t, in the order they were first held
        # (the heap visits each held feedback once, when t passes its event time)
        due: dict[str, int] = {}
        heap = self._early_heap
        while heap and heap[0][0] <= t:
            _, seq, eid = heapq.heappop(heap)
            if self._early_seq.get(eid) == seq and eid not in due:
                if all(f.event_time <= t for f in self.early[eid]):
                    due[eid] = seq
        orphans = []
        for eid in sorted(due, key=due.__getitem__):
            orphans.extend(self.take_early(eid))
        return orphans

    def advance_feedback_watermark(self, t: float) -> list[Resolution]:
        """Feedback read up to stream clock t: pending decisions due before t − window
        expire."""
        if t <= self.feedback_watermark:
            return []
        self.feedback_watermark = t
        heap = self._by_time
        if heap and heap[0][0] < t - self.window:
            out = []
            cutoff = t - self.window
            while heap and heap[0][0] < cutoff:
                _, _, eid = heapq.heappop(heap)
                if eid in self.pending:  # else: already resolved (lazy deletion)
                    out.append(self.resolve(eid, "expired", None))
        else:  # (every feedback message advances the watermark: the common case, cheaply)
            out = []
        if len(heap) > 2 * len(self.pending) + 64:  # drop stale heap entries
            self._by_time = [x for x in heap if x[2] in self.pending]
            heapq.heapify(self._by_time)
        resolved = self._resolved_heap
        if resolved and resolved[0][0] < min(t, self.context_watermark) - self.retention:
            self._prune(t)
        return out

    def expire_all(self) -> list[Resolution]:
        """End of stream: every pending decision expires."""
        return [self.resolve(eid, "expired", None) for eid in list(self.pending)]

    def oldest_pending_round(self) -> int | None:
        """Smallest round of a pending decision (None if none is pending).

        Asked at every poll while a bandit waits for a release: decisions are added in round
        order, so it is the oldest pending one (O(1)); only a store that was given rounds out
        of order looks at every pending decision.

        >>> js = JoinStore(d=1, window=10.0, capacity=8, retention=60.0)
        >>> _ = js.add_many(["a", "b", "c"], [4, 5, 6], [1.0, 1.0, 1.0], np.zeros((3, 1)))
        >>> _ = js.take_joined("a"); js.oldest_pending_round()
        5
        """
        if not self.pending:
            return None
        if self._rounds_in_order:
            return next(iter(self.pending.values())).round
        return min(p.round for p in self.pending.values())

    def _remember(self, event_id: str, outcome: str, event_time: float, clock: float) -> None:
        keep = max(event_time, clock)
        self.resolved[event_id] = (outcome, event_time, keep)
        heapq.heappush(self._resolved_heap, (keep, event_id))

    def _prune(self, t: float | None = None) -> None:
        """Drop resolved ids that neither partition remembers any more."""
        horizon = min(self.feedback_watermark, self.context_watermark) - self.retention
        heap = self._resolved_heap
        while heap and heap[0][0] < horizon:
            et, eid = heapq.heappop(heap)
            r = self.resolved.get(eid)
            if r is not None and r[2] == et:
                del self.resolved[eid]

    # -- persistence (join_state.py) -------------------------------------------------------
    def state_dict(self) -> dict:
        """The store's state, in a canonical order (:func:`.join_state.join_state`)."""
        return join_state(self)

    def load_state_dict(self, state: dict) -> JoinStore:
        """Replace the store's contents by a :meth:`state_dict` (of this or an older version)."""
        JoinStore.__init__(self, self.d, self.window, self.capacity, self.retention)
        return load_join_state(self, state, EarlyFeedback)
