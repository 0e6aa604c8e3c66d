"""The service's own log as a JSONL file: contexts, decisions and feedback, one message per line.

Each line is ``{"topic": "contexts" | "decisions" | "feedback", "value": {...}}`` — the format
of ``dpbandit serve --file`` (``stream/sim/sources.py``) plus the service's ``decisions`` — where
``topic`` may also be a full topic name ending in ``contexts``, ``decisions`` or ``feedback``
(e.g. ``dpbandit.decisions``) and ``value`` a JSON object or its text; ``"value_b64"`` instead
of ``value`` carries a binary message value as base64 (a binary context, ``DPBC``, as
``dpbandit serve --file`` reads it and a recorded stream writes it). Messages are validated
with the service's schemas and joined by event id (:class:`~.join.EventJoin`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Unpack

from ..errors import LogFormatError
from .base import open_text, require_file
from .join import JoinOptions, ServiceLogReader

__all__ = ["ServiceJsonlReader", "topic_kind"]

KINDS = ("contexts", "decisions", "feedback")


def topic_kind(topic: object) -> str | None:
    """``"contexts"``, ``"decisions"`` or ``"feedback"`` for a topic name, else None.

    >>> topic_kind("dpbandit.decisions"), topic_kind("feedback"), topic_kind("dead-letter")
    ('decisions', 'feedback', None)
    """
    if not isinstance(topic, str):
        return None
    for kind in KINDS:
        if topic == kind or topic.endswith("." + kind) or topic.endswith("-" + kind):
            return kind
    return None


class ServiceJsonlReader(ServiceLogReader):
    """Read a JSONL log of the service's topics.

    Parameters
    ----------
    path
        The file (``.jsonl`` or ``.jsonl.gz``).
    bandit_id, arms, feedback_window, missing_reward, default_reward, max_pending, featuriser
        How events are joined (see :class:`~.join.EventJoin`).

    Examples
    --------
    >>> import json, tempfile, pathlib
    >>> lines = [
    ...   {"topic": "contexts", "value": {"event_id": "e1", "bandit_id": "b", "event_time": 0,
    ...    "arms": [{"arm_id": "x", "features": [1.0]}, {"arm_id": "y", "features": [0.0]}]}},
    ...   {"topic": "decisions", "value": {"event_id": "e1", "bandit_id": "b", "arm_id": "x",
    ...    "arm_index": 0, "propensity": 0.5, "model_version": 0, "episode": 0, "round": 1,
    ...    "calibration": "non-private", "policy": "random", "decided_at": 0.0}},
    ...   {"topic": "feedback", "value": {"event_id": "e1", "bandit_id": "b", "reward": 1.0,
    ...    "event_time": 1.0}}]
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = p.write_text("\\n".join(json.dumps(x) for x in lines))
    >>> b = next(ServiceJsonlReader(p).chunks())
    >>> b.event_ids.tolist(), b.actions.tolist(), b.rewards.tolist(), b.propensities.tolist()
    (['e1'], [0], [1.0], [0.5])
    """

    format = "service-jsonl"

    def __init__(self, path: str | Path, **join: Unpack[JoinOptions]):
        self.path = Path(path)
        self._keep_join(join)
        self._done = 0
        self.counters: dict[str, int] = {}

    def where(self) -> str:
        return str(self.path)

    def _messages(self) -> Iterator[tuple[str, Any, str, int | None]]:
        """(kind, JSON value, where, record timestamp in ms): a line's ``timestamp``, or the
        last one before it (as ``serve --file`` reads them), None before the first."""
        total = self.path.stat().st_size
        stamp: int | None = None
        with open_text(self.path) as fh:
            raw = getattr(fh, "buffer", None)
            for lineno, line in enumerate(fh, 1):
                where = f"{self.path}: line {lineno}"
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise LogFormatError(f"{where}: not JSON") from None
                if not isinstance(obj, dict) or "topic" not in obj:
                    raise LogFormatError(f'{where}: expected {{"topic": ..., "value": ...}}')
                if "value" in obj:
                    value = obj["value"]
                elif isinstance(obj.get("value_b64"), str):  # a binary message value
                    try:
                        value = base64.b64decode(obj["value_b64"], validate=True)
                    except ValueError:
                        raise LogFormatError(f"{where}: value_b64 is not base64") from None
                else:
                    raise LogFormatError(f'{where}: expected {{"topic": ..., "value": ...}}')
                kind = topic_kind(obj["topic"])
                if kind is None:
                    raise LogFormatError(
                        f"{where}: unknown topic {obj['topic']!r} "
                        "(expected contexts, decisions or feedback)"
                    )
                if lineno % 1024 == 0 and raw is not None:
                    try:
                        pos = raw.fileobj.tell() if hasattr(raw, "fileobj") else raw.tell()
                        self._done = min(total, pos)
                    except (OSError, ValueError, AttributeError):
                        pass
                ts = obj.get("timestamp")
                if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0:
                    stamp = ts
                yield kind, value, where, stamp
        self._done = total

    def _open(self) -> None:
        require_file(self.path, self.format)
        super()._open()

    def progress(self) -> tuple[int, int | None, str]:
        return self._done, self.path.stat().st_size if self.path.exists() else None, "B"

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out.update(
            {
                "path": str(self.path),
                "bandit_id": self.bandit_id or getattr(self, "first_bandit", None),
                "feedback_window": self.feedback_window,
                "missing_reward": self.missing_reward,
                "join": self.counters,
            }
        )
        return out
