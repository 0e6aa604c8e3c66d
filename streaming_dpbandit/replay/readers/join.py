"""Join the service's logged topics — contexts, decisions, feedback — back into bandit events.

The service publishes a decision (arm, propensity) for each context and receives rewards on the
feedback topic (``docs/events.md``). A replay needs all three per event. The join follows the
service's own rules (``docs/service.md``), so a replayed reward is the reward the service
learned:

* a decision for a context with event time τ takes the first reward with τ ≤ time ≤ τ + window;
* it is resolved (reward missing) once the feedback clock passes min(τ, the context record's
  timestamp) + window; a missing reward drops the event (default) or gives it
  ``default_reward``. The feedback clock is the largest record timestamp of the feedback read
  (rewards and heartbeats), as the service's stream clock (docs/service.md, The stream clock):
  no event time moves it, and a context, reward or heartbeat stamped more than
  ``max_event_time_skew_s`` ahead of its record, or ``max_event_time_lag_s`` behind it, is
  skipped (counted ``event_time_out_of_range``). A log without record timestamps (a
  ``service-jsonl`` file without ``timestamp``) reads each message's event time as its clock,
  as the service does;
* events are emitted in decision order; memory is bounded by ``max_pending`` (beyond it the
  oldest unresolved event is resolved early and counted, the service's overload valve);
* a repeated decision (the service may repeat one after a crash, never change it) is ignored;
  a conflicting one is an error.
"""

from __future__ import annotations

import abc
import collections
import inspect
import math
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

import numpy as np
from pydantic import BaseModel

from ...stream.binary_context import MAGIC, BinaryContext, decode_binary_context
from ...stream.schemas import ContextEvent, Decision, Feedback, Watermark
from ...utils.arrays import FloatArray
from ..errors import LogFormatError
from .base import LogReader

if TYPE_CHECKING:
    from ..batch import LoggedBatch

__all__ = ["EventJoin", "JoinedEvent", "open_service_log"]

_Model = TypeVar("_Model", bound=BaseModel)


class JoinedEvent:
    """One event with its context, decision and (maybe) reward."""

    __slots__ = (
        "X",
        "arm",
        "arm_ids",
        "due",
        "event_id",
        "propensity",
        "reward",
        "time",
        "user_id",
    )

    def __init__(
        self,
        event_id: str,
        X: FloatArray,
        arm: int,
        propensity: float,
        time: float,
        arm_ids: list[str] | None = None,
        user_id: str | None = None,
    ) -> None:
        self.event_id = event_id
        self.arm_ids = arm_ids
        self.user_id = user_id
        self.X = X
        self.arm = arm
        self.propensity = propensity
        self.time = time
        self.due = time  # min(time, its context record's clock): when its window closes
        self.reward: float | None = None


