"""The reader interface: a logged stream read (again and again) in chunks of bounded size."""

from __future__ import annotations

import abc
import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..batch import LoggedBatch
from ..errors import LogFormatError

__all__ = ["DEFAULT_CHUNK_BYTES", "LogReader", "chunk_size_for", "open_text"]

#: Memory budget of one chunk's dense per-arm contexts (B·K·d float64 values).
DEFAULT_CHUNK_BYTES = 32 << 20


def chunk_size_for(n_arms: int, d: int, budget: int = DEFAULT_CHUNK_BYTES) -> int:
    """Events per chunk so that the chunk's dense (B, K, d) contexts fit in ``budget`` bytes.

    >>> chunk_size_for(3, 100), chunk_size_for(80, 122)
    (8192, 429)
    """
    per_event = max(1, n_arms * d * 8)
    return int(min(8192, max(64, budget // per_event)))


def open_text(path: Path) -> io.TextIOBase:
    """Open a text file, transparently gunzipping ``*.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return path.open("r", encoding="utf-8", newline="")


class LogReader(abc.ABC):
    """A logged bandit stream.

    Subclasses implement :meth:`_open` (read metadata: arms, dimension; validate the header) and
    :meth:`_chunks`. :meth:`chunks` may be called any number of times (an evaluation with a
    cross-fitted reward model reads the log twice); each call starts at the beginning and holds
    at most one chunk in memory.
    """

    #: Format name (``--format``).
    format: str = "log"
    #: how the format was chosen ("given with --format", "detected from its name"), for errors
    format_origin: str | None = None
    n_arms: int
    d: int

    _opened = False

    def open(self) -> LogReader:
        """Read the metadata (idempotent); raises :class:`LogFormatError` for unusable logs."""
        if not self._opened:
            self._open()
            self._opened = True
        return self

    @abc.abstractmethod
    def _open(self) -> None: ...

    @abc.abstractmethod
    def _chunks(self, chunk_size: int) -> Iterator[LoggedBatch]: ...

    def default_chunk_size(self) -> int:
        self.open()
        return chunk_size_for(self.n_arms, self.d)

    def chunks(
        self, chunk_size: int | None = None, max_events: int | None = None
    ) -> Iterator[LoggedBatch]:
        """Iterate over the log in validated chunks of at most ``chunk_size`` events."""
        self.open()
        size = chunk_size or self.default_chunk_size()
        if size < 1:
            raise ValueError("chunk_size must be positive")
        seen = 0
        for batch in self._chunks(size):
            if max_events is not None and seen + len(batch) > max_events:
                batch = batch.take(np.arange(max_events - seen))
            if len(batch):
                batch.validate(self.where())
                seen += len(batch)
                yield batch
            if max_events is not None and seen >= max_events:
                return

    def where(self) -> str:
        """How errors name this log."""
        return self.format

    def progress(self) -> tuple[int, int | None, str]:
        """(done, total or None, unit) of the current read, for progress bars."""
        return 0, None, "event"

    def describe(self) -> dict[str, Any]:
        self.open()
        return {"format": self.format, "n_arms": self.n_arms, "d": self.d}


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise LogFormatError(f"{what}: no such file {path}")
    if not path.is_file():
        raise LogFormatError(f"{what}: {path} is not a file")
    return path
