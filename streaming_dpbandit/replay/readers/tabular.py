"""Generic tabular logs (CSV, optionally gzipped, and Parquet) with a column mapping.

One row per logged event: the logged action, its reward and the logging propensity, optionally
the slate position, an event id and context columns. The shared context of a row is mapped to
per-arm features by the disjoint encoding (arm k's block of a d = K·w vector, w = context
columns + 1 for the intercept), as the service does for shared contexts.
"""

from __future__ import annotations

import csv
import dataclasses
import fnmatch
import operator
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ...utils.arrays import AnyArray, ArrayLike, FloatArray, IntArray
from ..batch import LoggedBatch
from ..contexts import ConstantContexts, Contexts, DisjointContexts
from ..errors import LogFormatError, show
from .base import LogReader, open_text, require_file

__all__ = ["ColumnMapping", "CsvReader", "ParquetReader"]

_KEYS = (
    "action",
    "reward",
    "propensity",
    "context",
    "position",
    "event_id",
    "user",
    "arms",
    "n_arms",
    "position_base",
    "intercept",
)


@dataclasses.dataclass
class ColumnMapping:
    """Which columns hold what.

    Parameters
    ----------
    action, reward, propensity
        Columns of the logged arm, its reward and its logging probability (required).
    context
        Context columns: names or glob patterns (``"x*"``), in file order; none = no features.
    position
        Slate position column (optional); ``position_base`` is its first value (0 or 1).
    event_id
        Event id column (optional; default: the row number).
    user
        User id column (optional): with ``--max-contributions-per-user`` the replay method
        learns at most k events of one user per release (``docs/privacy/user-level.md``).
    arms
        Arm labels in index order (strings as they appear in the action column). Without it,
        integer actions 0..n_arms−1 are expected; without either, a first pass over the action
        column finds the labels (integers → 0..max, otherwise sorted labels).
    intercept
        Append a constant 1 to the shared context (a per-arm intercept after encoding).

    Examples
    --------
    >>> m = ColumnMapping.from_items({"action": "a", "reward": "r", "propensity": "p",
    ...                               "context": "x*,z", "n_arms": "3"})
    >>> m.context, m.n_arms
    (['x*', 'z'], 3)
    """

    action: str
    reward: str
    propensity: str
    context: list[str] = dataclasses.field(default_factory=list)
    position: str | None = None
    event_id: str | None = None
    user: str | None = None
    arms: list[str] | None = None
    n_arms: int | None = None
    position_base: int = 0
    intercept: bool = True

    @classmethod
    def from_items(cls, items: Mapping[str, Any]) -> ColumnMapping:
        """Build from ``--map KEY=VALUE`` items (lists comma-separated)."""
        unknown = set(items) - set(_KEYS)
        if unknown:
            raise LogFormatError(
                f"unknown column-mapping key(s) {', '.join(sorted(unknown))}; "
                f"use {', '.join(_KEYS)}"
            )
        missing = [k for k in ("action", "reward", "propensity") if not items.get(k)]
        if missing:
            raise LogFormatError(
                f"the column mapping needs {', '.join(missing)} "
                "(e.g. --map action=item --map reward=click --map propensity=pscore)"
            )

        def as_list(v: Any) -> list[str] | None:
            if v is None:
                return None
            if isinstance(v, (list, tuple)):
                return [str(x) for x in v]
            return [s.strip() for s in str(v).split(",") if s.strip()]

        def as_int(key: str, v: Any, lo: int) -> int | None:
            if v is None:
                return None
            try:
                out = int(v)
            except (TypeError, ValueError):
                raise LogFormatError(f"{key} must be an integer, got {v!r}") from None
            if out < lo:
                raise LogFormatError(f"{key} must be >= {lo}, got {out}")
            return out

        intercept = items.get("intercept", True)
        if isinstance(intercept, str):
            if intercept.lower() not in ("true", "false", "1", "0"):
                raise LogFormatError(f"intercept must be true or false, got {intercept!r}")
            intercept = intercept.lower() in ("true", "1")
        return cls(
            action=str(items["action"]),
            reward=str(items["reward"]),
            propensity=str(items["propensity"]),
            context=as_list(items.get("context")) or [],
            position=items.get("position"),
            event_id=items.get("event_id"),
            user=items.get("user"),
            arms=as_list(items.get("arms")),
            n_arms=as_int("n_arms", items.get("n_arms"), 1),
            position_base=as_int("position_base", items.get("position_base"), 0) or 0,
            intercept=bool(intercept),
        )

    def resolve(self, header: list[str], where: str) -> dict[str, Any]:
        """Column names of every role, checked against ``header``."""
        names = set(header)
        out: dict[str, Any] = {}
        for role in ("action", "reward", "propensity", "position", "event_id", "user"):
            col = getattr(self, role)
            if col is None:
                continue
            if col not in names:
                raise LogFormatError(
                    f"{where}: missing {role} column {col!r} (columns: {_preview(header)})"
                )
            out[role] = col
        ctx: list[str] = []
        for pat in self.context:
            hits = [h for h in header if fnmatch.fnmatchcase(h, pat)]
            if not hits:
                raise LogFormatError(
                    f"{where}: no context column matches {pat!r} (columns: {_preview(header)})"
                )
            ctx += [h for h in hits if h not in ctx]
        out["context"] = ctx
        return out


