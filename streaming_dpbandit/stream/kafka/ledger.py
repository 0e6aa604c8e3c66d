"""The privacy ledger on a compacted Kafka topic, for several replicas (docs/scaling.md).

Same interface and rules as :class:`~streaming_dpbandit.privacy.ledger.Ledger`: one record per
release, keyed by its ``release_id``; appending an identical record again is a no-op, appending
a different one under the same id is refused (a re-drawn release). Records are written with the
owning task's transactional producer, in the same transaction as the snapshot holding the
release, so a release is durable — and only then used — exactly when its task commits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ...privacy.ledger import ReleaseRecord, already_recorded
from .compacted import CompactedTopicClient

__all__ = ["KafkaLedger"]


@dataclass(eq=False)
class KafkaLedger(CompactedTopicClient):
    """Ledger records in a compacted topic.

    Parameters
    ----------
    kafka, topic, send, partitions, client
        The topic, as for :class:`~.compacted.CompactedTopicClient`.
    """

    repaired_bytes = 0

    _records: dict[str, ReleaseRecord] = field(default_factory=dict, init=False, repr=False)
    _order: list[str] = field(default_factory=list, init=False, repr=False)

    def open(self) -> KafkaLedger:
        self.refresh()
        return self

    def refresh(self) -> None:
        """Read records committed since the last refresh (by any replica)."""

        def on_message(_key, value):
            if value is not None:
                self._remember(ReleaseRecord.from_dict(json.loads(value)))

        self.read_new(on_message)

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
        if already_recorded(self.get(record.release_id), record):
            return False
        send = send or self.send
        if send is None:
            raise RuntimeError("KafkaLedger.append needs a producer (send=...)")
        send(self.topic, record.release_id.encode(), json.dumps(record.to_dict()).encode())
        self._remember(record)
        return True

    def close(self) -> None:
        return None
