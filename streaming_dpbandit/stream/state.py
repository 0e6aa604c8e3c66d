"""Where a service keeps what it must not lose: snapshots and the privacy ledger.

:class:`StateBackend` is the small interface the service loop writes through (the way a
stream processor's state stores implement one abstract store); two implement it:

* :class:`DirectoryState` — one service: ``snapshot.json`` and ``ledger.jsonl`` in the state
  directory, the ledger checked against the snapshot's mark at start;
* ``TaskState`` (``stream/scaling/group.py``) — a group task: the snapshot in a compacted Kafka
  topic, ledger records and input offsets committed in the same transaction.
"""

from __future__ import annotations

import abc
import json
import logging
import os
from pathlib import Path
from typing import Protocol

from ..privacy.ledger import Ledger, LedgerCorruptError, ReleaseRecord
from .errors import ServiceStartError
from .snapshot import SnapshotCorruptError, SnapshotStore
from .transport import TP

__all__ = ["REFIT_FAILURES_FILE", "DirectoryState", "StateBackend", "tp_key"]

log = logging.getLogger("streaming_dpbandit.service")

#: Failed model updates per bandit, kept across restarts for ``dpbandit_refit_failures_total``.
REFIT_FAILURES_FILE = "refit-failures.json"


def tp_key(tp: TP) -> str:
    """A snapshot's key of an input partition.

    >>> tp_key(("dpbandit.contexts", 3))
    'dpbandit.contexts|3'
    """
    return f"{tp[0]}|{tp[1]}"


class ReleaseLedger(Protocol):
    """What the service needs of a ledger: the file :class:`~..privacy.ledger.Ledger`, a group
    task's view of the ledger topic, the broadcast learner's."""

    repaired_bytes: int

    def append(self, record: ReleaseRecord) -> bool:
        """Append a release durably; False when its id is already there (a replay)."""
        ...

    def records(self) -> list[ReleaseRecord]:
        """Every release, in order."""
        ...

    def close(self) -> None: ...


class StateBackend(abc.ABC):
    """Durable state of one service: its snapshots, its ledger, its refit-failure counts.

    Attributes
    ----------
    ledger
        Where releases are appended (:class:`ReleaseLedger`).
    """

    ledger: ReleaseLedger

    @abc.abstractmethod
    def load(self) -> dict | None:
        """The last snapshot (None: a new state); opens the ledger."""

    @abc.abstractmethod
    def save(self, state: dict) -> int:
        """Write a snapshot durably; returns its size in bytes."""

    def after_save(self, service) -> None:  # noqa: B027 - optional
        """Called once a snapshot is saved (e.g. commit the offsets, or a transaction)."""

    def ledger_mark(self) -> dict | None:
        """Where the ledger stands, written into each snapshot (None: not tracked)."""
        return None

    def load_refit_failures(self) -> dict[str, int]:
        return {}

    def count_refit_failure(self, failures: dict[str, int]) -> None:  # noqa: B027 - optional
        """Persist the failed-update counts (monitoring only)."""

    def close(self) -> None:
        self.ledger.close()


class DirectoryState(StateBackend):
    """A state directory: ``snapshot.json`` (atomic, 0600), ``ledger.jsonl`` (locked, hash
    chained) and ``refit-failures.json``.

    Parameters
    ----------
    directory
        The state directory (created 0700).
    transport
        Its ``commit(offsets)``, if any, receives the input offsets after each snapshot, for
        monitoring tools (the snapshot is authoritative).
    """

    ledger: Ledger

    def __init__(self, directory: str | Path, transport: object | None = None) -> None:
        self.directory = Path(directory)
        self.transport = transport

    def load(self) -> dict | None:
        self.store = SnapshotStore(self.directory)
        try:
            self.ledger = Ledger(self.directory / "ledger.jsonl").open()  # locks the directory
            stale = self.store.remove_stale_temps()
            if stale:
                log.warning("removed %d temporary snapshot file(s) left by a crash", stale)
            snap = self.store.load()
        except (LedgerCorruptError, SnapshotCorruptError, OSError) as err:
            raise ServiceStartError(f"state directory {self.directory}: {err}") from None
        except RuntimeError as err:  # the ledger is locked by another process
            raise ServiceStartError(str(err)) from None
        try:
            self.check_ledger(snap)
        except ServiceStartError:
            self.ledger.close()
            raise
        if self.ledger.repaired_bytes:
            log.warning(
                "ledger: repaired a torn final line (%d bytes of an unacknowledged release)",
                self.ledger.repaired_bytes,
            )
        return snap

    def save(self, state: dict) -> int:
        return self.store.save(state)

    def after_save(self, service) -> None:
        commit = getattr(self.transport, "commit", None)
        if commit is not None:  # for monitoring tools; the snapshot is authoritative
            commit(dict(service.offsets))

    def ledger_mark(self) -> dict:
        """Where the ledger stood when a snapshot was written: its length, its last release id
        and its hash chain's value (checked at start by :meth:`check_ledger`)."""
        records = self.ledger.records()
        return {
            "releases": len(records),
            "last_release": records[-1].release_id if records else None,
            "chain_hash": self.ledger.chain_hash(),
        }

    def check_ledger(self, snap: dict | None) -> None:
        """Refuse to start when the ledger lacks releases the snapshot was written after (a
        deleted, truncated or swapped ledger): the spend would be under-reported."""
        mark = None if snap is None else snap.get("ledger")
        if mark is None:  # a new state directory, or a snapshot from before the mark
            return
        n, path = int(mark["releases"]), self.ledger.path
        have = len(self.ledger)
        if have < n:
            raise ServiceStartError(
                f"ledger {path} holds {have} releases but the snapshot was written after {n} "
                f"(the last {mark['last_release']!r}): the ledger is missing or truncated; "
                "restore it from a backup — refusing to serve with an incomplete privacy ledger"
            )
        if self.ledger.chain_hash(n) != mark["chain_hash"]:
            raise ServiceStartError(
                f"ledger {path} does not match the snapshot: its first {n} releases differ "
                f"from those the snapshot was written after (the last {mark['last_release']!r}); "
                "was it replaced by another state directory's ledger? Refusing to serve"
            )

    def load_refit_failures(self) -> dict[str, int]:
        path = self.directory / REFIT_FAILURES_FILE
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            return {str(k): int(v) for k, v in data.items() if int(v) >= 0}
        except (OSError, ValueError, TypeError, AttributeError) as err:
            log.warning("ignoring unreadable %s (%s)", path, type(err).__name__)
            return {}

    def count_refit_failure(self, failures: dict[str, int]) -> None:
        path = self.directory / REFIT_FAILURES_FILE
        tmp = path.with_suffix(".tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(failures, fh, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except OSError as err:  # monitoring only: never mask the refit error
            log.warning("could not record the refit failure in %s (%s)", path, err)
