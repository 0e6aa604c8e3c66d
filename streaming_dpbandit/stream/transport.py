"""Transports: how the service reads its input topics and writes its output topics.

The service loop only sees :class:`Transport`, a :class:`RecordSource` and a :class:`RecordSink`:
``poll`` input records (in partition order), ``send`` output records, ``flush`` them durably (a
flush raises when a record was not written), ``pause``/``resume`` partitions, and start from
given offsets. :class:`InProcessTransport` runs the same loop without a broker, over a
:class:`Source` (a simulated stream or a JSONL file); the Kafka transport is in
``kafka/transport.py``, over the client seam of ``kafka/seam.py``.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
from typing import Any, BinaryIO, Protocol

__all__ = [
    "InProcessTransport",
    "Record",
    "RecordSink",
    "RecordSource",
    "Source",
    "Transport",
]

TP = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One message of a topic partition.

    The service reads only ``topic``, ``partition``, ``offset``, ``key`` and ``value``; the
    Kafka transport hands on kafka-python's ``ConsumerRecord``, which has the same fields.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int | None = None


#: A partition's polled records waiting to be processed, with ``perf_counter()`` at the poll.
Queue = collections.deque[tuple[Record, float]]


class RecordSource(abc.ABC):
    """Where input records come from: a consumer of the input topics' partitions."""

    @abc.abstractmethod
    def open(self, start_offsets: dict[TP, int]) -> None:
        """Start consuming the input topics; partitions in ``start_offsets`` resume there."""

    @abc.abstractmethod
    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        """Next input records, each partition in offset order."""

    def pause(self, tp: TP) -> None:  # noqa: B027 - optional
        """Stop returning records of ``tp`` until :meth:`resume`."""

    def resume(self, tp: TP) -> None:  # noqa: B027 - optional
        """Return records of ``tp`` again."""

    def lag(self) -> dict[TP, int]:
        """Records not yet consumed, per input partition (when known)."""
        return {}

    def assigned(self) -> set[TP]:
        """Input partitions currently assigned to this process."""
        return set()

    @property
    def exhausted(self) -> bool:
        """True when a finite input has been fully consumed (never for Kafka)."""
        return False

    def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


class RecordSink(abc.ABC):
    """Where output records go."""

    @abc.abstractmethod
    def send(self, topic: str, key: bytes | None, value: bytes) -> Any:
        """Queue one output record."""

    def send_many(self, topic: str, key: bytes | None, values: list[bytes]) -> None:
        """Queue output records of one key, in order (the decisions of a decided chunk)."""
        for value in values:
            self.send(topic, key, value)

    @abc.abstractmethod
    def flush(self) -> None:
        """Block until every queued output record is durably written; raise if one was not
        (the snapshot that would imply it must not be written)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release resources."""


class Transport(RecordSource, RecordSink):
    """What the service loop needs from a message bus: a source of input records and a sink
    for output records (the Kafka transport composes a client's consumer and producer,
    ``kafka/transport.py``; :class:`InProcessTransport` is both without a broker)."""

    def close(self) -> None:
        """Release resources."""


class Emit(Protocol):
    """How a :class:`Source` hands a record to the in-process transport."""

    def __call__(
        self, topic: str, key: bytes | None, value: bytes, timestamp_ms: int | None = None, /
    ) -> None: ...


class Source(abc.ABC):
    """A finite or generated input for :class:`InProcessTransport`."""

    topics: tuple[str, str]  # (contexts, feedback)

    @abc.abstractmethod
    def generate(self, emit: Emit, max_new: int) -> bool:
        """Call ``emit(topic, key, value)`` (or ``emit(topic, key, value, timestamp_ms)``, a
        record timestamp as Kafka's) for up to about ``max_new`` new input records; return
        False when the input is over."""

    def on_output(self, topic: str, value: bytes) -> None:  # noqa: B027 - optional
        """Observe a record the service wrote (the simulation answers decisions with rewards)."""

    def summary(self) -> dict[str, Any]:
        return {}


