"""The service's topics in Kafka, read over a range given by offsets or timestamps.

Reads the ``contexts``, ``decisions`` and ``feedback`` topics (every partition) from ``start``
to ``end`` and merges their records in timestamp order (a k-way merge over bounded per-partition
buffers: partitions far ahead are paused), then joins them like the JSONL reader
(:class:`~.join.EventJoin`). Nothing is committed: the reader has no consumer group.

A bound is ``None`` (the beginning / the end offsets when the read starts), an ``int`` offset
applied to every partition, a dict ``{"topic:partition": offset}``, or a time — a
``datetime``, an ISO-8601 string or epoch seconds as a ``float`` — resolved per partition with
``offsets_for_times`` (``end`` is exclusive).
"""

from __future__ import annotations

import collections
import datetime as _dt
import time
from collections.abc import Iterator
from typing import Any, Unpack

from ...stream.kafka.seam import Reader
from ...stream.transport import TP
from ..errors import LogFormatError
from .join import JoinOptions, ServiceLogReader

__all__ = ["KafkaLogReader", "parse_bound"]

BUFFER = 20_000  # records buffered per partition before it is paused

#: A parsed range bound: none, one offset, offsets per ``topic:partition``, or epoch seconds.
ParsedBound = int | float | dict[str, int] | None
#: A range bound as given: parsed, an ISO-8601 / command-line string, or a ``datetime``.
Bound = ParsedBound | str | _dt.datetime


def _timestamp(rec: Any) -> int:
    """A polled record's timestamp in ms (kafka-python's ``timestamp``, else ``timestamp_ms``)."""
    ts = getattr(rec, "timestamp", None)
    if ts is None:
        ts = getattr(rec, "timestamp_ms", None)
    return -1 if ts is None else int(ts)


