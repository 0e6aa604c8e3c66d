"""The stream clock: what time it is for a record, and which event times a record may carry
(docs/service.md, "The stream clock"; issue 31).

A record's reading of the clock is its timestamp — Kafka's ``CreateTime`` or ``LogAppendTime``,
a ``--file`` line's ``timestamp``, the simulated source's clock — or the wall clock where that
is earlier; a record without one (a ``--file`` line before the first timestamp) has none, and
the join then reads its message's event time instead. The join's clocks (``join.py``) are
running maxima of these readings, never of an event time: one producer's message cannot move
them beyond its own record. Event times are checked against the reading — at most
``max_event_time_skew_s`` ahead, at most ``max_event_time_lag_s`` behind (``parsing.py``,
``too_late`` and ``too_old``) — and a snapshot holding a clock no record can have set is repaired
(:func:`repair_clocks`).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

__all__ = ["record_clock", "repair_clocks", "repair_snapshot_clocks"]

log = logging.getLogger("streaming_dpbandit.service")


def record_clock(record: object, wall: float) -> float | None:
    """The stream clock's reading of ``record``: its timestamp in seconds, or the wall clock
    if that is earlier; None for a record without a timestamp.

    The timestamp is Kafka's ``CreateTime`` or ``LogAppendTime`` (kafka-python's
    ``ConsumerRecord.timestamp``, the confluent transport's ``timestamp_ms``), a ``--file``
    line's ``timestamp``, or the simulated source's clock. It is fixed with the record, so a
    record re-read after a restart reads the same (unless it was stamped ahead of the service's
    wall clock the first time: docs/service.md, "The stream clock").

    >>> from streaming_dpbandit.stream.transport import Record
    >>> record_clock(Record("t", 0, 0, None, b"", timestamp_ms=1_000_000), 2000.0)
    1000.0
    >>> record_clock(Record("t", 0, 0, None, b"", timestamp_ms=9_000_000), 2000.0)
    2000.0
    >>> record_clock(Record("t", 0, 0, None, b""), 2000.0) is None
    True
    """
    ts = getattr(record, "timestamp_ms", None)
    if ts is None:
        ts = getattr(record, "timestamp", None)  # kafka-python's ConsumerRecord
    if ts is None or ts < 0:  # no timestamp (Kafka: -1)
        return None
    return min(wall, ts / 1000.0)


def repair_clocks(join: Any, bound: float) -> int:
    """Clocks of a :class:`~.join.JoinStore` beyond ``bound`` restart from the next record
    read; returns how many values were repaired (its feedback and contexts clocks, its held
    feedback's clocks).

    A version before issue 31 let a heartbeat move the feedback clock to its event time,
    however far ahead (``1e300``), and kept it in the snapshot: every later decision then
    expired at once. No record's clock can be beyond the wall clock plus the allowed skew, so
    such a value is discarded; the resolved ids it made the join forget stay forgotten.

    >>> from streaming_dpbandit.stream.join import JoinStore
    >>> js = JoinStore(d=1, window=2.0, capacity=4, retention=20.0)
    >>> _ = js.advance_feedback_watermark(1e300)
    >>> repair_clocks(js, 2e9), js.feedback_watermark
    (1, -inf)
    """
    n = 0
    if join.feedback_watermark > bound:
        join.feedback_watermark = -math.inf
        n += 1
    if join.context_watermark > bound:
        join.context_watermark = -math.inf
        n += 1
    for held in join.early.values():
        for fb in held:
            if fb.watermark > bound:
                fb.watermark = -math.inf
                n += 1
    return n


def repair_snapshot_clocks(rt: Any, settings: Any, wall: float | None = None) -> None:
    """A bandit runtime loaded from a snapshot whose join clocks lie beyond ``wall`` (now, by
    default) + the service ``settings``' ``max_event_time_skew_s`` (a heartbeat from the
    future that a version before issue 31 accepted) restarts them from the next record, with
    one warning line. No bound without a skew (``null``: a simulated stream from the future is
    legitimate)."""
    skew = settings.max_event_time_skew_s
    now = time.time() if wall is None else wall
    if skew is not None and repair_clocks(rt.join, now + skew):
        log.warning(
            "bandit %s: the snapshot's join clock lies beyond the wall clock + "
            "max_event_time_skew_s (a heartbeat from the future); repaired: it restarts from "
            "the next record",
            rt.bandit_id,
            extra={"bandit": rt.bandit_id},
        )
