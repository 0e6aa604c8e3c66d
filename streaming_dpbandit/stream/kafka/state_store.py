"""Where task snapshots live: a local directory (one replica) or a compacted Kafka changelog
topic (several replicas; docs/scaling.md).

A snapshot larger than one Kafka message is written as chunks ``<task>/<seq>/<i>`` followed by a
head record ``<task>/head`` naming the sequence number, the chunk count and the SHA-256 of the
whole: a reader only ever sees complete snapshots (a head is written after all its chunks, in the
same transaction when the producer is transactional). Chunks of older sequence numbers are then
deleted with tombstones, so compaction keeps the topic at about one snapshot per task.
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...utils.serialization import dumps, loads
from ..snapshot import SnapshotCorruptError, SnapshotStore
from .compacted import COMPACTED, CompactedTopicClient

__all__ = ["COMPACTED", "DirectoryStore", "KafkaChangelogStore", "StateStore"]

log = logging.getLogger("streaming_dpbandit.state")

CHUNK_BYTES = 900_000


class StateStore(abc.ABC):
    """Snapshots by task name."""

    @abc.abstractmethod
    def load(self, task: str) -> dict | None: ...

    @abc.abstractmethod
    def save(self, task: str, state: dict) -> int: ...


class DirectoryStore(StateStore):
    """One atomic, owner-only snapshot file per task: ``<directory>/<task>/snapshot.json``.

    >>> import tempfile
    >>> store = DirectoryStore(tempfile.mkdtemp())
    >>> store.save("task-0", {"x": 1}) > 0, store.load("task-0"), store.load("task-1")
    (True, {'x': 1}, None)
    """

    def __init__(self, directory):
        self.directory = Path(directory)

    def _store(self, task: str) -> SnapshotStore:
        return SnapshotStore(self.directory / task)

    def load(self, task: str) -> dict | None:
        return self._store(task).load()

    def save(self, task: str, state: dict) -> int:
        return self._store(task).save(state)


@dataclass(eq=False)
class KafkaChangelogStore(CompactedTopicClient, StateStore):
    """Snapshots in a compacted topic, chunked, visible only once complete.

    Parameters
    ----------
    kafka, topic, send, partitions, client
        The changelog topic (created compacted: :func:`~.compacted.ensure_compacted_topic`),
        as for :class:`~.compacted.CompactedTopicClient`; ``send(topic, key, value,
        track=False)`` returns, when tracking, the handle of the record's offset.
    """

    _values: dict[str, bytes] = field(default_factory=dict, init=False, repr=False)
    _seq: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    #: Where each task's last snapshot starts: the handle of its first chunk (the producer's
    #: ``offset_of`` reads its offset once flushed).
    last_start: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    # -- reading ----------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the changelog from where this store last stopped to its current end."""

        def on_message(key, value):
            k = key.decode()
            if value is None:
                self._values.pop(k, None)
            else:
                self._values[k] = value

        self.read_new(on_message)

    def load(self, task: str, refresh: bool = True) -> dict | None:
        if refresh:
            self.refresh()
        head = self._values.get(f"{task}/head")
        if head is None:
            return None
        meta = json.loads(head)
        chunks = []
        for i in range(int(meta["chunks"])):
            part = self._values.get(f"{task}/{meta['seq']}/{i}")
            if part is None:
                raise SnapshotCorruptError(f"changelog {self.topic}: chunk {i} of {task} missing")
            chunks.append(part)
        payload = b"".join(chunks)
        if hashlib.sha256(payload).hexdigest() != meta["sha256"]:
            raise SnapshotCorruptError(f"changelog {self.topic}: checksum mismatch for {task}")
        self._seq[task] = int(meta["seq"])
        return loads(payload)

    # -- writing ----------------------------------------------------------------------------
    def save(self, task: str, state: dict, send=None) -> int:
        """Write ``state`` as ``task``'s next snapshot with ``send`` (default: the store's)."""
        send = send or self.send
        if send is None:
            raise RuntimeError("KafkaChangelogStore.save needs a producer (send=...)")
        payload = dumps(state)
        seq = self._seq.get(task, 0) + 1
        chunks = [payload[i : i + CHUNK_BYTES] for i in range(0, len(payload), CHUNK_BYTES)] or [
            b""
        ]
        for i, part in enumerate(chunks):
            key = f"{task}/{seq}/{i}".encode()
            if i == 0:  # where this snapshot starts
                self.last_start[task] = send(self.topic, key, part, track=True)
            else:
                send(self.topic, key, part)
        head = {"seq": seq, "chunks": len(chunks), "sha256": hashlib.sha256(payload).hexdigest()}
        send(self.topic, f"{task}/head".encode(), json.dumps(head).encode())
        old = self._seq.get(task)
        if old is not None:  # tombstones for the previous snapshot's chunks
            prev = self._values.get(f"{task}/head")
            n = json.loads(prev)["chunks"] if prev else 0
            for i in range(n):
                send(self.topic, f"{task}/{old}/{i}".encode(), None)
        self._seq[task] = seq
        self._values[f"{task}/head"] = json.dumps(head).encode()
        return len(payload)
