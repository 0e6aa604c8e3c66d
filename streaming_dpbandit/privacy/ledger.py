"""The privacy ledger: a durable, append-only record of every private release.

One JSON line per release. Each line carries a sequence number, the hash of the previous line
and its own SHA-256, so truncation or editing is detected. Every append is flushed and
``fsync``'d before :meth:`Ledger.append` returns; a release must be in the ledger before any
decision that depends on it is published (DESIGN §2, "release before use").

Crash safety: a crash can leave a *torn* final line (partly written). Opening the ledger for
writing detects it, truncates it back to the last complete record (that release was never
acknowledged, hence never used) and reports it; a damaged line anywhere else is corruption and
raises :class:`LedgerCorruptError`.

Idempotence: each record has a ``release_id`` (for example ``bandit/fit/episode=5``). Appending
a record whose id is already present is a no-op when the content is identical (a crash-retry
that recomputed the same release from the same sealed input with the same noise stream) and an
error when it differs: that would be a re-drawn release, which the product never allows.

Never in the ledger: raw rows, sums, noise values, seeds or keys.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fcntl
import hashlib
import json
import os
import time as _time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "Ledger",
    "LedgerConflictError",
    "LedgerCorruptError",
    "ReleaseRecord",
    "already_recorded",
    "read_ledger",
]

_FORMAT_VERSION = 1
_GENESIS = "0" * 64


class LedgerCorruptError(RuntimeError):
    """The ledger file is damaged somewhere other than a torn final line."""


class LedgerConflictError(RuntimeError):
    """A release id was appended twice with different content (a re-drawn release)."""


def already_recorded(existing: ReleaseRecord | None, record: ReleaseRecord) -> bool:
    """True if ``existing`` (the ledger's record of ``record``'s id, or None) is ``record``
    itself; :class:`LedgerConflictError` if it differs: a release is never re-drawn."""
    if existing is None:
        return False
    if existing.content_digest() == record.content_digest():
        return True
    raise LedgerConflictError(
        f"release {record.release_id!r} is already in the ledger with different content; "
        "refusing to record a re-drawn release"
    )


_SECOND: list[Any] = [None, ""]  # [whole UTC second, its ISO text]: one strftime per second


def _utcnow() -> str:
    """UTC now as ISO 8601 with milliseconds (``datetime.isoformat(timespec="milliseconds")``).

    >>> import datetime as dt
    >>> dt.datetime.fromisoformat(_utcnow()).utcoffset()
    datetime.timedelta(0)
    """
    now = _time.time()
    sec = int(now)
    cached = _SECOND
    if cached[0] != sec:
        text = _dt.datetime.fromtimestamp(sec, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        cached[1], cached[0] = text, sec
        return f"{text}.{int((now - sec) * 1000):03d}+00:00"
    return f"{cached[1]}.{int((now - sec) * 1000):03d}+00:00"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclasses.dataclass
class ReleaseRecord:
    """One private release.

    Parameters
    ----------
    release_id
        Idempotency key, unique per release (e.g. ``"default/fit/episode=5"``).
    bandit_id
        The bandit whose data the release used.
    mechanism
        Name of the mechanism (e.g. ``"n-iht+peeling"``).
    calibration
        ``"certified"`` or ``"paper"``.
    formula
        Identifier of the noise formula (e.g. ``"certified-v1"``).
    dp_valid
        False for calibrations that do not give a valid guarantee (``paper``).
    epsilon, delta, rho
        Claimed guarantee of this release (ρ for zCDP where it applies, else ``None``).
    accounting
        Components for the accountant, e.g. ``[{"type": "eps_delta", "epsilon": 1.0,
        "delta": 0.01}]`` or ``[{"type": "laplace", "sensitivity": 1.0, "scale": 2.0,
        "count": 3}]``.
    data_slice, composition
        Records with ``composition="parallel"`` and different ``data_slice`` values used
        disjoint data (a proven property of the policy, e.g. FLIPHAT's forgetting), so they
        compose in parallel. ``"sequential"`` records compose with everything.
    event_range
        First and last round (or offset) of the data used, inclusive.
    rows_used
        Number of rows that actually entered the release.
    model_version
        Version of the model this release produced.
    params
        Public parameters and constants (sensitivities, scales, budgets per step, ...).
    release
        The released (already private) output, if small enough to record.
    note
        Free text; the ``paper`` calibration's label goes here.
    privacy_model, privacy_unit, neighbouring
        Public description of the guarantee (for privacy statements built from a ledger).
    noise_backend
        The noise backend the release drew from: ``"fast"`` (floating-point samplers) or
        ``"secure"`` (exact discrete noise on a public grid, ``docs/privacy/secure-noise.md``).
    user_level
        ``None`` (event level), or the user-level bound the release's rows were admitted under
        (``max_contributions_per_user``, ``max_releases_per_user``, ``delta_per_release``;
        ``docs/privacy/user-level.md``): the ledger's whole-run statement is then per user
        (:func:`~streaming_dpbandit.privacy.user_level.user_level_of_records`). The record's
        ε, δ and accounting stay the mechanism's own (event level).
    time
        UTC time of the release (set automatically).
    """

    release_id: str
    bandit_id: str
    mechanism: str
    calibration: str
    formula: str
    dp_valid: bool
    epsilon: float
    delta: float
    accounting: list[dict[str, Any]]
    data_slice: str = "all"
    composition: str = "sequential"
    rho: float | None = None
    event_range: tuple[int, int] | None = None
    rows_used: int | None = None
    model_version: int | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    release: dict[str, Any] | None = None
    note: str | None = None
    privacy_model: str = "central"
    privacy_unit: str = ""
    neighbouring: str = ""
    noise_backend: str = "fast"
    time: str = dataclasses.field(default_factory=_utcnow)
    user_level: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.composition not in ("parallel", "sequential"):
            raise ValueError("composition must be 'parallel' or 'sequential'")
        if self.event_range is not None:
            self.event_range = (int(self.event_range[0]), int(self.event_range[1]))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["event_range"] is not None:
            out["event_range"] = list(out["event_range"])
        if out["user_level"] is None:  # event level: records as before the field existed
            del out["user_level"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReleaseRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def content_digest(self) -> str:
        """Digest of everything but the wall-clock time: equal for a faithful retry."""
        data = self.to_dict()
        data.pop("time", None)
        return hashlib.sha256(_canonical(data).encode()).hexdigest()


def _line_hash(seq: int, prev: str, record: dict[str, Any]) -> str:
    return hashlib.sha256(f"{seq}|{prev}|{_canonical(record)}".encode()).hexdigest()


def _parse(raw: bytes) -> tuple[list[tuple[int, dict[str, Any], str]], int, int]:
    """Parse ledger bytes: (entries, bytes of the good prefix, bytes of a torn tail)."""
    entries: list[tuple[int, dict[str, Any], str]] = []
    pos = 0
    prev = _GENESIS
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        if last and line == b"":
            break
        try:
            obj = json.loads(line)
            seq, record, h = obj["seq"], obj["record"], obj["hash"]
            ok = (
                obj.get("v") == _FORMAT_VERSION
                and seq == len(entries)
                and obj["prev"] == prev
                and _line_hash(seq, prev, record) == h
            )
        except (ValueError, KeyError, TypeError):
            ok = False
        if last:  # a complete line always ends in "\n": this one was torn by a crash
            return entries, pos, len(raw) - pos
        if not ok:
            raise LedgerCorruptError(f"ledger line {i + 1} is damaged (not a torn final line)")
        entries.append((seq, record, h))
        prev = h
        pos += len(line) + 1
    return entries, pos, 0


def read_ledger(path: str | os.PathLike[str]) -> tuple[list[ReleaseRecord], int]:
    """Read a ledger without modifying it: (records, bytes in a torn final line)."""
    raw = Path(path).read_bytes()
    entries, _, torn = _parse(raw)
    return [ReleaseRecord.from_dict(r) for _, r, _ in entries], torn


class Ledger:
    """Append-only, fsync'd, hash-chained ledger file (single writer, enforced by a lock).

    Parameters
    ----------
    path
        File to create or continue. Created with owner-only permissions.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> led = Ledger(os.path.join(d, "ledger.jsonl")).open()
    >>> rec = ReleaseRecord("b/fit/1", "b", "laplace", "certified", "certified-v1", True,
    ...                     epsilon=1.0, delta=0.0,
    ...                     accounting=[{"type": "pure", "epsilon": 1.0, "count": 1}])
    >>> led.append(rec)
    True
    >>> led.append(rec)  # a faithful retry is a no-op
    False
    >>> len(led)
    1
    >>> led.close()
    >>> [r.release_id for r in Ledger(os.path.join(d, "ledger.jsonl")).open().records()]
    ['b/fit/1']

    """

    _fd: int | None
    _entries: list[tuple[ReleaseRecord, str]]
    _by_id: dict[str, int]

    def __init__(self, path: str | os.PathLike[str]):
        self.path = path

    def open(self) -> Ledger:
        path = Path(self.path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"ledger {path} is locked by another process") from None
        raw = b""
        while chunk := os.read(fd, 1 << 20):
            raw += chunk
        entries, good, torn = _parse(raw)
        self.repaired_bytes = torn
        if torn:
            os.ftruncate(fd, good)
            os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_END)
        self._fd = fd
        self._entries = [(ReleaseRecord.from_dict(r), h) for _, r, h in entries]
        self._by_id = {rec.release_id: i for i, (rec, _) in enumerate(self._entries)}
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return self

    def _require_open(self) -> int:
        """The open file descriptor (raises if the ledger is not open)."""
        fd: int | None = getattr(self, "_fd", None)
        if fd is None:
            raise RuntimeError("ledger is not open; call open() first")
        return fd

    def __len__(self) -> int:
        self._require_open()
        return len(self._entries)

    def records(self) -> list[ReleaseRecord]:
        self._require_open()
        return [rec for rec, _ in self._entries]

    def __iter__(self) -> Iterator[ReleaseRecord]:
        return iter(self.records())

    def chain_hash(self, n: int | None = None) -> str:
        """The hash chain's value after the first ``n`` records (all by default): the hash of
        record ``n − 1``, which covers every record before it. A snapshot keeps it, so that a
        missing, truncated or swapped ledger is detected at start.

        >>> import tempfile, os
        >>> led = Ledger(os.path.join(tempfile.mkdtemp(), "l.jsonl")).open()
        >>> led.chain_hash() == "0" * 64
        True
        >>> led.close()
        """
        self._require_open()
        n = len(self._entries) if n is None else n
        return self._entries[n - 1][1] if n > 0 else _GENESIS

    def get(self, release_id: str) -> ReleaseRecord | None:
        self._require_open()
        i = self._by_id.get(release_id)
        return None if i is None else self._entries[i][0]

    def append(self, record: ReleaseRecord) -> bool:
        """Durably append ``record``; return False if an identical record was already there."""
        fd = self._require_open()
        if already_recorded(self.get(record.release_id), record):
            return False
        seq = len(self._entries)
        prev = self._entries[-1][1] if self._entries else _GENESIS
        data = record.to_dict()
        h = _line_hash(seq, prev, data)
        line = _canonical(
            {"v": _FORMAT_VERSION, "seq": seq, "prev": prev, "record": data, "hash": h}
        )
        payload = (line + "\n").encode()
        written = 0
        while written < len(payload):
            written += os.write(fd, payload[written:])
        os.fsync(fd)

        self._by_id[record.release_id] = seq
        self._entries.append((record, h))
        return True

    def close(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._fd = None

    def __enter__(self) -> Ledger:
        return self.open() if getattr(self, "_fd", None) is None else self

    def __exit__(self, *exc: object) -> None:

        self.close()