class EventJoin:
    """Bounded-memory join of the service's topics (see the module docstring).

    Parameters
    ----------
    bandit_id
        Keep this bandit's events; ``None``: the first bandit seen, and a second one is an
        error (a log of several bandits must name one).
    arms
        Arm catalogue for shared contexts (``shared`` + ``arm_ids``), as the bandit's config.
    feedback_window
        Seconds of event time a decision waits for its reward (the bandit's setting).
    missing_reward
        ``"drop"`` (default) or ``"default"`` (use ``default_reward``).
    max_pending
        Bound on held contexts, decisions, rewards and unresolved events.
    featuriser
        The bandit's :class:`~streaming_dpbandit.features.FeatureHasher`
        (``BanditSettings.featuriser``) for contexts in feature objects (``actions``,
        ``context_features``): the rows the service decided with.

    Examples
    --------
    >>> join = EventJoin(feedback_window=10.0)
    >>> join.add("contexts", {"event_id": "e1", "bandit_id": "b", "event_time": 0,
    ...     "arms": [{"arm_id": "x", "features": [1.0]}, {"arm_id": "y", "features": [2.0]}]})
    >>> join.add("decisions", {"event_id": "e1", "bandit_id": "b", "arm_id": "y",
    ...     "arm_index": 1, "propensity": 0.5, "model_version": 0, "episode": 0, "round": 1,
    ...     "calibration": "certified", "policy": "random", "decided_at": 0.1})
    >>> join.add("feedback", {"event_id": "e1", "bandit_id": "b", "reward": 1, "event_time": 2})
    >>> [(e.event_id, e.arm, e.reward) for e in join.ready()]
    [('e1', 1, 1.0)]
    """

    def __init__(
        self,
        bandit_id: str | None = None,
        arms: list[str] | None = None,
        feedback_window: float = 60.0,
        missing_reward: str = "drop",
        default_reward: float = 0.0,
        max_pending: int = 200_000,
        featuriser: Any = None,
        max_event_time_skew_s: float | None = 300.0,
        max_event_time_lag_s: float | None = 86_400.0,
    ):
        if missing_reward not in ("drop", "default"):
            raise ValueError("missing_reward must be 'drop' or 'default'")
        if not feedback_window > 0:
            raise ValueError("feedback_window must be positive")
        self.bandit_id = bandit_id
        self.catalogue = None if arms is None else {a: i for i, a in enumerate(arms)}
        self.feedback_window = float(feedback_window)
        self.missing_reward = missing_reward
        self.default_reward = float(default_reward)
        self.max_pending = max_pending
        self.featuriser = featuriser
        self.skew = max_event_time_skew_s
        self.lag = max_event_time_lag_s
        self.d: int | None = None
        self.first_k: int | None = None  # the number of arms of the first context
        # id -> (rows, arm ids, event time, user, when its window's clock starts)
        self._ctx: OrderedDict[str, tuple[FloatArray, list[str], float, str | None, float]] = (
            OrderedDict()
        )
        self._dec: OrderedDict[str, Decision] = OrderedDict()
        self._fb: OrderedDict[str, tuple[float, float]] = OrderedDict()  # (reward, time)
        self._queue: OrderedDict[str, JoinedEvent] = OrderedDict()
        self._done: OrderedDict[str, int] = OrderedDict()  # emitted id -> arm (bounded)
        self._out: list[JoinedEvent] = []
        self.watermark = -math.inf
        self.counters: collections.Counter[str] = collections.Counter()
        self._where = "log"

    # -- input -----------------------------------------------------------------------------
    def add(
        self,
        kind: str,
        value: dict[str, Any] | str | bytes,
        where: str = "log",
        timestamp_ms: int | None = None,
    ) -> None:
        """Add one message of topic ``kind`` (``contexts``, ``decisions`` or ``feedback``);
        ``value`` is the JSON object (dict) or its raw text/bytes, ``timestamp_ms`` its
        record's timestamp (None or negative: none)."""
        self._where = where
        msg: ContextEvent | BinaryContext | Decision | Watermark | Feedback
        try:
            if kind == "contexts" and isinstance(value, bytes) and value.startswith(MAGIC):
                msg = decode_binary_context(value)  # the binary form (docs/events.md)
            elif kind == "contexts":
                msg = _parse(ContextEvent, value)
            elif kind == "decisions":
                msg = _parse(Decision, value)
            elif kind == "feedback":
                if _is_watermark(value):
                    msg = _parse(Watermark, value)
                else:
                    msg = _parse(Feedback, value)
            else:
                raise LogFormatError(f"{where}: unknown topic {kind!r}")
        except ValueError as err:
            if isinstance(err, LogFormatError):
                raise
            raise LogFormatError(f"{where}: invalid {kind} message: {_first_error(err)}") from None
        if not self._mine(msg.bandit_id, where):
            return
        clock = None if timestamp_ms is None or timestamp_ms < 0 else timestamp_ms / 1000.0
        if isinstance(msg, Decision):
            self._decision(msg, where)
            return
        if clock is not None and not (
            (self.lag is None or msg.event_time >= clock - self.lag)
            and (self.skew is None or msg.event_time <= clock + self.skew)
        ):
            self.counters["event_time_out_of_range"] += 1  # the service dead-letters it
            return
        if isinstance(msg, ContextEvent | BinaryContext):
            self._context(msg, where, clock)
        elif isinstance(msg, Watermark):
            self._advance(msg.event_time if clock is None else clock)
        else:
            self._feedback(msg, clock)

    def _mine(self, bandit_id: str, where: str) -> bool:
        if self.bandit_id is None:
            self.bandit_id = bandit_id
            self._first_bandit_where = where
        if bandit_id != self.bandit_id:
            if getattr(self, "_first_bandit_where", None) is not None:
                raise LogFormatError(
                    f"{where}: the log holds several bandits ({self.bandit_id!r}, "
                    f"{bandit_id!r}, ...): choose one (--log-param bandit=ID)"
                )
            self.counters["other_bandits"] += 1
            return False
        return True

    def _encode(self, ev: ContextEvent | BinaryContext, where: str) -> FloatArray:
        X = ev.arm_features()
        objects = None if X is not None else ev.feature_objects()
        if objects is not None:
            X = self._featurise(ev.event_id, objects, where)
        elif X is None:
            assert isinstance(ev, ContextEvent)  # (the binary form has per-arm features)
            shared = ev.shared_features()
            if shared is None or ev.arm_ids is None:  # a slate request: no candidates to join
                raise LogFormatError(
                    f"{where}: event {ev.event_id!r} is a slate request (slate_size): slate "
                    "logs are replayed with the queue method (docs/replay.md)"
                )
            if self.catalogue is None:
                raise LogFormatError(
                    f"{where}: event {ev.event_id!r} has a shared context: give the bandit's "
                    "arm catalogue (--log-param arms=a,b,...)"
                )
            width = len(shared)
            X = np.zeros((len(ev.arm_ids), len(self.catalogue) * width))
            for row, a in enumerate(ev.arm_ids):
                k = self.catalogue.get(a)
                if k is None:
                    raise LogFormatError(f"{where}: arm {a!r} is not in the catalogue")
                X[row, k * width : (k + 1) * width] = shared
        if self.d is None:
            self.d, self.first_k = int(X.shape[1]), int(X.shape[0])
        elif X.shape[1] != self.d:
            raise LogFormatError(
                f"{where}: event {ev.event_id!r}: arms have {X.shape[1]} features, earlier "
                f"events {self.d} (mismatched dimensions)"
            )
        return X

    def _featurise(self, event_id: str, objects: tuple[Any, Any], where: str) -> FloatArray:
        """The rows of a context in feature objects, by the bandit's featuriser."""
        from ...features import FeatureError

        if self.featuriser is None:
            raise LogFormatError(
                f"{where}: event {event_id!r} carries feature objects: replay hashes them with "
                "the bandit's featuriser — give the bandit's configuration (--config FILE.yaml, "
                "its features section; docs/features.md)"
            )
        try:
            X: FloatArray = self.featuriser.transform(*objects, ("context_features", "actions"))
        except FeatureError as err:
            raise LogFormatError(f"{where}: event {event_id!r}: {err}") from None
        return X

    def _context(
        self, ev: ContextEvent | BinaryContext, where: str, clock: float | None = None
    ) -> None:
        eid = ev.event_id
        if eid in self._ctx or eid in self._queue or eid in self._done:
            self.counters["duplicate_contexts"] += 1
            return
        X = self._encode(ev, where)
        # its window closes after its event time or its record's clock, whichever is earlier
        due = ev.event_time if clock is None else min(ev.event_time, clock)
        self._ctx[eid] = (X, ev.candidate_ids(), ev.event_time, ev.user_id, due)
        self._bound(self._ctx, "contexts_without_decision")
        if eid in self._dec:
            self._pair(eid, self._dec.pop(eid), where)

    def _decision(self, dec: Decision, where: str) -> None:
        eid = dec.event_id
        if not (0 < dec.propensity <= 1):
            raise LogFormatError(
                f"{where}: event {eid!r}: propensity {dec.propensity!r} is not in (0, 1]"
            )
        prev = self._done.get(eid)
        if prev is None and eid in self._queue:
            prev = self._queue[eid].arm
        if prev is None and eid in self._dec:
            prev = self._dec[eid].arm_index
        if prev is not None:
            if prev != dec.arm_index:
                raise LogFormatError(
                    f"{where}: event {eid!r} has conflicting decisions (arm {prev} and "
                    f"{dec.arm_index})"
                )
            self.counters["repeated_decisions"] += 1
            return
        if eid in self._ctx:
            self._pair(eid, dec, where)
        else:
            self._dec[eid] = dec
            self._bound(self._dec, "decisions_without_context")

    def _pair(self, eid: str, dec: Decision, where: str) -> None:
        X, ids, t, user, due = self._ctx.pop(eid)
        k = dec.arm_index
        if not 0 <= k < len(ids) or ids[k] != dec.arm_id:
            raise LogFormatError(
                f"{where}: event {eid!r}: decision arm {dec.arm_id!r} (index {k}) is not the "
                "context's candidate at that index"
            )
        ev = JoinedEvent(eid, X, k, float(dec.propensity), t, ids, user)
        ev.due = due
        self._queue[eid] = ev
        held = self._fb.pop(eid, None)
        if held is not None:
            self._reward(ev, *held)
        if len(self._queue) > self.max_pending:  # overload valve
            self._resolve_front(forced=True)
        self._drain()

    def _feedback(self, fb: Feedback, clock: float | None = None) -> None:
        if clock is None:  # no record timestamp: its event time is its clock
            self._advance(fb.event_time)
        ev = self._queue.get(fb.event_id)
        if ev is not None:
            self._reward(ev, fb.reward, fb.event_time)
        elif fb.event_id in self._done:
            self.counters["late_or_duplicate_feedback"] += 1
        elif fb.event_id in self._fb:
            self.counters["duplicate_feedback"] += 1
        else:
            self._fb[fb.event_id] = (fb.reward, fb.event_time)
            self._bound(self._fb, "feedback_without_decision")
        if clock is not None:  # judged before its own record moves the clock, as the service
            self._advance(clock)
        self._drain()

    def _reward(self, ev: JoinedEvent, reward: float, t: float) -> None:
        if ev.reward is not None:
            self.counters["duplicate_feedback"] += 1
        elif ev.time <= t <= ev.time + self.feedback_window:
            ev.reward = float(reward)
        else:
            self.counters["feedback_outside_window"] += 1

    def _advance(self, t: float) -> None:
        if t > self.watermark:
            self.watermark = t
            self._drain()

    def _bound(self, store: OrderedDict[str, Any], counter: str) -> None:
        while len(store) > self.max_pending:
            store.popitem(last=False)
            self.counters[counter] += 1

    # -- output ----------------------------------------------------------------------------
    def _resolve_front(self, forced: bool = False) -> None:
        eid, ev = self._queue.popitem(last=False)
        if ev.reward is None:
            if forced:
                self.counters["forced_expiries"] += 1
            if self.missing_reward == "default":
                ev.reward = self.default_reward
                self.counters["default_rewards"] += 1
            else:
                self.counters["dropped_without_reward"] += 1
        if ev.reward is not None:
            self._out.append(ev)
        self._done[eid] = ev.arm
        while len(self._done) > 4 * self.max_pending:
            self._done.popitem(last=False)

    def _drain(self) -> None:
        q = self._queue
        while q:
            ev = next(iter(q.values()))
            if ev.reward is None and self.watermark <= ev.due + self.feedback_window:
                break
            self._resolve_front()

    def ready(self) -> list[JoinedEvent]:
        """Events resolved since the last call, in decision order."""
        out, self._out = self._out, []
        return out

    def finish(self) -> list[JoinedEvent]:
        """End of the log: resolve everything still pending."""
        while self._queue:
            self._resolve_front()
        self.counters["contexts_without_decision"] += len(self._ctx)
        self.counters["decisions_without_context"] += len(self._dec)
        self.counters["feedback_without_decision"] += len(self._fb)
        self._ctx.clear()
        self._dec.clear()
        self._fb.clear()
        return self.ready()


