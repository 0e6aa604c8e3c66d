"""One bandit inside the service: its policy, its reward join and its counters."""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from ..policies.base import Policy
from ..privacy.contribution import RowRefused
from ..privacy.ledger import ReleaseRecord
from ..settings import BanditSettings
from .arms import ActionKind, SingleArms, arm_id_kwargs
from .gauges import export_bandit_metrics
from .join import EarlyFeedback, Resolution
from .parsing import AnyContext, BadInput, Pending

if TYPE_CHECKING:
    from ..policies.user_level import UserLevel

__all__ = ["BanditRuntime", "arm_id_kwargs"]

WINDOW = 1000

log = logging.getLogger("streaming_dpbandit.service")


class BanditRuntime:
    """Policy + join + counters of one bandit.

    Parameters
    ----------
    bandit_id
        The bandit's name (Kafka key).
    settings
        Its configuration.
    policy
        A freshly built policy (its state is loaded from a snapshot when there is one).
    metrics
        The service's :class:`~streaming_dpbandit.metrics.ServiceMetrics` (or None).
    kind
        What its decisions serve (:class:`~.arms.ActionKind`): single arms by default, or
        slates (``slates/runtime.py``).
    """

    def __init__(
        self,
        bandit_id: str,
        settings: BanditSettings,
        policy: Policy,
        metrics=None,
        kind: ActionKind | None = None,
    ):
        self.bandit_id = bandit_id
        self.settings = settings
        self.policy = policy
        self.metrics = metrics
        self.kind = kind = SingleArms() if kind is None else kind
        self.d = kind.row_width(policy)
        retention = settings.retention or 10 * settings.feedback_window
        self.join = kind.new_join(settings, self.d, retention)
        self.unledgered: list[ReleaseRecord] = []
        self._learn_X: list[np.ndarray] = []
        self._learn_y: list[float] = []
        self._learn_r: list[int] = []
        self.stats: collections.Counter[str] = collections.Counter()
        self.stats_restored: collections.Counter[str] = collections.Counter()  # earlier runs'
        self.window: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.best_window = float("-inf")
        self.reward_sum = 0.0
        self._clipped_seen: dict[str, int] = {}
        self.last_feedback_wall = time.monotonic()
        self.last_refit_round = 0
        self.catalogue = (
            None if settings.arms is None else {a: i for i, a in enumerate(settings.arms)}
        )
        #: user-level bandit (``settings.user_level``; its policy is a ``UserLevel``): rounds
        #: decided beyond their user's bound, not learned from when their rows resolve
        self.user_level = settings.user_level is not None
        self._bounded_rounds: set[int] = set()
        #: ``on_refused(bandit_id, reason, rounds)``: rows the policy refused (the service
        #: dead-letters them); None: counted and logged only
        self.on_refused: Callable[[str, str, list[int]], None] | None = None

    def encode(self, ev: AnyContext):
        """The rows of a validated context event (:meth:`~.arms.ActionKind.encode`)."""
        if self.user_level and ev.user_id is None:
            raise BadInput(
                "missing_user_id",
                f"bandit {self.bandit_id!r} bounds each user's contributions: events need a "
                "user_id",
            )
        return self.kind.encode(self, ev)

    def admit_users(self, batch: list[Pending], rounds, user_hashes=None) -> None:
        """User level: decide, at decision time and in round order, which of a decided batch's
        rows may enter the private statistics (``UserLevel.admit``: ids hashed with the keyed
        hash now, only counts of hashes kept). Rows beyond the bound are still decided and
        answered; they are counted (``dpbandit_bounded_events_total``) and never learned.

        Deciding at the decision — not when a reward arrives — makes the admitted set a
        function of the contexts partition's order only, so reprocessing after a crash (from
        the snapshot holding the counters) admits exactly the same rows. A broadcast learner
        passes ``user_hashes``: its decision replicas hashed the ids."""
        policy = cast("UserLevel", self.policy)
        if user_hashes is not None:
            mask = policy.admit(rounds, user_hashes=user_hashes)
        else:
            mask = policy.admit(rounds, user_ids=[p.event.user_id for p in batch])
        if mask.all():
            return
        out = np.asarray(rounds, dtype=np.int64)[~mask].tolist()
        self._bounded_rounds.update(out)
        self.stats["bounded"] += len(out)
        if self.metrics is not None:
            self.metrics.bounded_events.labels(self.bandit_id).inc(len(out))

    def check_new(self, ev: AnyContext) -> None:
        if self.join.status(ev.event_id, by="context") is not None:
            raise BadInput("duplicate_event", f"event {ev.event_id!r} was already decided")

    def decide_messages(self, batch: list[Pending]) -> list[bytes]:
        """Decide a batch (same bandit, no model update inside) with the frozen model; returns
        the decision messages (JSON bytes), in batch order."""
        return self.kind.decide_messages(self, batch)

    def after_decisions(self, batch: list[Pending], dead) -> None:
        """Join early feedback of the just-decided events; advance the contexts clock."""
        js = self.join
        early, pending, window = js.early, js.pending, js.window
        plain = self.kind.plain_rewards
        # the common case's rewards, joined together (in order) before anything else resolves
        ids: list[str] = []
        rewards: list[float] = []
        for p in batch:
            eid = p.event.event_id
            t = p.event.event_time
            # the join closes a window after its event time, or after its record's clock if
            # that is earlier (a context stamped ahead waits no longer: JoinStore.add)
            c = p.clock
            closes = (t if c is None or c >= t else c) + window
            held = js.take_early(eid) if eid in early else ()
            if (  # the common case: one reward, in the window, before the window closed
                len(held) == 1
                and eid in pending
                and t <= held[0].event_time <= t + window
                and held[0].watermark <= closes
            ):
                fb = held[0]
                if plain:  # (what on_pending does here, for many at once)
                    assert not isinstance(fb.reward, dict)  # single-arm rewards are numbers
                    ids.append(eid)
                    rewards.append(fb.reward)
                    continue
                self.kind.on_pending(self, eid, fb.reward, fb.event_time, fb.source, dead)
            else:
                if ids and (held or (eid in pending and js.feedback_watermark > closes)):
                    self.learn_joined_many(*js.take_joined_many(ids), rewards)
                    ids, rewards = [], []
                self._judge_held(eid, t, closes, held, dead)
            if eid in pending and js.feedback_watermark > closes:
                self.resolved(js.resolve(eid, "expired", None), forced=False)
        if ids:
            self.learn_joined_many(*js.take_joined_many(ids), rewards)
        # the contexts clock: the batch's record clocks (event times of unstamped records)
        t = max(p.event.event_time if p.clock is None else p.clock for p in batch)
        for orphan in self.join.advance_context_watermark(t):
            self.stats["fb_orphan"] += 1
            dead(
                orphan.source,
                "unknown_event",
                f"no decision for event {orphan.event_id!r} (its context never arrived)",
            )

    def _judge_held(self, eid: str, t: float, closes: float, held, dead) -> None:
        """Feedback held for a decision made at ``t``, each judged as of its position in the
        feedback partition (docs/service.md, "Why the join is deterministic")."""
        js = self.join
        for fb in held:
            status = js.status_at(eid, fb.watermark)  # as of this feedback's position
            if fb.event_time < t:
                self.stats["fb_before_decision"] += 1
                dead(
                    fb.source,
                    "feedback_before_decision",
                    f"feedback time precedes the decision of {eid!r}",
                )
                continue
            if status == "pending" and fb.watermark > closes:
                # in feedback order the window had closed before this feedback
                self.resolved(js.resolve(eid, "expired", None), forced=False)
                status = "expired"
            if status == "pending":
                self.kind.on_pending(self, eid, fb.reward, fb.event_time, fb.source, dead)
            elif status == "joined":
                self.stats["fb_duplicate"] += 1
                dead(fb.source, "duplicate_feedback", f"event {eid!r} already has its reward")
            else:
                self.stats["fb_after_expiry"] += 1
                dead(
                    fb.source,
                    "feedback_after_expiry",
                    f"event {eid!r} expired before its reward",
                )

    # -- feedback ---------------------------------------------------------------------------
    def on_feedback(
        self, fb, source: tuple[str, int, int], dead, clock: float | None = None
    ) -> None:
        """A parsed feedback message of this bandit, read at stream clock ``clock`` (None: a
        record without a timestamp, whose clock is its event time;
        :meth:`~.arms.ActionKind.on_feedback`)."""
        self.last_feedback_wall = time.monotonic()
        self.kind.on_feedback(self, fb, source, dead, fb.event_time if clock is None else clock)

    def judge(
        self, fb, reward, source: tuple[str, int, int], dead, joined: str, clock: float
    ) -> None:
        """Feedback (``reward``: what it carries) by the join's status of its event: applied
        to a pending decision, dead-lettered (before the decision, duplicate — ``joined`` says
        why —, after expiry, unknown) or held until its context arrives; then the feedback
        clock advances to its record's ``clock``."""
        status = self.join.status(fb.event_id)
        decided_at = self.join.decision_time(fb.event_id)
        if decided_at is not None and fb.event_time < decided_at:
            self.stats["fb_before_decision"] += 1
            dead(
                source,
                "feedback_before_decision",
                f"feedback time precedes the decision of {fb.event_id!r}",
            )
        elif status == "pending":
            self.kind.on_pending(self, fb.event_id, reward, fb.event_time, source, dead)
        elif status == "joined":
            self.stats["fb_duplicate"] += 1
            dead(source, "duplicate_feedback", f"event {fb.event_id!r} {joined}")
        elif status == "expired":
            self.stats["fb_after_expiry"] += 1
            dead(
                source, "feedback_after_expiry", f"event {fb.event_id!r} expired before its reward"
            )
        else:
            self.unseen(fb, reward, source, dead)
        self.advance_watermark(clock)

    def unseen(self, fb, reward, source: tuple[str, int, int], dead) -> None:
        """Feedback for an event neither pending nor remembered: unknown if the contexts have
        passed its time, else held until its context arrives (early)."""
        js = self.join
        if fb.event_time <= js.context_watermark:
            self.stats["fb_unknown"] += 1
            dead(source, "unknown_event", f"no decision for event {fb.event_id!r}")
        else:
            self.stats["fb_early"] += 1
            js.hold_early(
                EarlyFeedback(fb.event_id, reward, fb.event_time, source, js.feedback_watermark)
            )

    def outside_window(self, event_id, event_time, source, dead) -> bool:
        """Dead-letter feedback stamped outside its pending decision's window; True if it was."""
        check = self.join.window_check(event_id, event_time)
        if check == "before_decision":
            self.stats["fb_before_decision"] += 1
            dead(
                source,
                "feedback_before_decision",
                f"feedback time precedes the decision of {event_id!r}",
            )
            return True
        if check == "after_expiry":
            self.stats["fb_after_expiry"] += 1
            dead(
                source, "feedback_after_expiry", f"feedback for {event_id!r} is outside the window"
            )
            return True
        return False

    def advance_watermark(self, t: float) -> None:
        """The bandit's feedback clock reads ``t`` (a feedback record's stream clock): joins
        whose window closed before it expire."""
        for res in self.join.advance_feedback_watermark(t):
            self.resolved(res, forced=False)

    def room(self) -> int:
        """Decisions the join can take now (``max_pending`` minus those pending)."""
        return self.join.capacity - len(self.join.pending)

    def force_expire(self) -> int:
        """Idle timeout: expire every pending decision the next release waits for (all of
        them when the join is full)."""
        n = 0
        through = self._reads_through() if self.room() > 0 else 1 << 62
        for eid in [e for e, p in self.join.pending.items() if p.round <= through]:
            self.resolved(self.join.resolve(eid, "expired", None), forced=True)
            n += 1
        return n

    def end_of_stream(self) -> None:
        for res in self.join.expire_all():
            self.resolved(res, forced=False)

    def learn_joined(self, round: int, reward: float, context: np.ndarray) -> None:
        """A joined reward: counted, and its row queued for learning."""
        self.stats["joined"] += 1
        reward = float(reward)
        self.window.append(reward)
        self.reward_sum += reward
        self.queue_row(context, reward, round)

    def learn_joined_many(
        self, rounds: list[int], contexts: np.ndarray, rewards: list[float]
    ) -> None:
        """:meth:`learn_joined` for several joined rewards, in order (their rows queued as
        one block)."""
        if self._bounded_rounds:  # user level: some rows may be dropped, row by row
            for rnd, reward, ctx in zip(rounds, rewards, contexts):
                self.learn_joined(rnd, reward, ctx)
            return
        self.stats["joined"] += len(rounds)
        rewards = [float(r) for r in rewards]
        self.window.extend(rewards)
        total = self.reward_sum
        for r in rewards:  # one at a time, as learn_joined adds them
            total += r
        self.reward_sum = total
        self._learn_X.append(contexts)
        self._learn_y.extend(rewards)
        self._learn_r.extend(rounds)

    def queue_row(self, context: np.ndarray, reward: float, round: int) -> None:
        """Queue a resolved decision's row for the policy (:meth:`flush_learning`); a row
        beyond its user's bound (:meth:`admit_users`) is dropped here."""
        if self._bounded_rounds and round in self._bounded_rounds:
            self._bounded_rounds.discard(round)
            return
        self._learn_X.append(context)
        self._learn_y.append(reward)
        self._learn_r.append(round)

    def resolved(self, res: Resolution, forced: bool) -> None:
        """A decision joined or expired (:meth:`~.arms.ActionKind.resolved`)."""
        self.kind.resolved(self, res, forced)
        if self._bounded_rounds:  # an expired row that was dropped, not queued
            self._bounded_rounds.discard(res.round)

    def _reads_through(self) -> int:
        """Last round the policy's next update reads (deterministic, see docs/service.md)."""
        pol = self.policy
        if pol.routes_rows_by_round:
            return pol.refit_reads_through()
        ahead = 0 if pol.refit_due() else pol.max_decide_batch()
        if ahead >= (1 << 40):  # never updates
            return 1 << 62
        return pol.t + ahead - self.settings.feedback_lag_rounds

    def flush_learning(self, for_update: bool = False) -> None:
        """Feed resolved rows to the policy.

        Policies that route rows by round (FLIPHAT) get every row as soon as it resolves: their
        sums are exact and order-free. Any other policy gets its rows exactly once per update,
        just before it (``for_update``), sorted by round, in one call — the rows that update
        reads; later rows wait (in the snapshot). Identical inputs give identical models, so
        batching, interleaving and restarts cannot change what such a policy learns.
        """
        if not self._learn_r:
            return
        rounds = np.asarray(self._learn_r, dtype=np.int64)
        if self.policy.routes_rows_by_round:
            feed = np.ones(rounds.size, dtype=bool)
        else:
            if not for_update:
                return
            feed = rounds <= self._reads_through()
            if not feed.any():
                return
        X = np.vstack(self._learn_X)
        y = np.asarray(self._learn_y, dtype=np.float64)
        order = np.argsort(rounds[feed], kind="stable")
        self._learn(X[feed][order], y[feed][order], rounds[feed][order])
        keep = ~feed
        self._learn_X = list(X[keep])
        self._learn_y = y[keep].tolist()
        self._learn_r = rounds[keep].tolist()

    def _learn(self, X: np.ndarray, y: np.ndarray, rounds: np.ndarray) -> None:
        """Give the policy rows; rows it refuses (:class:`RowRefused`: a round learned twice, a
        row beyond its user's bound — the join makes this unreachable) are dropped, counted and
        reported through :attr:`on_refused`, and the other rows are learned."""
        while rounds.size:
            try:
                self.kind.learn(self.policy, X, y, rounds)
                return
            except RowRefused as err:
                bad = err.refused
                if bad is None or bad.shape != rounds.shape or not bad.any():
                    raise  # the policy did not say which rows: not a row refusal
                n = int(bad.sum())
                self.stats["refused_rows"] += n
                log.error(
                    "bandit %s: the policy refused %d row(s) (%s); learning the others",
                    self.bandit_id,
                    n,
                    err.reason,
                    extra={"bandit": self.bandit_id},
                )
                if self.on_refused is not None:
                    self.on_refused(self.bandit_id, err.reason, rounds[bad].tolist())
                X, y, rounds = X[~bad], y[~bad], rounds[~bad]

    # -- releases ---------------------------------------------------------------------------
    def waiting_for(self) -> tuple[int, int]:
        """(decisions still without a resolved reward that the next release reads, the last
        round it reads): what a blocked bandit waits for."""
        through = self._reads_through()
        return sum(1 for p in self.join.pending.values() if p.round <= through), through

    def refit_ready(self) -> bool:
        """Every decision the due refit reads has its reward resolved."""
        oldest = self.join.oldest_pending_round()
        return oldest is None or oldest > self._reads_through()

    def refit(self) -> list[ReleaseRecord]:
        self.flush_learning(for_update=True)
        t0 = time.perf_counter()
        records = self.policy.refit()
        self.last_refit_round = self.policy.t
        if self.metrics is not None:
            self.metrics.refit_duration.labels(self.bandit_id).observe(time.perf_counter() - t0)
            for r in records:
                self.metrics.releases.labels(self.bandit_id, r.mechanism).inc()
        self.unledgered.extend(records)
        return records

    # -- metrics ----------------------------------------------------------------------------
    def export_metrics(self) -> None:
        """Refresh the bandit's gauges (:func:`.gauges.export_bandit_metrics`)."""
        export_bandit_metrics(self)

    # -- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        self.flush_learning()
        held = np.vstack(self._learn_X) if self._learn_X else np.zeros((0, self.d))
        order = np.lexsort((np.asarray(self._learn_y), np.asarray(self._learn_r)))  # canonical
        return {
            "held_rows": {
                "X": held[order],
                "y": np.asarray(self._learn_y, dtype=np.float64)[order],
                "rounds": np.asarray(self._learn_r, dtype=np.int64)[order],
            },
            "policy": self.policy.state_dict(),
            "join": self.join.state_dict(),
            "unledgered": [r.to_dict() for r in self.unledgered],
            "stats": dict(self.stats),
            "window": list(self.window),
            "best_window": self.best_window,
            "reward_sum": self.reward_sum,
            "last_refit_round": self.last_refit_round,
            **(
                {"bounded_rounds": np.array(sorted(self._bounded_rounds), dtype=np.int64)}
                if self.user_level
                else {}
            ),
        }

    def load_state_dict(self, state: dict) -> BanditRuntime:
        self.policy.load_state_dict(state["policy"])
        self.join.load_state_dict(state["join"])
        held = state.get("held_rows")
        if held is not None and len(held["rounds"]):
            self._learn_X = list(np.asarray(held["X"], dtype=np.float64))
            self._learn_y = np.asarray(held["y"], dtype=np.float64).tolist()
            self._learn_r = np.asarray(held["rounds"], dtype=np.int64).tolist()
        self.unledgered = [ReleaseRecord.from_dict(r) for r in state["unledgered"]]
        self.stats = collections.Counter(state["stats"])
        self.stats_restored = collections.Counter(state["stats"])
        self.window.extend(state["window"])
        self.best_window = float(state["best_window"])
        self.reward_sum = float(state["reward_sum"])
        self.last_refit_round = int(state["last_refit_round"])
        self._bounded_rounds = set(np.asarray(state.get("bounded_rounds", ()), np.int64).tolist())
        counters = getattr(self.policy, "counters", None) or {}
        self._clipped_seen = {
            "context_coordinate": int(counters.get("clipped_context_coords", 0)),
            "reward": int(counters.get("clipped_rewards", 0)),
        }
        return self
