"""The gateway's write-ahead log: every record it owes the learner, on disk before it answers.

The gateway acknowledges a Rank, a Reward or an Activate only after the record it implies is
written here (``os.write`` into the segment file: a kill -9 of the process cannot lose it, the
kernel holds it); with ``fsync`` every acknowledgement also waits for the data to reach the
disk (a group commit: one ``fsync`` for all the records written meanwhile), which a machine
crash cannot lose either. The outlet (the Kafka forwarder, or the embedded learner's transport)
reads the log in order and reports how far it has delivered; a segment is deleted once every
record in it is delivered and older than the retention (the records of the retention window
rebuild the gateway's event table after a restart).

A segment is ``NNNNNNNNNNNNNNNNNNNN.wal`` (the first record's sequence number). A record is
framed as ``<length u32><crc32 u32>`` then its body: kind (u8), sequence number (u64), time
(f64), topic offset (i64, −1 for records not for a topic), then the event id (u16 length +
UTF-8), the value (u32 length + bytes: the message produced to the topic) and ``extra`` (u32
length + bytes: what the event table needs). A torn or corrupt tail — a write cut by a crash of
the machine — is truncated at open; a record is never half-visible.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

__all__ = ["Entry", "Kind", "WriteAheadLog", "read_log"]


class Kind:
    """Record kinds (the u8 of a record)."""

    DECISION = 1  #: a decision, for the decisions topic
    DEFERRED = 2  #: a decision with deferred activation: for no topic until activated
    ACTIVATE = 3  #: the activation of a deferred decision: the decision, for the decisions topic
    REWARD = 4  #: a reward, for the feedback topic
    HEARTBEAT = 5  #: a feedback watermark heartbeat, for the feedback topic


#: the topic of each kind: "decisions", "feedback" or None
TOPIC_OF = {
    Kind.DECISION: "decisions",
    Kind.DEFERRED: None,
    Kind.ACTIVATE: "decisions",
    Kind.REWARD: "feedback",
    Kind.HEARTBEAT: "feedback",
}

_FRAME = struct.Struct("<II")
_HEAD = struct.Struct("<BQdq")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


@dataclasses.dataclass(slots=True)
class Entry:
    """One record of the log."""

    kind: int
    event_id: str
    value: bytes
    extra: bytes = b""
    time: float = 0.0
    seq: int = -1
    offset: int = -1  #: position among the records of its topic (−1: no topic)

    @property
    def topic(self) -> str | None:
        return TOPIC_OF[self.kind]

    def encode(self) -> bytes:
        eid = self.event_id.encode()
        body = b"".join(
            (
                _HEAD.pack(self.kind, self.seq, self.time, self.offset),
                _U16.pack(len(eid)),
                eid,
                _U32.pack(len(self.value)),
                self.value,
                _U32.pack(len(self.extra)),
                self.extra,
            )
        )
        return _FRAME.pack(len(body), zlib.crc32(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> Entry:
        kind, seq, t, off = _HEAD.unpack_from(body, 0)
        p = _HEAD.size
        (n,) = _U16.unpack_from(body, p)
        p += 2
        eid = body[p : p + n].decode()
        p += n
        (n,) = _U32.unpack_from(body, p)
        p += 4
        value = body[p : p + n]
        p += n
        (n,) = _U32.unpack_from(body, p)
        p += 4
        extra = body[p : p + n]
        return cls(kind, eid, bytes(value), bytes(extra), t, seq, off)


class WriteAheadLog:
    """Append-only segment files of :class:`Entry` records (module docstring).

    Parameters
    ----------
    directory
        Where the segments live (created).
    fsync
        Make :meth:`wait_durable` wait for ``fsync`` (a machine crash cannot lose an
        acknowledged record); otherwise records are durable against a crash of the process
        only, and are synced every ``sync_interval_s`` in the background.
    segment_bytes
        A new segment starts past this size.
    retention_s
        Delivered segments younger than this are kept (they rebuild the event table).
    """

    def __init__(
        self,
        directory: str | Path,
        fsync: bool = True,
        segment_bytes: int = 64 << 20,
        retention_s: float = 600.0,
        sync_interval_s: float = 0.05,
    ):
        self.directory = Path(directory)
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self.retention_s = retention_s
        self.sync_interval_s = sync_interval_s
        #: called with every record appended, under the log's lock (so in the log's order)
        self.on_append: Callable[[Entry], None] | None = None

    # -- opening --------------------------------------------------------------------------------
    def open(self) -> list[Entry]:
        """Open the log; returns every record of the retained segments, in order."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.synced = threading.Condition(threading.Lock())
        self.segments: list[tuple[int, Path, float]] = []  # (first seq, path, newest time)
        entries: list[Entry] = []
        for path in sorted(self.directory.glob("*.wal")):
            got = self._read_segment(path)
            if got:
                self.segments.append((got[0].seq, path, got[-1].time))
                entries.extend(got)
            else:
                path.unlink()
        self.next_seq = entries[-1].seq + 1 if entries else 0
        self.next_offset = {"decisions": 0, "feedback": 0}
        for e in entries:
            if e.topic is not None:
                self.next_offset[e.topic] = e.offset + 1
        self.last_time = entries[-1].time if entries else 0.0
        self.written_seq = self.synced_seq = self.next_seq - 1
        self._start_segment()
        self._stop = threading.Event()
        self._syncer = threading.Thread(target=self._sync_loop, name="wal-sync", daemon=True)
        self._syncer.start()
        return entries

    def _read_segment(self, path: Path) -> list[Entry]:
        data = path.read_bytes()
        out, p = _whole_records(data)
        if p < len(data):  # a torn tail: cut it, so that new records follow a whole one
            with open(path, "r+b") as f:
                f.truncate(p)
                os.fsync(f.fileno())
        return out

    def _start_segment(self) -> None:
        path = self.directory / f"{self.next_seq:020d}.wal"
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = os.fstat(self.fd).st_size
        if not self.segments or self.segments[-1][1] != path:
            self.segments.append((self.next_seq, path, self.last_time))
        _fsync_dir(self.directory)

    # -- appending ------------------------------------------------------------------------------
    def append(
        self,
        kind: int,
        event_id: str,
        make: Callable[[float], tuple[bytes, bytes]],
        now: float | None = None,
    ) -> Entry:
        """Write one record; returns it. Durable against a crash of the process on return (see
        :meth:`wait_durable` for the disk).

        ``make(t)`` returns the record's (value, extra) for its time ``t``: the log's clock
        (wall time, never behind a record already written), so that the records of a topic
        carry non-decreasing event times — a watermark heartbeat stays a true promise.
        """
        with self.lock:
            t = max(time.time() if now is None else now, self.last_time)
            value, extra = make(t)
            entry = Entry(kind, event_id, value, extra, t, self.next_seq)
            topic = entry.topic
            if topic is not None:
                entry.offset = self.next_offset[topic]
                self.next_offset[topic] += 1
            raw = entry.encode()
            if self.size + len(raw) > self.segment_bytes and self.size:
                os.fsync(self.fd)  # (the syncer only ever syncs the current segment)
                os.close(self.fd)
                self._start_segment()
            written = os.write(self.fd, raw)
            while written < len(raw):  # (a regular file writes whole; be safe)
                written += os.write(self.fd, raw[written:])
            self.size += len(raw)
            self.last_time = t
            self.next_seq += 1
            self.written_seq = entry.seq
            first, path, _ = self.segments[-1]
            self.segments[-1] = (first, path, t)
            if self.on_append is not None:
                self.on_append(entry)
            return entry

    def now(self) -> float:
        """The log's clock: wall time, never behind a record already written."""
        return max(time.time(), self.last_time)

    # -- durability ------------------------------------------------------------------------------
    def wait_durable(self, seq: int, timeout_s: float = 10.0) -> bool:
        """Block until record ``seq`` is on disk (``fsync``); immediate without ``fsync``."""
        if not self.fsync:
            return True
        deadline = time.monotonic() + timeout_s
        with self.synced:
            while self.synced_seq < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.synced.notify_all()
                self.synced.wait(min(left, self.sync_interval_s))
        return True

    def _sync_loop(self) -> None:
        while not self._stop.is_set():
            with self.synced:
                if self.synced_seq >= self.written_seq:
                    self.synced.wait(self.sync_interval_s)
            self.sync()

    def sync(self) -> None:
        """``fsync`` what is written (one call covers every record written before it)."""
        with self.lock:
            target = self.written_seq
            if target <= self.synced_seq:
                return
            fd = os.dup(self.fd)  # (a rollover may close the segment's own descriptor)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with self.synced:
            self.synced_seq = max(self.synced_seq, target)
            self.synced.notify_all()

    # -- retention -------------------------------------------------------------------------------
    def release(self, delivered_seq: int, now: float | None = None) -> int:
        """Every record up to ``delivered_seq`` is delivered: delete the segments wholly before
        it and older than the retention; returns how many were deleted."""
        now = time.time() if now is None else now
        gone = 0
        with self.lock:
            while len(self.segments) > 1:
                _, path, newest = self.segments[0]
                next_first = self.segments[1][0]
                if next_first - 1 > delivered_seq or now - newest < self.retention_s:
                    break
                path.unlink(missing_ok=True)
                self.segments.pop(0)
                gone += 1
        return gone

    def close(self) -> None:
        self._stop.set()
        with self.synced:
            self.synced.notify_all()
        self._syncer.join(timeout=5)
        self.sync()
        with self.lock:
            os.close(self.fd)


def _whole_records(data: bytes) -> tuple[list[Entry], int]:
    """The whole records at the start of a segment's bytes, and where they end."""
    out, p = [], 0
    while p + _FRAME.size <= len(data):
        n, crc = _FRAME.unpack_from(data, p)
        body = data[p + _FRAME.size : p + _FRAME.size + n]
        if len(body) < n or zlib.crc32(body) != crc:
            break
        out.append(Entry.decode(body))
        p += _FRAME.size + n
    return out, p


def read_log(directory: str | Path) -> list[Entry]:
    """Every whole record of a log directory, in order, read only (a log in use included:
    nothing is truncated or created) — for inspection and tests."""
    out: list[Entry] = []
    for path in sorted(Path(directory).glob("*.wal")):
        out += _whole_records(path.read_bytes())[0]
    return out


def _fsync_dir(directory: Path) -> None:
    """Make a new segment's directory entry durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