def _preview(header: list[str], n: int = 12) -> str:
    shown = ", ".join(header[:n])
    return shown + (f", ... ({len(header)} in all)" if len(header) > n else "")


def _floats(values: ArrayLike, what: str, where: str, row0: int) -> FloatArray:
    """Column → float64; a missing or non-numeric value is an error naming its row."""
    arr = np.asarray(values)
    try:
        out = arr.astype(np.float64)
    except (ValueError, TypeError):
        for i, v in enumerate(arr.tolist()):
            try:
                float(v)
            except (ValueError, TypeError):
                kind = "missing" if v in ("", None) else f"not a number ({show(v)})"
                raise LogFormatError(f"{where}: row {row0 + i + 1}: {what} is {kind}") from None
        raise
    bad = np.flatnonzero(np.isnan(out))
    if bad.size:
        raise LogFormatError(f"{where}: row {row0 + int(bad[0]) + 1}: {what} is missing")
    return out


class _TabularReader(LogReader):
    def __init__(self, path: str | Path, mapping: ColumnMapping | Mapping[str, Any]):
        self.path = Path(path)
        self.mapping = (
            mapping if isinstance(mapping, ColumnMapping) else ColumnMapping.from_items(mapping)
        )
        self._done = 0

    def where(self) -> str:
        return str(self.path)

    # -- subclass hooks --------------------------------------------------------------------
    def _header(self) -> list[str]:
        raise NotImplementedError

    def _column_chunks(self, columns: list[str], size: int) -> Iterator[dict[str, AnyArray]]:
        raise NotImplementedError

    # -- metadata ----------------------------------------------------------------------------
    def _open(self) -> None:
        require_file(self.path, self.format)
        header = self._header()
        self._cols = self.mapping.resolve(header, self.where())
        m = self.mapping
        if m.arms is not None:
            if len(set(m.arms)) != len(m.arms):
                raise LogFormatError("arms: labels must be unique")
            self._labels: dict[str, int] | None = {a: i for i, a in enumerate(m.arms)}
            self.n_arms = len(m.arms)
        elif m.n_arms is not None:
            self._labels = None
            self.n_arms = m.n_arms
        else:
            self._labels, self.n_arms = self._scan_arms()
        self.width = len(self._cols["context"]) + (1 if m.intercept else 0)
        self.d = self.n_arms * self.width if self._cols["context"] else 1

    def _scan_arms(self) -> tuple[dict[str, int] | None, int]:
        values: set[Any] = set()
        for cols in self._column_chunks([self._cols["action"]], 65536):
            values.update(np.asarray(cols[self._cols["action"]]).tolist())
        if not values:
            raise LogFormatError(f"{self.where()}: the log has no rows")
        try:
            ints = sorted({int(float(v)) for v in values})
            if all(float(v) == int(float(v)) for v in values) and ints[0] >= 0:
                return None, ints[-1] + 1
        except (TypeError, ValueError):
            pass
        labels = sorted(str(v) for v in values)
        return {a: i for i, a in enumerate(labels)}, len(labels)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            {
                "path": str(self.path),
                "columns": self._cols,
                "encoding": "disjoint per-arm blocks of the shared context"
                + (" + intercept" if self.mapping.intercept else "")
                if self._cols["context"]
                else "none (constant feature)",
            }
        )
        return out

    # -- reading -----------------------------------------------------------------------------
    def _actions(self, values: AnyArray, row0: int) -> IntArray:
        where = self.where()
        if self._labels is not None:
            out = np.empty(len(values), dtype=np.int64)
            labels = self._labels
            for i, v in enumerate(np.asarray(values).tolist()):
                k = labels.get(str(v) if not isinstance(v, str) else v)
                if k is None and not isinstance(v, str):
                    k = labels.get(str(int(v))) if float(v) == int(v) else None
                if k is None:
                    kind = "missing" if v in ("", None) else f"{v!r}, not one of the arms"
                    raise LogFormatError(f"{where}: row {row0 + i + 1}: action is {kind}")
                out[i] = k
            return out
        f = _floats(values, "action", where, row0)
        a = f.astype(np.int64)
        bad = np.flatnonzero((a != f) | (a < 0) | (a >= self.n_arms))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: row {row0 + i + 1}: action {show(values[i])} is not an arm index "
                f"0..{self.n_arms - 1} (give --map arms=... for labelled actions)"
            )
        return a

    def _chunks(self, chunk_size: int) -> Iterator[LoggedBatch]:
        c = self._cols
        m = self.mapping
        needed = [c["action"], c["reward"], c["propensity"], *c["context"]]
        needed += [c[k] for k in ("position", "event_id", "user") if k in c]
        needed = list(dict.fromkeys(needed))
        where = self.where()
        row0 = 0
        self._done = 0
        for cols in self._column_chunks(needed, chunk_size):
            B = len(cols[c["action"]])
            if B == 0:
                continue
            actions = self._actions(cols[c["action"]], row0)
            rewards = _floats(cols[c["reward"]], "reward", where, row0)
            props = _floats(cols[c["propensity"]], "propensity", where, row0)
            bad = np.flatnonzero(~((props > 0) & (props <= 1)))
            if bad.size:
                i = int(bad[0])
                raise LogFormatError(
                    f"{where}: row {row0 + i + 1}: propensity {show(props[i])} is not in (0, 1] "
                    "(off-policy estimates need the logging policy's positive propensities)"
                )
            if "position" in c:
                pf = _floats(cols[c["position"]], "position", where, row0)
                positions = pf.astype(np.int64) - m.position_base
                bad = np.flatnonzero((pf != np.floor(pf)) | (positions < 0))
                if bad.size:
                    i = int(bad[0])
                    raise LogFormatError(
                        f"{where}: row {row0 + i + 1}: position {show(cols[c['position']][i])} is "
                        f"not an integer >= {m.position_base} (position_base)"
                    )
            else:
                positions = np.zeros(B, dtype=np.int64)
            if "event_id" in c:
                ids = np.asarray(cols[c["event_id"]])
                if ids.dtype.kind not in "iu":
                    ids = ids.astype(str)
            else:
                ids = np.arange(row0, row0 + B, dtype=np.int64)
            if c["context"]:
                parts = [
                    _floats(cols[col], f"context {col!r}", where, row0) for col in c["context"]
                ]
                if m.intercept:
                    parts.append(np.ones(B))
                bad_cols = [col for col, p in zip(c["context"], parts) if not np.isfinite(p).all()]
                if bad_cols:
                    i = int(np.flatnonzero(~np.isfinite(parts[c["context"].index(bad_cols[0])]))[0])
                    raise LogFormatError(
                        f"{where}: row {row0 + i + 1}: context {bad_cols[0]!r} is not finite"
                    )
                contexts: Contexts = DisjointContexts(np.column_stack(parts), self.n_arms)
            else:
                contexts = ConstantContexts(B, self.n_arms)
            users = np.asarray(cols[c["user"]]).astype(str).astype(object) if "user" in c else None
            row0 += B
            yield LoggedBatch(ids, actions, rewards, props, positions, contexts, user_ids=users)