def open_service_log(reader: Any, join: EventJoin, messages: Any, where: str, unit: str) -> None:
    """What opening a log of the service's topics learns (a ``service-jsonl`` file, a Kafka
    range): d and K from its first context, once it is known to hold decisions too.

    Raises :class:`LogFormatError` when it has no context, or no decision: replay needs the
    logged decisions (the arm chosen and its propensity), not only contexts and rewards.
    """
    counts: collections.Counter[str] = collections.Counter()
    for kind, value, at, ts in messages:  # (ts: the record's timestamp in ms, or None)
        counts[kind] += 1
        if kind == "contexts" and join.d is None:
            join.add(kind, value, at, ts)
            if join.d is not None:
                reader.d, reader.n_arms = join.d, join.first_k
                reader.first_bandit = join.bandit_id
        if join.d is not None and counts["decisions"]:
            return
    if join.d is None:
        raise LogFormatError(f"{where}: no context events in the {unit}")
    origin = getattr(reader, "format_origin", None)
    raise LogFormatError(
        f"{where}: read as a {reader.format} log{f' ({origin})' if origin else ''}, the {unit} "
        f"has {counts['contexts']:,} context and {counts['feedback']:,} feedback messages but "
        "no decisions: replay needs the logged decisions (the arm the logging policy chose, "
        "with its propensity) beside them — the decisions topic; for a file run, dpbandit "
        "serve --decisions-out writes them"
    )


