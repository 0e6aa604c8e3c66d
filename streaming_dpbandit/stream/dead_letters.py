"""The dead-letter topic: every unusable message goes there with a reason (DESIGN §2).

One writer for every service shape: the service and its group tasks and learner (records
known by their :class:`~streaming_dpbandit.stream.transport.Record`, or by their source
coordinates for held feedback) and a decision replica (raw Kafka messages).
"""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Callable, Mapping

from .schemas import DeadLetter
from .transport import Record

__all__ = ["DLQ_PAYLOAD_BYTES", "DeadLetters", "dead_letter_bandit", "redact_user_ids"]

#: Bytes of a dead message's payload copied into its dead letter.
DLQ_PAYLOAD_BYTES = 2048

#: A ``"user_id": value`` pair in JSON text (a string value, possibly cut off, or a bare one).
_USER_ID = re.compile(r'("user_id"\s*:\s*)("(?:[^"\\]|\\.)*"?|[^,}\]\s]*)')
REDACTED = "<redacted>"


def redact_user_ids(value: bytes) -> bytes:
    """A message with its user ids replaced by ``"<redacted>"``: a dead letter copies its
    payload, and user ids never leave the service (docs/privacy/user-level.md).

    Well-formed JSON objects are redacted by key (escapes in the key included); anything else
    by the pattern of a ``"user_id":`` pair.

    >>> redact_user_ids(b'{"event_id": "e", "user_id": "alice", "x": 1}')
    b'{"event_id": "e", "user_id": "<redacted>", "x": 1}'
    >>> redact_user_ids(b'{"user_id": "alice", "arms": [1,')   # not JSON: by pattern
    b'{"user_id": "<redacted>", "arms": [1,'
    >>> redact_user_ids(b'{"user_id": 42, "arms"')
    b'{"user_id": "<redacted>", "arms"'
    >>> redact_user_ids(b'{"event_id": "e"}')
    b'{"event_id": "e"}'
    """
    if b"user" not in value and b"\\u" not in value:  # (the common case: nothing to do)
        return value
    text = value.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        if "user_id" not in obj:
            return value
        obj["user_id"] = REDACTED
        return json.dumps(obj, ensure_ascii=False).encode()
    return _USER_ID.sub(lambda m: f'{m.group(1)}"{REDACTED}"', text).encode()


def dead_letter_bandit(bandits, bandit: str | None, key: bytes | None) -> str:
    """The ``bandit`` label of a dead letter: a configured bandit (named, or the Kafka key),
    else "" — never a name taken from a message (label values must stay bounded).

    >>> dead_letter_bandit({"shop": None}, None, b"shop"), dead_letter_bandit({}, "x", None)
    ('shop', '')
    """
    if bandit is None and key:
        try:
            bandit = key.decode("utf-8")
        except UnicodeDecodeError:
            bandit = None
    return bandit if bandit is not None and bandit in bandits else ""


class DeadLetters:
    """Writes dead letters to ``topic`` through ``send(topic, key, value)``, counts them (by
    reason in :attr:`count`, and in ``metrics.dead_letters``).

    Parameters
    ----------
    send
        ``send(topic, key, value)``: a transport's or a producer's.
    topic
        The dead-letter topic.
    bandits
        The configured bandits (the only values the ``bandit`` label takes).
    metrics
        :class:`~streaming_dpbandit.metrics.ServiceMetrics`.
    """

    def __init__(self, send: Callable, topic: str, bandits: Mapping, metrics):
        self.send = send
        self.topic = topic
        self.bandits = bandits
        self.metrics = metrics
        self.count: collections.Counter = collections.Counter()

    def raw(
        self,
        topic: str,
        partition: int,
        offset: int,
        value: bytes | None,
        reason: str,
        detail: str = "",
        key: bytes | None = None,
        bandit: str | None = None,
        copy_payload: bool = True,
    ) -> None:
        """Dead-letter a message known by its coordinates and bytes."""
        value = value if value is not None else b""  # (a tombstone has none)
        size = len(value)
        value = redact_user_ids(value) if copy_payload else b""
        payload = value[:DLQ_PAYLOAD_BYTES].decode("utf-8", errors="replace")
        dl = DeadLetter(
            source_topic=topic,
            partition=partition,
            offset=offset,
            reason=reason,
            detail=detail[:500],
            payload=payload if copy_payload else "",
            payload_bytes=size,
            at=time.time(),
        )
        self.send(self.topic, key, dl.model_dump_json().encode())
        label = dead_letter_bandit(self.bandits, bandit, key)
        self.metrics.dead_letters.labels(label, topic, reason).inc()
        self.count[reason] += 1

    def record(self, r: Record, reason: str, detail: str = "", bandit: str | None = None) -> None:
        """Dead-letter a polled record (raw contexts and rewards of a ``privacy=local`` bandit
        are not copied)."""
        self.raw(
            r.topic,
            r.partition,
            r.offset,
            r.value,
            reason,
            detail,
            key=r.key,
            bandit=bandit,
            copy_payload=reason != "raw_data_for_local_bandit",
        )

    def refused_rows(self, bandit: str, reason: str, rounds: list[int]) -> None:
        """Rows a policy refused (``privacy.contribution.RowRefused``: e.g. a round learned
        twice): one dead letter ``refused_by_policy``. A row joins a decision and a reward, so it
        has no source message: empty topic, partition and offset −1."""
        detail = f"{len(rounds)} row(s) refused ({reason}); rounds {rounds[:20]}"
        self.raw("", -1, -1, b"", "refused_by_policy", detail, bandit=bandit, copy_payload=False)

    def source(
        self, source: tuple[str, int, int], reason: str, detail: str, bandit: str | None = None
    ) -> None:
        """Dead-letter a message known by (topic, partition, offset), e.g. held feedback."""
        topic, part, off = source
        self.raw(topic, part, off, b"", reason, detail, bandit=bandit)
