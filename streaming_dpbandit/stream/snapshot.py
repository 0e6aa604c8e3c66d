"""Snapshots: the complete service state, written atomically with owner-only permissions.

A snapshot holds every bandit's policy state (exact statistics and the secret noise key), the
pending joins, the next offset of every input partition and the releases not yet in the ledger.
It is written to a temporary file, fsync'd, renamed over the previous snapshot and the directory
is fsync'd, so a crash leaves either the old or the new snapshot, never a mix. The file carries
a SHA-256 of its payload; a damaged snapshot is an error, never silently replaced by a fresh
state (that would re-draw releases and lose rewards).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..utils.serialization import dumps, loads

__all__ = ["SnapshotCorruptError", "SnapshotStore"]

FORMAT = 1


class SnapshotCorruptError(RuntimeError):
    """The snapshot file exists but cannot be trusted."""


class SnapshotStore:
    """Atomic snapshot file ``<directory>/snapshot.json`` (mode 0600, directory 0700).

    >>> import tempfile
    >>> store = SnapshotStore(tempfile.mkdtemp())
    >>> store.load() is None
    True
    >>> store.save({"offsets": {"contexts/0": 12}}) > 0
    True
    >>> store.load()["offsets"]
    {'contexts/0': 12}
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    @property
    def path(self) -> Path:
        return self.directory / "snapshot.json"

    def _ensure_dir(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)

    def save(self, state: dict) -> int:
        """Write ``state`` atomically; returns the number of bytes written."""
        self._ensure_dir()
        payload = dumps(state)
        header = json.dumps({"format": FORMAT, "sha256": hashlib.sha256(payload).hexdigest()})
        data = header.encode() + b"\n" + payload
        tmp = self.directory / f".snapshot.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return len(data)

    def remove_stale_temps(self) -> int:
        """Delete temporary files of snapshots that a crash interrupted (``.snapshot.<pid>.tmp``:
        each a full snapshot, secret noise key included); returns how many. Call only while
        holding the state directory (the ledger lock): a running writer's file looks the same.

        >>> import tempfile, pathlib
        >>> store = SnapshotStore(tempfile.mkdtemp())
        >>> _ = (store.directory / ".snapshot.4242.tmp").write_bytes(b"partial")
        >>> store.remove_stale_temps(), list(store.directory.iterdir())
        (1, [])
        """
        n = 0
        if not self.directory.is_dir():
            return 0
        for tmp in self.directory.glob(".snapshot.*.tmp"):
            try:
                tmp.unlink()
                n += 1
            except FileNotFoundError:
                pass
        return n

    def load(self) -> dict | None:
        """The last snapshot, or None if there is none."""
        if not self.path.exists():
            return None
        raw = self.path.read_bytes()
        head, sep, payload = raw.partition(b"\n")
        try:
            meta = json.loads(head)
        except ValueError:
            raise SnapshotCorruptError(f"{self.path}: unreadable header") from None
        if not sep or meta.get("format") != FORMAT:
            raise SnapshotCorruptError(f"{self.path}: unknown snapshot format")
        if hashlib.sha256(payload).hexdigest() != meta.get("sha256"):
            raise SnapshotCorruptError(f"{self.path}: checksum mismatch (damaged snapshot)")
        return loads(payload)
