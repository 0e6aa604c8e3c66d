"""The privacy ledger on a compacted Kafka topic, for several replicas (docs/scaling.md).

Same interface and rules as :class:`~streaming_dpbandit.privacy.ledger.Ledger`: one record per
release, keyed by its ``release_id``; appending an identical record again is a no-op, appending
a different one under the same id is refused (a re-drawn release). Records are written with the
owning task's transactional producer, in the same transaction as the snapshot holding the
release, so a release is durable — and only then used — exactly when its task commits.
"""

from __future__ import annotations

import json

from ...privacy.ledger import LedgerConflictError, ReleaseRecord
from .compacted import read_to_end

__all__ = ["KafkaLedger"]


class KafkaLedger:
    """Ledger records in a compacted topic.

    Parameters
    ----------
    bootstrap, topic
        Where the ledger lives.
    send
        ``send(topic, key, value)`` of the producer that writes records.
    consumer_config
        Extra kafka-python consumer settings (security).
    partitions
        Read only these partitions of the topic (a task reads its own; default: all).
    """

    repaired_bytes = 0

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        send=None,
        consumer_config: dict | None = None,
        partitions: list[int] | None = None,
    ):
        self.bootstrap = bootstrap
        self.topic = topic
        self.send = send
        self.consumer_config = consumer_config or {}
        self.partitions = partitions
        self._records: dict[str, ReleaseRecord] = {}
        self._order: list[str] = []
        self._read_to: dict[int, int] = {}

    def open(self) -> KafkaLedger:
        self.refresh()
        return self

    def refresh(self) -> None:
        """Read records committed since the last refresh (by any replica)."""

        def on_message(_key, value):
            if value is not None:
                self._remember(ReleaseRecord.from_dict(json.loads(value)))

        read_to_end(
            self.bootstrap,
            self.topic,
            self._read_to,
            on_message,
            self.consumer_config,
            self.partitions,
        )

    def _remember(self, rec: ReleaseRecord) -> None:
        if rec.release_id not in self._records:
            self._order.append(rec.release_id)
        self._records[rec.release_id] = rec

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> list[ReleaseRecord]:
        return [self._records[k] for k in self._order]

    def get(self, release_id: str) -> ReleaseRecord | None:
        return self._records.get(release_id)

    def append(self, record: ReleaseRecord, send=None) -> bool:
        """Append ``record`` with ``send`` (default: the ledger's); False if already there."""
        existing = self.get(record.release_id)
        if existing is not None:
            if existing.content_digest() == record.content_digest():
                return False
            raise LedgerConflictError(
                f"release {record.release_id!r} is already in the ledger with different content; "
                "refusing to record a re-drawn release"
            )
        (send or self.send)(
            self.topic, record.release_id.encode(), json.dumps(record.to_dict()).encode()
        )
        self._remember(record)
        return True

    def close(self) -> None:
        return None
