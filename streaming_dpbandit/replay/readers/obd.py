"""The Open Bandit Dataset layout (Saito et al., NeurIPS 2021 Datasets and Benchmarks).

``<root>/<behavior>/<campaign>/<campaign>.csv`` (or ``.csv.gz``): one row per impression slot —
``timestamp, item_id, position (1–3), click, propensity_score`` (of the logged item at that
position), hashed ``user_feature_0..3`` and ``user-item_affinity_0..K−1`` — and
``item_context.csv`` with ``item_id, item_feature_0`` (numeric) and categorical (hashed)
``item_feature_1..``. ``behavior`` is ``random`` (uniform logging: every propensity 1/K) or
``bts`` (Bernoulli Thompson sampling). The data are CC BY 4.0; cite the paper.

Per-arm features of item a for the event i, from blocks chosen with ``features``:

* ``item``: the one-hot e_a (K values: a per-item intercept, what a context-free policy learns);
* ``item_features``: [clip(item_feature_0, −3, 3)/3, one-hot of every categorical item feature],
  divided by √(1 + #categorical) so the block's norm is ≤ 1;
* ``affinity``: u/(1 + u) for the user–item affinity u of (i, a).

The blocks are concatenated and divided by √(#blocks), so ‖x‖ ≤ 1 (DP-LinUCB's L = 1 without
clipping). Only ``affinity`` depends on the event; the tensor is built on demand.
"""

from __future__ import annotations

import csv
import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...utils.arrays import ArrayLike, FloatArray, IntArray
from ..batch import LoggedBatch
from ..contexts import Contexts
from ..errors import LogFormatError, show
from .base import LogReader, open_text, require_file

__all__ = ["BLOCKS", "ObdContexts", "ObdReader"]

BLOCKS = ("item", "item_features", "affinity")
REQUIRED = ("item_id", "position", "click", "propensity_score")
AFFINITY = "user-item_affinity_"


class ObdContexts(Contexts):
    """OBD per-arm features: a fixed item block plus an optional per-event affinity column.

    >>> c = ObdContexts(np.eye(2), np.array([[0.0, 1.0]]), scale=1.0)
    >>> c.dense().tolist(), c.rows(np.array([1])).tolist()
    ([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.5]]], [[0.0, 1.0, 0.5]])
    """

    def __init__(self, fixed: FloatArray, affinity: FloatArray | None, scale: float):
        self.fixed = fixed  # (K, d_fixed), already scaled
        self.affinity = affinity  # (B, K) raw, or None
        self.scale = scale
        self.n_arms = int(fixed.shape[0])
        self.d = int(fixed.shape[1]) + (1 if affinity is not None else 0)
        self._size = 0  # events, read only without an affinity column (else its rows)

    def _aff(self, a: FloatArray) -> FloatArray:
        return a / (1.0 + a) * self.scale

    def __len__(self) -> int:
        return int(self.affinity.shape[0]) if self.affinity is not None else self._size

    def dense(self) -> FloatArray:
        B = len(self)
        K, f = self.fixed.shape
        X = np.empty((B, K, self.d))
        X[:, :, :f] = self.fixed
        if self.affinity is not None:
            X[:, :, f] = self._aff(self.affinity)
        return X

    def rows(self, arms: ArrayLike) -> FloatArray:
        arms = np.asarray(arms)
        out = np.empty((arms.size, self.d))
        f = self.fixed.shape[1]
        out[:, :f] = self.fixed[arms]
        if self.affinity is not None:
            out[:, f] = self._aff(self.affinity[np.arange(arms.size), arms])
        return out

    def project(self, coef: FloatArray) -> FloatArray:
        f = self.fixed.shape[1]
        out: FloatArray = coef[:, :f] @ self.fixed.T  # (B, K)
        if self.affinity is not None:
            out += self._aff(self.affinity) * coef[:, f : f + 1]
        return out

    def take(self, idx: IntArray) -> ObdContexts:
        if self.affinity is not None:
            return ObdContexts(self.fixed, self.affinity[idx], self.scale)
        out = ObdContexts(self.fixed, None, self.scale)
        out._size = len(np.arange(self._size)[idx])
        return out