class JoinOptions(TypedDict, total=False):
    """The :class:`EventJoin` keywords a service-log reader takes (with EventJoin's defaults)."""

    bandit_id: str | None
    arms: list[str] | None
    feedback_window: float
    missing_reward: str
    default_reward: float
    max_pending: int
    featuriser: Any


class ServiceLogReader(LogReader):
    """A log of the service's topics (a ``service-jsonl`` file, a Kafka range): its messages,
    joined into events by :class:`EventJoin`. A subclass yields the messages
    (:meth:`_messages`: ``(topic kind, value, where, record timestamp)``) and stores the join's
    parameters."""

    bandit_id: str | None  # (with the rest of the join's options: see _keep_join)
    feedback_window: float
    missing_reward: str
    counters: dict[str, int]
    #: what the log is called in messages ("log", "range")
    unit = "log"

    @abc.abstractmethod
    def _messages(self) -> Iterator[tuple[str, Any, str, int | None]]:
        """The log's messages in order: (``contexts``/``decisions``/``feedback``, value, where,
        the record's timestamp in ms or None)."""

    def _keep_join(self, options: JoinOptions) -> None:
        """Store the join's options as attributes, EventJoin's defaults for those not given (an
        unknown keyword is a TypeError, as for any constructor)."""
        params = inspect.signature(EventJoin).parameters
        for name in options:
            if name not in JoinOptions.__annotations__:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword {name!r}")
        for name in JoinOptions.__annotations__:
            setattr(self, name, options.get(name, params[name].default))

    def _join(self) -> EventJoin:
        return EventJoin(**{name: getattr(self, name) for name in JoinOptions.__annotations__})

    def _open(self) -> None:
        open_service_log(self, self._join(), self._messages(), self.where(), self.unit)

    def _chunks(self, chunk_size: int) -> Iterator[LoggedBatch]:
        join = self._join()
        join.d = self.d
        pending: list[JoinedEvent] = []
        for kind, value, where, ts in self._messages():
            join.add(kind, value, where, ts)
            pending += join.ready()
            while len(pending) >= chunk_size:
                yield to_batch(pending[:chunk_size], self.d)
                pending = pending[chunk_size:]
        pending += join.finish()
        while pending:
            yield to_batch(pending[:chunk_size], self.d)
            pending = pending[chunk_size:]
        self.counters = {k: v for k, v in join.counters.items() if v}


