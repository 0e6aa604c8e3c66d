"""A producer-only sink: ``send`` records, ``flush`` raises unless every one was delivered.

What a process that only writes (the HTTP gateway) needs from a Kafka client, on either client
of ``kafka.client``: the service's producer settings (acknowledged by every replica,
idempotent, the Java client's partitioner), a :meth:`Sink.flush` that raises
:class:`Undelivered` when a record failed or is still unacknowledged at its deadline (a
failure is never hidden), and :meth:`Sink.reset`, which drops whatever the client still holds
so that the caller can send the same records again (readers de-duplicate by event id).
"""

from __future__ import annotations

import abc
import logging
from typing import Any

from ...settings import KafkaSettings

__all__ = ["Sink", "Undelivered", "open_sink"]

log = logging.getLogger("streaming_dpbandit.kafka")


class Undelivered(Exception):
    """Records were not acknowledged by the broker (failed, or still pending at the deadline)."""


class Sink(abc.ABC):
    """A producer: ``send`` queues, ``flush`` waits for every acknowledgement or raises."""

    @abc.abstractmethod
    def send(self, topic: str, key: bytes | None, value: bytes) -> None: ...

    @abc.abstractmethod
    def flush(self, timeout_s: float) -> None:
        """Block until every record sent is acknowledged; :class:`Undelivered` otherwise."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Forget every unacknowledged record (after :class:`Undelivered`)."""

    @abc.abstractmethod
    def close(self) -> None: ...


class KafkaPythonSink(Sink):
    """kafka-python's producer; sends fail fast (``max_block_ms``) while the broker is away."""

    def __init__(self, settings: KafkaSettings, max_block_ms: int = 2000):
        self.settings = settings
        self.max_block_ms = max_block_ms
        self._open()

    def _open(self) -> None:
        from kafka import KafkaProducer

        from .transport import producer_options

        self.producer = KafkaProducer(
            **producer_options(self.settings), max_block_ms=self.max_block_ms
        )
        self.futures: list[Any] = []
        self.failed: Exception | None = None

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        if self.failed is not None:
            return  # the batch is lost anyway: flush raises, the caller sends it again
        try:
            self.futures.append(self.producer.send(topic, key=key, value=value))
        except Exception as err:  # KafkaTimeoutError: no metadata (broker unreachable)
            self.failed = err

    def flush(self, timeout_s: float) -> None:
        failed = self.failed
        if failed is None:
            try:
                self.producer.flush(timeout=timeout_s)
            except Exception as err:  # KafkaTimeoutError
                failed = err
        if failed is None:
            bad = [f.exception for f in self.futures if f.failed()]
            pending = sum(not f.is_done for f in self.futures)
            if bad or pending:
                failed = bad[0] if bad else TimeoutError(f"{pending} records unacknowledged")
        if failed is not None:
            raise Undelivered(f"{type(failed).__name__}: {failed}")
        self.futures = []

    def reset(self) -> None:
        try:
            self.producer.close(timeout=0)
        except Exception as err:  # a producer whose broker is gone may not close cleanly
            log.debug("closing the producer failed: %s", err)
        self._open()

    def close(self) -> None:
        self.producer.close(timeout=5)


class ConfluentSink(Sink):
    """librdkafka's producer (confluent-kafka); failures reach it by delivery callbacks."""

    def __init__(self, settings: KafkaSettings):
        from confluent_kafka import Producer

        from .confluent import confluent_producer_config

        self.producer = Producer(confluent_producer_config(settings))
        self.failed: list[Any] = []

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed.append(err)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:  # librdkafka's queue is full: serve callbacks, then retry
                self.producer.poll(0.05)

    def flush(self, timeout_s: float) -> None:
        left = self.producer.flush(timeout_s)
        if self.failed or left:
            why = self.failed[0] if self.failed else f"{left} records unacknowledged"
            raise Undelivered(str(why))

    def reset(self) -> None:
        self.producer.purge()
        self.producer.poll(0)  # (purged records report their failure here)
        self.failed = []

    def close(self) -> None:
        self.producer.flush(5)


def open_sink(settings: KafkaSettings) -> Sink:
    """The sink of ``settings.client``."""
    if settings.client == "confluent-kafka":
        return ConfluentSink(settings)
    return KafkaPythonSink(settings)