class CsvReader(_TabularReader):
    """A CSV log (``.csv`` or ``.csv.gz``, with a header row) read with the standard library.

    Parameters
    ----------
    path
        The file.
    mapping
        A :class:`ColumnMapping` or its ``KEY=VALUE`` items as a dict.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.csv"
    >>> _ = p.write_text("arm,click,ps,x\\n0,1,0.5,0.2\\n1,0,0.5,-1.0\\n")
    >>> r = CsvReader(p, {"action": "arm", "reward": "click", "propensity": "ps",
    ...                   "context": "x", "n_arms": 2})
    >>> b = next(r.chunks())
    >>> r.d, b.actions.tolist(), b.contexts.rows(b.actions).tolist()
    (4, [0, 1], [[0.2, 1.0, 0.0, 0.0], [0.0, 0.0, -1.0, 1.0]])
    """

    format = "csv"

    def _header(self) -> list[str]:
        with open_text(self.path) as fh:
            try:
                header = next(csv.reader(fh))
            except StopIteration:
                raise LogFormatError(f"{self.where()}: empty file (no header row)") from None
            except (csv.Error, UnicodeDecodeError, OSError) as err:
                raise LogFormatError(f"{self.where()}: not a readable CSV file ({err})") from None
        if len(set(header)) != len(header):
            raise LogFormatError(f"{self.where()}: duplicate column names in the header")
        self._header_cols = header
        return header

    def _column_chunks(self, columns: list[str], size: int) -> Iterator[dict[str, AnyArray]]:
        header = self._header_cols
        idx = [header.index(c) for c in columns]
        width = len(header)
        get = operator.itemgetter(*idx)
        total = self.path.stat().st_size
        with open_text(self.path) as fh:
            raw = fh.buffer if hasattr(fh, "buffer") else None
            reader = csv.reader(fh)
            try:
                next(reader)
                rows: list[Any] = []
                line = 1
                for row in reader:
                    line += 1
                    if len(row) != width:
                        if not row:
                            continue
                        raise LogFormatError(
                            f"{self.where()}: line {line}: {len(row)} fields, the header has "
                            f"{width} (mismatched columns)"
                        )
                    rows.append(get(row))
                    if len(rows) == size:
                        yield self._to_columns(rows, columns)
                        rows = []
                        self._done = _tell(raw, fh, total)
                if rows:
                    yield self._to_columns(rows, columns)
                self._done = total
            except (csv.Error, UnicodeDecodeError) as err:
                raise LogFormatError(f"{self.where()}: line {line}: {err}") from None

    @staticmethod
    def _to_columns(rows: list[Any], columns: list[str]) -> dict[str, AnyArray]:
        if len(columns) == 1:
            return {columns[0]: np.array(rows, dtype=str)}
        cols = list(zip(*rows))
        return {c: np.array(v, dtype=str) for c, v in zip(columns, cols)}

    def progress(self) -> tuple[int, int | None, str]:
        return self._done, self.path.stat().st_size if self.path.exists() else None, "B"


