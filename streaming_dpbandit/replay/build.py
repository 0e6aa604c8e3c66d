"""Build readers from command-line style options, and table policies from logs."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..utils.arrays import FloatArray
from .errors import LogFormatError
from .moments import RatioMoments
from .readers.base import LogReader
from .readers.kafka_log import KafkaLogReader, parse_bound
from .readers.obd import ObdReader
from .readers.service_jsonl import ServiceJsonlReader
from .readers.tabular import ColumnMapping, CsvReader, ParquetReader

__all__ = ["FORMATS", "action_table", "guess_format", "make_reader"]

FORMATS = ("service-jsonl", "csv", "parquet", "obd", "kafka")

_SERVICE_KEYS = {"bandit", "arms", "feedback_window", "missing_reward", "default_reward",
                 "max_pending"}  # fmt: skip


def guess_format(log: str) -> str:
    """The log format implied by a path or URL.

    >>> guess_format("kafka://broker:9092"), guess_format("x.jsonl.gz"), guess_format("a.csv")
    ('kafka', 'service-jsonl', 'csv')
    """
    if log.startswith("kafka://"):
        return "kafka"
    name = log.lower()
    for suffix, fmt in (
        (".jsonl", "service-jsonl"),
        (".jsonl.gz", "service-jsonl"),
        (".csv", "csv"),
        (".csv.gz", "csv"),
        (".parquet", "parquet"),
        (".pq", "parquet"),
    ):
        if name.endswith(suffix):
            return fmt
    p = Path(log)
    if p.is_dir() and (p / "item_context.csv").is_file():
        return "obd"
    raise LogFormatError(f"cannot tell the format of {log!r}: give --format ({', '.join(FORMATS)})")


def _list(v: Any) -> list[str] | None:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [s.strip() for s in str(v).split(",") if s.strip()]


def _service_kwargs(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if params.get("featuriser") is not None:  # (make_reader's argument, not a --log-param)
        out["featuriser"] = params["featuriser"]
    if "bandit" in params:
        out["bandit_id"] = str(params["bandit"])
    if "arms" in params:
        out["arms"] = _list(params["arms"])
    for key in ("feedback_window", "default_reward"):
        if key in params:
            try:
                out[key] = float(params[key])
            except (TypeError, ValueError):
                raise LogFormatError(f"{key} must be a number, got {params[key]!r}") from None
    if "max_pending" in params:
        try:
            out["max_pending"] = int(params["max_pending"])
        except (TypeError, ValueError):
            raise LogFormatError("max_pending must be an integer") from None
    if "missing_reward" in params:
        if params["missing_reward"] not in ("drop", "default"):
            raise LogFormatError("missing_reward must be 'drop' or 'default'")
        out["missing_reward"] = params["missing_reward"]
    if out.get("feedback_window", 1.0) <= 0:
        raise LogFormatError("feedback_window must be positive")
    return out


def make_reader(
    log: str,
    fmt: str | None = None,
    mapping: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    start: str | None = None,
    end: str | None = None,
    featuriser: Any = None,
) -> LogReader:
    """A reader for ``log`` (path, campaign directory or ``kafka://HOST:PORT``).

    ``mapping`` is the column mapping of CSV/Parquet logs; ``params`` the reader options:
    ``bandit``, ``arms``, ``feedback_window``, ``missing_reward``, ``default_reward``,
    ``max_pending`` (service logs), ``topics`` (Kafka: contexts,decisions,feedback names) or
    ``topic_prefix`` (default ``dpbandit``), ``features`` (OBD). ``featuriser`` hashes the
    contexts in feature objects of a service log (``BanditSettings.featuriser``).
    """
    if not log.startswith("kafka://") and not Path(log).exists():
        raise LogFormatError(f"no such log {log}")
    origin = "given with --format" if fmt else "detected from its name"
    fmt = fmt or guess_format(log)
    if featuriser is not None and fmt not in ("service-jsonl", "kafka"):
        raise LogFormatError(
            f"a featuriser (--config) hashes the feature objects of service logs, not {fmt} logs"
        )
    params = dict(params or {})
    if featuriser is not None:
        params["featuriser"] = featuriser
    reader = _make_reader(log, fmt, mapping, params, start, end)
    reader.format_origin = origin  # named by errors about what the log lacks
    return reader


def _make_reader(
    log: str,
    fmt: str,
    mapping: Mapping[str, Any] | None,
    params: dict[str, Any],
    start: str | None,
    end: str | None,
) -> LogReader:
    if fmt not in FORMATS:
        raise LogFormatError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    allowed = {
        "service-jsonl": _SERVICE_KEYS,
        "kafka": _SERVICE_KEYS | {"topics", "topic_prefix", "idle_timeout"},
        "obd": {"features"},
        "csv": set(),
        "parquet": set(),
    }[fmt]
    extra = set(params) - allowed - {"featuriser"}
    if extra:
        raise LogFormatError(
            f"--log-param {', '.join(sorted(extra))} does not apply to {fmt} logs"
            + (f" (options: {', '.join(sorted(allowed))})" if allowed else "")
        )
    if mapping and fmt not in ("csv", "parquet"):
        raise LogFormatError(f"--map is for csv and parquet logs, not {fmt}")
    if (start is not None or end is not None) and fmt != "kafka":
        raise LogFormatError("--start/--end select a range of a Kafka log")
    if fmt == "kafka":
        if not log.startswith("kafka://") or len(log) <= len("kafka://"):
            raise LogFormatError("a Kafka log is kafka://HOST:PORT[,HOST:PORT]")
        if "topics" in params:
            topics = _list(params["topics"])
            if not topics or len(topics) != 3:
                raise LogFormatError("topics must name contexts,decisions,feedback (three topics)")
        else:
            prefix = str(params.get("topic_prefix", "dpbandit"))
            topics = [f"{prefix}.{k}" for k in ("contexts", "decisions", "feedback")]
        kw = _service_kwargs(params)
        if "idle_timeout" in params:
            kw["idle_timeout"] = float(params["idle_timeout"])
        contexts, decisions, feedback = topics
        return KafkaLogReader(
            log[len("kafka://") :],
            (contexts, decisions, feedback),
            start=parse_bound(start),
            end=parse_bound(end),
            **kw,
        )
    path = Path(log)
    if not path.exists():
        raise LogFormatError(f"no such log {log}")
    if fmt == "service-jsonl":
        return ServiceJsonlReader(path, **_service_kwargs(params))
    if fmt == "obd":
        return ObdReader(path, **({"features": params["features"]} if "features" in params else {}))
    if not mapping:
        raise LogFormatError(
            f"a {fmt} log needs a column mapping: --map action=COL --map reward=COL "
            "--map propensity=COL [--map context=COLS] [--map position=COL]"
        )
    m = ColumnMapping.from_items(mapping)
    return CsvReader(path, m) if fmt == "csv" else ParquetReader(path, m)


def action_table(reader: LogReader, level: float = 0.95) -> tuple[FloatArray, dict[str, Any]]:
    """Empirical action frequencies per position of a log, (P, K), and that log's own value.

    The frequencies estimate the logging policy's time-averaged action distribution π(a | p)
    — for a context-free logging policy, the policy itself. The value is the mean logged
    reward (the logging policy's on-policy value) with a normal interval.

    >>> from streaming_dpbandit.replay.datasets import obd_sample
    >>> tab, info = action_table(ObdReader(obd_sample("bts")))
    >>> tab.shape, bool(np.allclose(tab.sum(axis=1), 1.0)), info["events"]
    ((3, 34), True, 3000)
    """
    reader.open()
    counts = np.zeros((1, reader.n_arms))
    m = RatioMoments()
    n = 0
    for batch in reader.chunks():
        P = int(batch.positions.max()) + 1
        if P > counts.shape[0]:
            counts = np.vstack([counts, np.zeros((P - counts.shape[0], counts.shape[1]))])
        np.add.at(counts, (batch.positions, batch.actions), 1.0)
        m.update(batch.rewards, np.ones(len(batch)), batch.positions)
        n += len(batch)
    if n == 0:
        raise LogFormatError("the log has no events")
    est = m.estimate(level)
    tab = counts / counts.sum(axis=1, keepdims=True)
    tab = np.where(np.isfinite(tab), tab, 1.0 / counts.shape[1])
    return tab, {
        "events": n,
        "value": est["value"],
        "se": est["se"],
        "ci_normal": est["ci"],
        "per_position": [p["value"] for p in m.per_position(level)],
        "arms_never_logged": int(np.count_nonzero(counts.sum(axis=0) == 0)),
        "level": level,
        "note": "empirical action frequencies per position: the logging policy's time-averaged "
        "distribution",
        "min_probability": float(tab.min()) if math.isfinite(tab.min()) else None,
    }
