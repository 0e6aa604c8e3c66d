"""A producer-only sink: what a process that only writes (the HTTP gateway) needs from a Kafka
client — the seam's :class:`~.seam.Producer` of ``kafka.client``, with the service's producer
settings (acknowledged by every replica, idempotent, the Java client's partitioner).

Its :meth:`~.seam.Producer.flush` raises :class:`Undelivered` when a record failed or is still
unacknowledged at the deadline (a failure is never hidden), and :meth:`~.seam.Producer.reset`
drops whatever the client still holds so that the caller can send the same records again
(readers de-duplicate by event id). With kafka-python a send fails fast (``max_block_ms``)
while the broker is away.
"""

from __future__ import annotations

from ...settings import KafkaSettings
from .seam import Producer, UndeliveredRecords, kafka_client

__all__ = ["Sink", "Undelivered", "open_sink"]

#: The sink's interface: the seam's producer.
Sink = Producer
#: What a flush raises when a record was not acknowledged.
Undelivered = UndeliveredRecords


def open_sink(settings: KafkaSettings, max_block_ms: int = 2000) -> Sink:
    """The sink of ``settings.client``."""
    return kafka_client(settings.client).producer(settings, max_block_ms=max_block_ms)
