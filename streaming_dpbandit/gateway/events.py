"""The gateway's event table: what it decided for each event id, for idempotent retries.

A Rank repeated with the same ``eventId`` gets the answer of the first (the same chosen action,
probabilities and ranking), not a new decision; a second Reward for an event is refused; an
Activate is idempotent. The table holds a few numbers per event (the chosen action, its
probability, the ranking as positions, the request's digest), never the features, and is
bounded by ``max_events`` and ``retention_s`` (the oldest are forgotten first). After a restart
it is rebuilt from the write-ahead log's retained records (``wal.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import struct

import numpy as np

from .wal import Entry, Kind

__all__ = ["Event", "EventTable"]

_EXTRA = struct.Struct("<iIdQ8sH")


@dataclasses.dataclass(slots=True)
class Event:
    """One decided event."""

    time: float  #: decision time (the Rank's)
    arm: int  #: position of the chosen action in the request
    propensity: float
    version: int  #: model version the decision used
    order: bytes  #: the ranking: positions as little-endian uint16
    n_top: int  #: actions sharing the chosen one's probability (ties), first in ``order``
    digest: bytes  #: 8 bytes of the request's hash
    deferred: bool = False
    activated: bool = True
    rewarded: bool = False
    pending: bytes | None = None  #: deferred, not yet activated: the decision to send then
    active_at: float = 0.0  #: the decision's time for the learner (the Rank's, or Activate's)

    def encode(self) -> bytes:
        """The ``extra`` of its log record."""
        k = len(self.order) // 2
        head = _EXTRA.pack(self.arm, self.n_top, self.propensity, self.version, self.digest, k)
        return head + self.order

    @classmethod
    def decode(cls, extra: bytes, t: float) -> Event:
        arm, n_top, prop, version, digest, k = _EXTRA.unpack_from(extra, 0)
        order = extra[_EXTRA.size : _EXTRA.size + 2 * k]
        return cls(t, arm, prop, version, bytes(order), n_top, bytes(digest), active_at=t)

    def ranking(self) -> np.ndarray:
        return np.frombuffer(self.order, dtype="<u2")


class EventTable:
    """Event id → :class:`Event`, oldest first, bounded (module docstring)."""

    def __init__(self, max_events: int, retention_s: float):
        self.max_events = max_events
        self.retention_s = retention_s
        self.events: collections.OrderedDict[str, Event] = collections.OrderedDict()
        self.forgotten = 0

    def __len__(self) -> int:
        return len(self.events)

    def get(self, event_id: str) -> Event | None:
        return self.events.get(event_id)

    def add(self, event_id: str, ev: Event) -> None:
        self.events[event_id] = ev
        self.trim(ev.time)

    def trim(self, now: float) -> None:
        """Forget the events beyond ``max_events`` or older than the retention."""
        evs = self.events
        horizon = now - self.retention_s
        while evs and (len(evs) > self.max_events or next(iter(evs.values())).time < horizon):
            evs.popitem(last=False)
            self.forgotten += 1

    def replay(self, entries: list[Entry]) -> None:
        """Rebuild from the log's records (oldest first)."""
        for e in entries:
            if e.kind in (Kind.DECISION, Kind.DEFERRED):
                ev = Event.decode(e.extra, e.time)
                if e.kind == Kind.DEFERRED:
                    ev.deferred, ev.activated, ev.pending = True, False, e.value
                self.events[e.event_id] = ev
            elif e.kind == Kind.ACTIVATE:
                act = self.events.get(e.event_id)
                if act is not None:
                    act.activated, act.pending, act.active_at = True, None, e.time
            elif e.kind == Kind.REWARD:
                got = self.events.get(e.event_id)
                if got is not None:
                    got.rewarded = True
        if entries:
            self.trim(entries[-1].time)