def _is_watermark(value: dict[str, Any] | str | bytes) -> bool:
    if isinstance(value, dict):
        return value.get("type") == "watermark"
    raw = value if isinstance(value, bytes) else str(value).encode()
    return b'"watermark"' in raw


def _parse(model: type[_Model], value: dict[str, Any] | str | bytes) -> _Model:
    if isinstance(value, dict):
        return model.model_validate(value)
    return model.model_validate_json(value)


def _first_error(err: ValueError) -> str:
    errors = getattr(err, "errors", None)
    if callable(errors):
        e = errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        return f"{loc}: {msg}" if loc else msg
    return str(err).splitlines()[0]


def to_batch(events: list[JoinedEvent], d: int) -> LoggedBatch:
    """Turn joined events into a :class:`~..batch.LoggedBatch` (candidate sets padded)."""
    from ..batch import LoggedBatch
    from ..contexts import DenseContexts

    B = len(events)
    K = max(e.X.shape[0] for e in events)
    X = np.zeros((B, K, d))
    mask = np.zeros((B, K), dtype=bool)
    arm_ids = np.full((B, K), None, dtype=object)
    for i, e in enumerate(events):
        k = e.X.shape[0]
        X[i, :k] = e.X
        mask[i, :k] = True
        if e.arm_ids is not None:
            arm_ids[i, :k] = e.arm_ids
    return LoggedBatch(
        event_ids=np.array([e.event_id for e in events], dtype=object),
        actions=np.array([e.arm for e in events], dtype=np.int64),
        rewards=np.array([e.reward for e in events], dtype=np.float64),
        propensities=np.array([e.propensity for e in events], dtype=np.float64),
        positions=np.zeros(B, dtype=np.int64),
        contexts=DenseContexts(X),
        mask=None if mask.all() else mask,
        times=np.array([e.time for e in events], dtype=np.float64),
        arm_ids=arm_ids if all(e.arm_ids is not None for e in events) else None,
        user_ids=(
            np.array([e.user_id for e in events], dtype=object)
            if all(e.user_id is not None for e in events)
            else None
        ),
    )
