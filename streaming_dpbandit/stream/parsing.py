"""Reading one input message: the single context parser of every service shape.

The service, a group task, a broadcast learner and a decision replica all read a context-like
message the same way — size, schema, known bandit, event time within the allowed skew, then the
feature rows — and differ only in the message's schema and in how its rows are made (a context
encodes its arms; a learner's decision carries the chosen arm's row). :func:`parse_context` is
that one reading; its result is a ``(runtime, Pending)`` pair or a :class:`BadInput` that is
*returned*, never raised, and carries neither a traceback nor the error it replaced (a cached
bad message would otherwise hold the parser's frames, and through them the queued events, in a
reference cycle).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import numpy as np
from pydantic import ValidationError

from .binary_context import MAGIC, BadBinaryContext, BinaryContext, decode_binary_context
from .clock import record_clock
from .schemas import ContextEvent

__all__ = [
    "AnyContext",
    "BadInput",
    "ContextParser",
    "Pending",
    "first_error",
    "parse_context",
    "too_late",
    "too_old",
    "unknown_bandit",
    "unreadable",
    "validation_reason",
]


class BadInput(ValueError):
    """A message that goes to the dead-letter topic, with a machine-readable reason."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


def unreadable(err: BaseException) -> BadInput:
    """The dead-letter reason of a message whose reading raised an unforeseen error.

    No input may stop the service: whatever reading one message raises, that message goes to
    the dead-letter topic as ``unreadable`` and the loop goes on. The detail names the error's
    type only (its text could quote the message's values).

    >>> unreadable(OverflowError("int too large")).detail
    'OverflowError while reading the message'
    """
    return BadInput("unreadable", f"{type(err).__name__} while reading the message")


#: A validated context event: read from JSON, or from the binary form (``binary_context.py``).
AnyContext = ContextEvent | BinaryContext


@dataclasses.dataclass(slots=True)
class Pending:
    """A validated context event waiting in a partition queue for its decision."""

    event: AnyContext
    X: np.ndarray  # (K, d)
    arm_ids: list[str]
    received: float  # perf_counter when polled
    #: the stream clock of its record (:func:`record_clock`), or its event time for a record
    #: without a timestamp (None: not known, read as its event time)
    clock: float | None = None


def validation_reason(err: ValidationError, default: str) -> str:
    """Dead-letter reason of a validation error.

    >>> from streaming_dpbandit.stream.schemas import ContextEvent
    >>> try:
    ...     ContextEvent.model_validate_json(b"{")
    ... except ValidationError as err:
    ...     validation_reason(err, "invalid_event"), first_error(err)[:12]
    ('malformed_json', 'Invalid JSON')
    """
    kind = err.errors()[0]["type"]
    if kind in ("json_invalid", "json_type"):
        return "malformed_json"
    if kind == "finite_number":
        return "non_finite_number"
    return default


def first_error(err: ValidationError) -> str:
    """The first error of a validation error, as ``location: message``."""
    e = err.errors()[0]
    loc = ".".join(str(x) for x in e["loc"])
    return f"{loc}: {e['msg']}" if loc else e["msg"]


def unknown_bandit(bandit_id: str) -> BadInput:
    """The dead letter of a message naming a bandit that is not configured."""
    return BadInput("unknown_bandit", f"bandit {bandit_id!r} is not configured")


def event_time_limit(record: object, skew: float | None, wall: float) -> float:
    """The latest event time accepted for ``record``: the stream clock plus ``skew``.

    The stream clock is the record's timestamp, or the wall clock where that is earlier
    (:func:`record_clock`), so a replayed past is bounded by its own clock: a context stamped a
    day ahead of the records around it stalls nothing even when the whole stream lies in the
    past. Records without a timestamp (``--file`` lines without one) are bounded by the wall
    clock only.

    >>> from streaming_dpbandit.stream.transport import Record
    >>> event_time_limit(Record("t", 0, 0, None, b"", timestamp_ms=1_000_000), 50.0, 2000.0)
    1050.0
    >>> event_time_limit(Record("t", 0, 0, None, b""), 50.0, 2000.0)
    2050.0
    """
    if skew is None:
        return math.inf
    clock = record_clock(record, wall)
    return (wall if clock is None else clock) + skew


def too_late(event_time: float, time_limit: float, skew: float | None) -> BadInput:
    """The dead letter of an event stamped beyond ``time_limit`` (:func:`event_time_limit`).

    One event from the future would stall its bandit: its decision stays pending (and blocks
    the next release) until the stream clock reaches its time.

    >>> too_late(1060.0, 1050.0, 50.0).detail
    'event_time is 60 s ahead of the stream clock (max_event_time_skew_s = 50)'
    """
    ahead = event_time - time_limit + (skew or 0.0)
    return BadInput(
        "event_time_out_of_range",
        f"event_time is {ahead:.6g} s ahead of the stream clock (max_event_time_skew_s = {skew:g})",
    )


