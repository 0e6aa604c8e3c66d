"""The dead-letter topic: every unusable message goes there with a reason (DESIGN §2).

One writer for every service shape: the service and its group tasks and learner (records
known by their :class:`~streaming_dpbandit.stream.transport.Record`, or by their source
coordinates for held feedback) and a decision replica (raw Kafka messages).
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping

from .schemas import DeadLetter
from .transport import Record

__all__ = ["DLQ_PAYLOAD_BYTES", "DeadLetters", "dead_letter_bandit"]

#: Bytes of a dead message's payload copied into its dead letter.
DLQ_PAYLOAD_BYTES = 2048


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
        payload = value[:DLQ_PAYLOAD_BYTES].decode("utf-8", errors="replace")
        dl = DeadLetter(
            source_topic=topic,
            partition=partition,
            offset=offset,
            reason=reason,
            detail=detail[:500],
            payload=payload if copy_payload else "",
            payload_bytes=len(value),
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

    def source(
        self, source: tuple[str, int, int], reason: str, detail: str, bandit: str | None = None
    ) -> None:
        """Dead-letter a message known by (topic, partition, offset), e.g. held feedback."""
        topic, part, off = source
        self.raw(topic, part, off, b"", reason, detail, bandit=bandit)