def parse_bound(text: str | None) -> ParsedBound:
    """A command-line bound: ``None``, an offset (``"1200"``), ``"topic:partition=offset,..."``
    or a time (ISO-8601, or epoch seconds with a decimal point or an ``s`` suffix).

    >>> parse_bound("1200"), parse_bound("t:0=5,t:1=7"), parse_bound("1700000000.5")
    (1200, {'t:0': 5, 't:1': 7}, 1700000000.5)
    >>> parse_bound("2024-01-01T00:00:00Z")
    1704067200.0
    """
    if text is None or text == "":
        return None
    text = text.strip()
    if "=" in text:
        out: dict[str, int] = {}
        for part in text.split(","):
            key, _, val = part.partition("=")
            try:
                out[key.strip()] = int(val)
            except ValueError:
                raise LogFormatError(
                    f"bad offset {part!r}: expected topic:partition=offset"
                ) from None
        return out
    if text.isdigit():
        return int(text)
    if text.endswith("s") and text[:-1].replace(".", "", 1).isdigit():
        return float(text[:-1])
    try:
        return float(text)
    except ValueError:
        pass
    try:
        dt = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise LogFormatError(
            f"bad range bound {text!r}: give an offset, topic:partition=offset pairs, "
            "epoch seconds or an ISO-8601 time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=_dt.timezone.utc)
    return dt.timestamp()


class KafkaLogReader(ServiceLogReader):
    """Read the service's topics from a Kafka broker.

    Parameters
    ----------
    bootstrap
        ``host:port[,host:port]``.
    topics
        Names of the (contexts, decisions, feedback) topics.
    start, end
        Range bounds (see the module docstring).
    bandit_id, arms, feedback_window, missing_reward, default_reward, max_pending, featuriser
        How events are joined (:class:`~.join.EventJoin`).
    idle_timeout
        Seconds without any record before an unfinished read fails.
    kafka
        ``kafka`` settings beyond the bootstrap servers (the client, security, ...).
    """

    format = "kafka"
    unit = "range"

    def __init__(
        self,
        bootstrap: str,
        topics: tuple[str, str, str] = (
            "dpbandit.contexts",
            "dpbandit.decisions",
            "dpbandit.feedback",
        ),
        start: Bound = None,
        end: Bound = None,
        idle_timeout: float = 20.0,
        kafka: dict[str, Any] | None = None,
        **join: Unpack[JoinOptions],
    ):
        self.bootstrap = bootstrap
        self.topics = tuple(topics)
        self.start = start
        self.end = end
        self._keep_join(join)
        self.idle_timeout = idle_timeout
        self.kafka = kafka or {}
        self._done = 0
        self._total: int | None = None
        self.counters: dict[str, int] = {}

    def where(self) -> str:
        return f"kafka://{self.bootstrap}"

    # -- kafka plumbing ----------------------------------------------------------------------
    def _consumer(self) -> Reader:
        from ...settings import KafkaSettings
        from ...stream.kafka.seam import kafka_client

        settings = KafkaSettings(bootstrap_servers=self.bootstrap, **self.kafka)
        try:
            return kafka_client(settings.client).reader(settings, read_committed=False)
        except Exception as err:  # the client's own connection error
            raise LogFormatError(f"{self.where()}: cannot connect ({err})") from None

    def _partitions(self, consumer: Reader) -> list[TP]:
        tps = []
        for topic in self.topics:
            parts = consumer.partitions(topic)
            if not parts:
                raise LogFormatError(f"{self.where()}: no topic {topic!r}")
            tps += [(topic, p) for p in parts]
        return tps

    def _resolve(
        self, consumer: Reader, tps: list[TP], bound: Bound, default: dict[TP, int]
    ) -> dict[TP, int]:
        if bound is None:
            return dict(default)
        if isinstance(bound, bool):
            raise LogFormatError("bad range bound")
        if isinstance(bound, int):  # the same offset in every partition (clamped later)
            return dict.fromkeys(tps, bound)
        if isinstance(bound, dict):
            out = dict(default)
            names = {f"{t}:{p}": (t, p) for t, p in tps}
            for key, off in bound.items():
                tp = names.get(key)
                if tp is None:
                    raise LogFormatError(
                        f"{self.where()}: {key!r} is not a partition of the log's topics"
                    )
                out[tp] = int(off)
            return out
        if isinstance(bound, _dt.datetime):
            bound = bound.timestamp()
        if isinstance(bound, (float, str)):
            ts = parse_bound(bound) if isinstance(bound, str) else bound
            if ts is None or isinstance(ts, (int, dict)):  # "" parses to None: no bound
                return self._resolve(consumer, tps, ts, default)
            found = consumer.offsets_for_times({tp: int(ts * 1000) for tp in tps})
            out = dict(default)
            out.update({tp: at for tp in tps if (at := found.get(tp)) is not None})
            return out
        raise LogFormatError(f"bad range bound {bound!r}")

    def _range(self, consumer: Reader) -> tuple[list[TP], dict[TP, int], dict[TP, int]]:
        tps = self._partitions(consumer)
        first = consumer.beginning_offsets(tps)
        last = consumer.end_offsets(tps)
        start = self._resolve(consumer, tps, self.start, first)
        end = self._resolve(consumer, tps, self.end, last)
        start = {tp: max(start[tp], first[tp]) for tp in tps}
        end = {tp: min(max(end[tp], start[tp]), last[tp]) for tp in tps}
        return tps, start, end

    def _messages(self) -> Iterator[tuple[str, bytes, str, int | None]]:
        """Records of the range, merged in timestamp order."""
        consumer = self._consumer()
        try:
            tps, start, end = self._range(consumer)
            self._total = sum(end[tp] - start[tp] for tp in tps)
            self._done = 0
            kind_of = dict(zip(self.topics, ("contexts", "decisions", "feedback")))
            live = [tp for tp in tps if start[tp] < end[tp]]
            consumer.assign(tps, start)
            consumer.pause([tp for tp in tps if tp not in live])
            buf: dict[TP, collections.deque[Any]] = {tp: collections.deque() for tp in live}
            fetched = {tp: start[tp] for tp in live}
            paused: set[TP] = set()
            last_data = time.monotonic()
            while live:
                # poll until every live partition has buffered records (or is complete)
                need = [tp for tp in live if not buf[tp] and fetched[tp] < end[tp]]
                if need:
                    got = False
                    for rec in consumer.poll(0.2, max_records=5000):
                        tp = (rec.topic, rec.partition)
                        if tp not in buf:
                            continue
                        if rec.offset < end[tp]:
                            buf[tp].append(rec)
                            got = True
                        fetched[tp] = min(max(fetched[tp], rec.offset + 1), end[tp])
                    for tp in live:
                        if len(buf[tp]) > BUFFER and tp not in paused:
                            consumer.pause([tp])
                            paused.add(tp)
                    if got:
                        last_data = time.monotonic()
                    elif time.monotonic() - last_data > self.idle_timeout:
                        missing = ", ".join(f"{t}:{p}" for t, p in need)
                        raise LogFormatError(
                            f"{self.where()}: no records from {missing} for "
                            f"{self.idle_timeout:g} s before the end of the range"
                        )
                    continue
                # k-way merge: emit the oldest head while every unfinished partition has one
                while True:
                    heads = [tp for tp in live if buf[tp]]
                    if not heads or any(not buf[tp] and fetched[tp] < end[tp] for tp in live):
                        break
                    tp = min(heads, key=lambda p: (_timestamp(buf[p][0]), p))
                    rec = buf[tp].popleft()
                    self._done += 1
                    if tp in paused and len(buf[tp]) < BUFFER // 2:
                        consumer.resume([tp])
                        paused.discard(tp)
                    yield (
                        kind_of[tp[0]],
                        rec.value,
                        f"{self.where()} {tp[0]}:{tp[1]}@{rec.offset}",
                        _timestamp(rec),
                    )
                live = [tp for tp in live if buf[tp] or fetched[tp] < end[tp]]
        finally:
            consumer.close()

    def progress(self) -> tuple[int, int | None, str]:
        return self._done, self._total, "record"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            {
                "bootstrap": self.bootstrap,
                "topics": list(self.topics),
                "start": _show(self.start),
                "end": _show(self.end),
                "bandit_id": self.bandit_id or getattr(self, "first_bandit", None),
                "join": self.counters,
            }
        )
        return out


def _show(bound: Bound) -> ParsedBound | str:
    if isinstance(bound, _dt.datetime):
        return bound.isoformat()
    return bound