def too_old(event_time: float, clock: float | None, lag: float | None) -> BadInput | None:
    """The dead letter of an event stamped more than ``lag`` seconds before its record's
    stream clock (``clock``, :func:`record_clock`); None when it is within the bound, or when
    there is no bound (``lag`` None) or no record clock.

    >>> too_old(0.0, 1_760_000_000.0, 86_400.0).detail
    'event_time is 1.76e+09 s behind the stream clock (max_event_time_lag_s = 86400)'
    >>> too_old(1_759_990_000.0, 1_760_000_000.0, 86_400.0) is None
    True
    """
    if clock is None or lag is None or event_time >= clock - lag:
        return None
    return BadInput(
        "event_time_out_of_range",
        f"event_time is {clock - event_time:.6g} s behind the stream clock "
        f"(max_event_time_lag_s = {lag:g})",
    )


def context_rows(rt, event) -> tuple[np.ndarray, list[str]]:
    """A context's feature rows (one per arm) and arm ids."""
    return rt.encode(event)


def parse_context(
    value: bytes | None,
    received: float,
    bandits: Mapping,
    *,
    max_bytes: int,
    time_limit: float,
    skew: float | None,
    clock: float | None = None,
    lag: float | None = None,
    schema=ContextEvent,
    invalid: str = "invalid_event",
    rows: Callable = context_rows,
    missing: Callable[[str], BadInput] = unknown_bandit,
):
    """``(runtime, Pending)`` of one context-like message, or a :class:`BadInput` (returned).

    Parameters
    ----------
    value
        The message's bytes (``None``: a tombstone).
    received
        ``perf_counter()`` when it was polled (for the decision latency).
    bandits
        The runtimes by bandit id.
    max_bytes, time_limit, skew
        The size bound, the latest event time accepted now and the skew it allows.
    clock, lag
        The record's stream clock (:func:`record_clock`; None: the record has no timestamp)
        and how far behind it an event time may be (None: no bound).
    schema, invalid
        The message's pydantic model and the reason of a message that does not fit it.
    rows
        ``rows(runtime, message) -> (X, arm_ids)``; may raise :class:`BadInput`.
    missing
        ``missing(bandit_id) -> BadInput`` for a bandit not in ``bandits``.

    Examples
    --------
    >>> parse_context(None, 0.0, {}, max_bytes=10, time_limit=0.0, skew=None).reason
    'malformed_json'
    >>> parse_context(b"x" * 11, 0.0, {}, max_bytes=10, time_limit=0.0, skew=None).reason
    'oversized'
    """
    try:
        if value is None:  # a tombstone
            raise BadInput("malformed_json", "the message has no value")
        if len(value) > max_bytes:
            raise BadInput("oversized", f"{len(value)} bytes > {max_bytes}")
        if schema is ContextEvent and value.startswith(MAGIC):  # the binary form
            try:
                msg = decode_binary_context(value)
            except BadBinaryContext as err:
                raise BadInput(err.reason, err.detail) from None
        else:
            try:
                msg = schema.model_validate_json(value)
            except ValidationError as err:
                raise BadInput(validation_reason(err, invalid), first_error(err)) from None
        rt = bandits.get(msg.bandit_id)
        if rt is None:
            raise missing(msg.bandit_id)
        if msg.event_time > time_limit:
            raise too_late(msg.event_time, time_limit, skew)
        old = too_old(msg.event_time, clock, lag)
        if old is not None:
            raise old
        X, ids = rows(rt, msg)
        return rt, Pending(msg, X, ids, received, msg.event_time if clock is None else clock)
    except BadInput as bad:
        # returned without its traceback and the validation error it replaced: their frames
        # hold this one, which holds it (and, through the callers' frames, their queued
        # events): a reference cycle per bad message that only the collector frees
        bad.__context__ = None
        return bad.with_traceback(None)
    except Exception as err:  # unforeseen: no input may stop the loop
        return unreadable(err)


@dataclasses.dataclass(frozen=True)
class ContextParser:
    """What a service reads on its contexts topic: the schema, the reason of a message that
    does not fit it, and how rows are made (see :func:`parse_context`). The default reads
    :class:`~streaming_dpbandit.stream.schemas.ContextEvent`; a broadcast learner reads
    decisions (``stream/scaling/broadcast.py``)."""

    schema: type = ContextEvent
    invalid: str = "invalid_event"
    rows: Callable = context_rows