class InProcessTransport(Transport):
    """Topics as in-memory logs, fed by a :class:`Source`; outputs kept in memory.

    Parameters
    ----------
    source
        Produces the input records.
    keep_outputs
        Keep every output record (tests); otherwise only counts are kept.
    """

    def __init__(self, source: Source, keep_outputs: bool = False):
        self.source = source
        self.keep_outputs = keep_outputs
        self.tees: dict[str, BinaryIO] = {}

    def tee(self, topic: str, sink: BinaryIO) -> None:
        """Also write every record sent to ``topic`` to ``sink``, one value per line (what
        ``serve --decisions-out`` and ``--dead-letters-out`` show); flushed with :meth:`flush`."""
        self.tees[topic] = sink

    def open(self, start_offsets: dict[TP, int]) -> None:
        self.log: dict[TP, list[Record]] = {(t, 0): [] for t in self.source.topics}
        self.base: dict[TP, int] = {tp: 0 for tp in self.log}  # offset of log[tp][0]
        self.position: dict[TP, int] = {tp: int(start_offsets.get(tp, 0)) for tp in self.log}
        self.started_at = dict(self.position)
        self.paused: set[TP] = set()
        self.outputs: dict[str, list[bytes]] = {}
        self.output_counts: dict[str, int] = {}
        self._live = True

    def _emit(
        self, topic: str, key: bytes | None, value: bytes, timestamp_ms: int | None = None
    ) -> None:
        tp = (topic, 0)
        records = self.log[tp]
        records.append(Record(topic, 0, self.base[tp] + len(records), key, value, timestamp_ms))

    def _unread(self, tp: TP) -> int:
        return self.base[tp] + len(self.log[tp]) - self.position[tp]

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        active = [tp for tp in self.log if tp not in self.paused]
        # one step of the source per poll: a simulated source advances its clock per step and
        # relies on the service having answered the previous step's contexts
        if self._live and sum(self._unread(tp) for tp in active) < max_records:
            self._live = self.source.generate(self._emit, max_records)
        # deliver a generated step whole: the source expects answers to it before its next step
        max_records = max(max_records, sum(self._unread(tp) for tp in active))
        out: list[Record] = []
        for tp in active:
            start = self.position[tp] - self.base[tp]
            take = self.log[tp][start : start + max_records - len(out)]
            out.extend(take)
            self.position[tp] += len(take)
            # forget what was consumed: the in-process log stays bounded
            drop = min(self.position[tp] - self.base[tp], len(self.log[tp]))
            if drop > 4096:
                del self.log[tp][:drop]
                self.base[tp] += drop
        return out

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.output_counts[topic] = self.output_counts.get(topic, 0) + 1
        if self.keep_outputs:
            self.outputs.setdefault(topic, []).append(value)
        sink = self.tees.get(topic)
        if sink is not None:
            sink.write(value + b"\n")
        self.source.on_output(topic, value)

    def flush(self) -> None:
        for sink in self.tees.values():
            sink.flush()

    def pause(self, tp: TP) -> None:
        self.paused.add(tp)

    def resume(self, tp: TP) -> None:
        self.paused.discard(tp)

    def lag(self) -> dict[TP, int]:
        return {tp: self._unread(tp) for tp in self.log}

    def consumed(self) -> int:
        """Input records delivered since :meth:`open` (a restart resumes past those before)."""
        return sum(max(0, self.position[tp] - self.started_at[tp]) for tp in self.log)

    def assigned(self) -> set[TP]:
        return set(self.log)

    @property
    def exhausted(self) -> bool:
        # (a start offset past the end of a finite input leaves a negative count: exhausted too,
        # see :meth:`overrun`)
        return not self._live and all(self._unread(tp) <= 0 for tp in self.log)

    def overrun(self) -> dict[TP, tuple[int, int]]:
        """Partitions whose start offset lay past the end of the finished input:
        ``{tp: (start offset, records in the input)}`` (e.g. a state directory written from a
        longer file)."""
        if self._live:
            return {}
        return {
            tp: (self.position[tp], self.base[tp] + len(self.log[tp]))
            for tp in self.log
            if self._unread(tp) < 0
        }