class ObdReader(LogReader):
    """An Open Bandit Dataset campaign log.

    Parameters
    ----------
    path
        The campaign directory (``.../random/all``) or its ``<campaign>.csv[.gz]`` file;
        ``item_context.csv`` must be next to it.
    features
        Feature blocks, a subset of ``item``, ``item_features``, ``affinity`` (comma-separated
        or a list); default all three.

    Examples
    --------
    >>> from streaming_dpbandit.replay.datasets import obd_sample
    >>> r = ObdReader(obd_sample("random", "men")).open()
    >>> r.n_arms, r.d, r.n_positions
    (34, 63, 3)
    >>> b = next(r.chunks(100))
    >>> float(b.propensities[0]) == 1 / 34, sorted(set(b.positions.tolist()))
    (True, [0, 1, 2])
    """

    format = "obd"
    n_positions = 3

    def __init__(self, path: str | Path, features: str | Sequence[str] = BLOCKS):
        self.path = Path(path)
        self.features = features
        self._done = 0

    def where(self) -> str:
        return str(getattr(self, "_file", self.path))

    def _locate(self) -> tuple[Path, Path]:
        p = self.path
        if p.is_dir():
            name = p.name
            for cand in (p / f"{name}.csv", p / f"{name}.csv.gz"):
                if cand.is_file():
                    return cand, p / "item_context.csv"
            raise LogFormatError(
                f"obd: no {name}.csv (or {name}.csv.gz) in {p}; expected the layout "
                "<behavior>/<campaign>/<campaign>.csv with item_context.csv"
            )
        require_file(p, "obd")
        return p, p.parent / "item_context.csv"

    def _blocks(self) -> list[str]:
        f = self.features
        blocks = [s.strip() for s in f.split(",")] if isinstance(f, str) else list(f)
        bad = [b for b in blocks if b not in BLOCKS]
        if bad or not blocks:
            raise LogFormatError(
                f"obd features must be a non-empty subset of {', '.join(BLOCKS)}; got {f!r}"
            )
        return list(dict.fromkeys(blocks))

    def _open(self) -> None:
        self._file, items_path = self._locate()
        blocks = self._blocks()
        require_file(items_path, "obd item_context.csv")
        with items_path.open(newline="") as fh:
            rows = list(csv.reader(fh))
        if not rows or "item_id" not in rows[0]:
            raise LogFormatError(f"{items_path}: missing column 'item_id'")
        head = rows[0]
        feats = [h for h in head if h.startswith("item_feature_")]
        body = [r for r in rows[1:] if r]
        try:
            ids = [int(r[head.index("item_id")]) for r in body]
        except (ValueError, IndexError):
            raise LogFormatError(f"{items_path}: item_id must be integers") from None
        K = len(ids)
        if sorted(ids) != list(range(K)):
            raise LogFormatError(f"{items_path}: item ids must be 0..{K - 1}")
        order = np.argsort(ids)
        body = [body[i] for i in order]
        parts = []
        if "item" in blocks:
            parts.append(np.eye(K))
        if "item_features" in blocks:
            cols = []
            n_cat = 0
            for name in feats:
                j = head.index(name)
                vals = [r[j] for r in body]
                try:
                    num = np.array([float(v) for v in vals])
                    cols.append((np.clip(num, -3, 3) / 3)[:, None])
                except ValueError:  # categorical (hashed) feature: one-hot
                    cats = sorted(set(vals))
                    onehot = np.zeros((K, len(cats)))
                    onehot[np.arange(K), [cats.index(v) for v in vals]] = 1.0
                    cols.append(onehot)
                    n_cat += 1
            if cols:
                n_num = len(cols) - n_cat
                parts.append(np.hstack(cols) / math.sqrt(n_num + n_cat))
        nb = len(blocks)
        scale = 1.0 / math.sqrt(nb)
        fixed = (np.hstack(parts) if parts else np.zeros((K, 0))) * scale
        self._fixed = fixed
        self._scale = scale
        self._use_aff = "affinity" in blocks
        self.n_arms = K
        self.d = fixed.shape[1] + (1 if self._use_aff else 0)
        self._blocks_used = blocks
        # header of the campaign log
        with open_text(self._file) as fh:
            try:
                header = next(csv.reader(fh))
            except StopIteration:
                raise LogFormatError(f"{self._file}: empty file (no header row)") from None
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise LogFormatError(
                f"{self._file}: missing column(s) {', '.join(missing)} of the OBD layout"
            )
        aff = [h for h in header if h.startswith(AFFINITY)]
        if self._use_aff:
            if len(aff) != K:
                raise LogFormatError(
                    f"{self._file}: {len(aff)} user-item affinity columns but item_context.csv "
                    f"has {K} items (mismatched dimensions)"
                )
            expect = [f"{AFFINITY}{k}" for k in range(K)]
            if aff != expect:
                raise LogFormatError(f"{self._file}: affinity columns are not {AFFINITY}0..{K - 1}")
        self._header = header

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            {
                "path": str(self._file),
                "features": self._blocks_used,
                "positions": self.n_positions,
                "source": "Open Bandit Dataset (Saito et al. 2021), CC BY 4.0",
            }
        )
        return out

    def _chunks(self, chunk_size: int) -> Iterator[LoggedBatch]:
        header = self._header
        width = len(header)
        idx_col = 0 if header[0] in ("", "Unnamed: 0") else None
        cols = [header.index(c) for c in REQUIRED]
        if idx_col is not None:
            cols.append(idx_col)
        n_req = len(cols)
        if self._use_aff:
            cols += [header.index(f"{AFFINITY}{k}") for k in range(self.n_arms)]
        where = str(self._file)
        total = self._file.stat().st_size
        self._done = 0
        row0 = 0
        line = 1
        with open_text(self._file) as fh:
            fh.readline()
            while True:
                lines = [t for t in itertools.islice(fh, chunk_size) if t.strip()]
                if not lines:
                    break
                arr = self._parse(lines, cols, width, line, row0, where)
                line += len(lines)
                yield self._batch(arr, n_req, idx_col is not None, row0, where)
                row0 += len(lines)
                self._done = _offset(fh, total)
        self._done = total

    def _parse(
        self, lines: list[str], cols: list[int], width: int, line0: int, row0: int, where: str
    ) -> FloatArray:
        """Numeric columns of a chunk of lines: numpy's C parser, or a checked slow path."""
        commas = width - 1
        if all(t.count(",") == commas for t in lines):
            try:
                return np.loadtxt(lines, delimiter=",", usecols=cols, ndmin=2, dtype=np.float64)
            except ValueError:
                pass
        get = operator.itemgetter(*cols)
        rows: list[Any] = []
        for i, row in enumerate(csv.reader(lines)):
            if len(row) != width:
                raise LogFormatError(
                    f"{where}: line {line0 + i + 1}: {len(row)} fields, the header has {width} "
                    "(mismatched columns)"
                )
            rows.append(get(row))
        names = [self._header[c] or "index" for c in cols]
        try:
            return np.array(rows, dtype=np.float64)
        except ValueError:
            for i, r in enumerate(rows):
                for j, v in enumerate(r):
                    try:
                        float(v)
                    except ValueError:
                        kind = "missing" if v == "" else f"not a number ({v!r})"
                        raise LogFormatError(
                            f"{where}: row {row0 + i + 1}: {names[j]} is {kind}"
                        ) from None
            raise

    def _batch(
        self, arr: FloatArray, n_req: int, has_index: bool, row0: int, where: str
    ) -> LoggedBatch:
        B = arr.shape[0]
        item, pos, click, ps = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
        K = self.n_arms
        for name, col in (("item_id", item), ("position", pos)):
            bad = np.flatnonzero(col != np.floor(col))
            if bad.size:
                raise LogFormatError(
                    f"{where}: row {row0 + int(bad[0]) + 1}: {name} not an integer"
                )
        bad = np.flatnonzero((item < 0) | (item >= K))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: row {row0 + i + 1}: item_id {int(item[i])} is not among the {K} items "
                "of item_context.csv"
            )
        bad = np.flatnonzero(pos < 1)
        if bad.size:
            raise LogFormatError(f"{where}: row {row0 + int(bad[0]) + 1}: position must be >= 1")
        bad = np.flatnonzero(~((ps > 0) & (ps <= 1)))
        if bad.size:
            i = int(bad[0])
            raise LogFormatError(
                f"{where}: row {row0 + i + 1}: propensity_score {show(ps[i])} is not in (0, 1]"
            )
        ids = arr[:, 4].astype(np.int64) if has_index else np.arange(row0, row0 + B)
        aff = arr[:, n_req:] if self._use_aff else None
        if aff is not None and not np.isfinite(aff).all():
            i = int(np.flatnonzero(~np.isfinite(aff).all(axis=1))[0])
            raise LogFormatError(f"{where}: row {row0 + i + 1}: affinity is not finite")
        ctx = ObdContexts(self._fixed, aff, self._scale)
        if aff is None:
            ctx._size = B
        return LoggedBatch(
            event_ids=ids,
            actions=item.astype(np.int64),
            rewards=click,
            propensities=ps,
            positions=pos.astype(np.int64) - 1,
            contexts=ctx,
        )

    def progress(self) -> tuple[int, int | None, str]:
        return self._done, self._file.stat().st_size if hasattr(self, "_file") else None, "B"


def _offset(fh: Any, total: int) -> int:  # a text file over a binary/gzip one, duck-typed
    try:
        raw = fh.buffer
        if hasattr(raw, "fileobj"):
            return min(total, int(raw.fileobj.tell()))
        return min(total, int(raw.tell()))
    except (OSError, ValueError, AttributeError):
        return 0