def _tell(raw: Any, fh: Any, total: int) -> int:  # binary/gzip file objects, duck-typed
    try:
        if raw is not None and hasattr(raw, "fileobj"):  # gzip: compressed bytes read
            return min(total, int(raw.fileobj.tell()))
        return min(total, fh.buffer.tell()) if hasattr(fh, "buffer") else 0
    except (OSError, ValueError, AttributeError):
        return 0


class ParquetReader(_TabularReader):
    """A Parquet log, streamed by row batches (needs the optional ``pyarrow``:
    ``pip install 'streaming_dpbandit[parquet]'``); its parameters are :class:`CsvReader`'s."""

    format = "parquet"

    @staticmethod
    def _pq() -> ModuleType:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise LogFormatError(
                "reading Parquet needs pyarrow: pip install 'streaming_dpbandit[parquet]'"
            ) from None
        module: ModuleType = pq  # pyarrow is untyped
        return module

    def _file(self) -> Any:  # a pyarrow.parquet.ParquetFile (pyarrow is untyped)
        pq = self._pq()
        try:
            return pq.ParquetFile(self.path)
        except Exception as err:  # pyarrow raises its own ArrowInvalid etc.
            raise LogFormatError(f"{self.where()}: not a readable Parquet file ({err})") from None

    def _header(self) -> list[str]:
        pf = self._file()
        self._rows_total = pf.metadata.num_rows
        return list(pf.schema_arrow.names)

    def _column_chunks(self, columns: list[str], size: int) -> Iterator[dict[str, AnyArray]]:
        pf = self._file()
        self._done = 0
        for rb in pf.iter_batches(batch_size=size, columns=columns):
            out: dict[str, AnyArray] = {}
            for name in columns:
                col = rb.column(name)
                arr = col.to_numpy(zero_copy_only=False)
                if col.null_count and arr.dtype.kind in "iub":
                    arr = arr.astype(np.float64)
                out[name] = arr
            self._done += rb.num_rows
            yield out

    def progress(self) -> tuple[int, int | None, str]:
        return self._done, getattr(self, "_rows_total", None), "event"
