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

from ..errors import LogFormatError
from .join import JoinOptions, ServiceLogReader

__all__ = ["KafkaLogReader", "parse_bound"]

BUFFER = 20_000  # records buffered per partition before it is paused

#: A parsed range bound: none, one offset, offsets per ``topic:partition``, or epoch seconds.
ParsedBound = int | float | dict[str, int] | None
#: A range bound as given: parsed, an ISO-8601 / command-line string, or a ``datetime``.
Bound = ParsedBound | str | _dt.datetime


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
    consumer_config
        Extra kafka-python ``KafkaConsumer`` settings (security, ...).
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
        consumer_config: dict[str, Any] | None = None,
        **join: Unpack[JoinOptions],
    ):
        self.bootstrap = bootstrap
        self.topics = tuple(topics)
        self.start = start
        self.end = end
        self._keep_join(join)
        self.idle_timeout = idle_timeout
        self.consumer_config = consumer_config or {}
        self._done = 0
        self._total: int | None = None
        self.counters: dict[str, int] = {}

    def where(self) -> str:
        return f"kafka://{self.bootstrap}"

    # -- kafka plumbing ----------------------------------------------------------------------
    def _consumer(self) -> Any:  # a kafka.KafkaConsumer (kafka-python is untyped)
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        try:
            return KafkaConsumer(
                bootstrap_servers=self.bootstrap.split(","),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                reconnect_backoff_max_ms=1000,
                request_timeout_ms=30000,
                **self.consumer_config,
            )
        except KafkaError as err:
            raise LogFormatError(f"{self.where()}: cannot connect ({err})") from None

    def _partitions(self, consumer: Any) -> list[Any]:
        from kafka import TopicPartition

        tps = []
        for topic in self.topics:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                raise LogFormatError(f"{self.where()}: no topic {topic!r}")
            tps += [TopicPartition(topic, p) for p in sorted(parts)]
        return tps

    def _resolve(
        self, consumer: Any, tps: list[Any], bound: Bound, default: dict[Any, int]
    ) -> dict[Any, int]:
        if bound is None:
            return dict(default)
        if isinstance(bound, bool):
            raise LogFormatError("bad range bound")
        if isinstance(bound, int):  # the same offset in every partition (clamped later)
            return dict.fromkeys(tps, bound)
        if isinstance(bound, dict):
            out = dict(default)
            names = {f"{tp.topic}:{tp.partition}": tp for tp in tps}
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
            return {
                tp: (found[tp].offset if found.get(tp) is not None else default[tp]) for tp in tps
            }
        raise LogFormatError(f"bad range bound {bound!r}")

    def _range(self, consumer: Any) -> tuple[list[Any], dict[Any, int], dict[Any, int]]:
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
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, start[tp])
            consumer.pause(*[tp for tp in tps if tp not in live])
            buf: dict[Any, collections.deque[Any]] = {tp: collections.deque() for tp in live}
            fetched = {tp: start[tp] for tp in live}
            paused: set[Any] = set()
            last_data = time.monotonic()
            while live:
                # poll until every live partition has buffered records (or is complete)
                need = [tp for tp in live if not buf[tp] and fetched[tp] < end[tp]]
                if need:
                    batches = consumer.poll(timeout_ms=200, max_records=5000)
                    got = False
                    for tp, recs in batches.items():
                        if tp not in buf:
                            continue
                        for rec in recs:
                            if rec.offset >= end[tp]:
                                break
                            buf[tp].append(rec)
                            fetched[tp] = rec.offset + 1
                            got = True
                        if recs and recs[-1].offset + 1 >= end[tp]:
                            fetched[tp] = max(fetched[tp], end[tp])
                        if len(buf[tp]) > BUFFER and tp not in paused:
                            consumer.pause(tp)
                            paused.add(tp)
                    if got:
                        last_data = time.monotonic()
                    elif time.monotonic() - last_data > self.idle_timeout:
                        missing = ", ".join(f"{tp.topic}:{tp.partition}" for tp in need)
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
                    tp = min(heads, key=lambda p: (buf[p][0].timestamp, p.topic, p.partition))
                    rec = buf[tp].popleft()
                    self._done += 1
                    if tp in paused and len(buf[tp]) < BUFFER // 2:
                        consumer.resume(tp)
                        paused.discard(tp)
                    yield (
                        kind_of[tp.topic],
                        rec.value,
                        f"{self.where()} {tp.topic}:{tp.partition}@{rec.offset}",
                        rec.timestamp,
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
