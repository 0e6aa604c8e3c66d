"""The ``kafka`` settings as each client library's options (kafka-python keyword arguments,
librdkafka properties): one mapping per role, so that both clients connect, acknowledge,
batch and time out alike."""

from __future__ import annotations

import logging
from typing import Any

from ...settings import KafkaSettings

__all__ = [
    "client_options",
    "confluent_client_config",
    "confluent_consumer_config",
    "confluent_producer_config",
    "group_consumer_options",
    "producer_options",
    "warn_if_pure_python_crc",
]

log = logging.getLogger("streaming_dpbandit.kafka")

_SLOW_CRC_WARNED = [False]


def warn_if_pure_python_crc() -> bool:
    """Warn once when kafka-python would check record CRC-32C in pure Python.

    kafka-python uses the ``crc32c`` package when it is importable and silently falls back to
    a pure-Python CRC otherwise; the fallback took half of the service's loop (about 3× fewer
    events/s, docs/service.md). Returns whether it warned.
    """
    try:
        from kafka.record import util
    except ImportError:  # pragma: no cover - kafka-python is a dependency
        return False
    if getattr(util, "crc32c_c", None) is not None or _SLOW_CRC_WARNED[0]:
        return False
    _SLOW_CRC_WARNED[0] = True
    log.warning(
        "kafka-python checks record CRC-32C in pure Python, about 3x slower: install the "
        "'crc32c' package (pip install 'kafka-python[crc32c]')"
    )
    return True


# -- kafka-python ---------------------------------------------------------------------------
def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """kafka-python's connection options of every client of the service (servers, id,
    security)."""
    warn_if_pure_python_crc()
    out: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers.split(","),
        "client_id": settings.client_id,
        "security_protocol": settings.security_protocol,
        # kafka-python's reconnect backoff grows to 30 s: a broker restart would stall us
        "reconnect_backoff_max_ms": 1000,
    }
    if settings.sasl_mechanism:
        out["sasl_mechanism"] = settings.sasl_mechanism
        out["sasl_plain_username"] = settings.sasl_username
        out["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    if settings.ssl_cafile:
        out["ssl_cafile"] = settings.ssl_cafile
    return out


def producer_options(settings: KafkaSettings) -> dict[str, Any]:
    """kafka-python's producer: :func:`client_options`, acknowledged by every replica,
    idempotent, batched as configured.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> opts = producer_options(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    >>> opts["acks"], opts["enable_idempotence"], opts["batch_size"]
    ('all', True, 1048576)
    """
    return {
        **client_options(settings),
        "acks": "all",
        "enable_idempotence": True,
        "linger_ms": settings.linger_ms,
        "batch_size": settings.producer_batch_bytes,
        "max_request_size": 4 * 1024 * 1024,
    }


def group_consumer_options(settings: KafkaSettings, instance_id: str | None) -> dict[str, Any]:
    """kafka-python's group consumer: :func:`client_options`, offsets committed by the service
    only (with its outputs), read from the earliest when the group has none, large fetches,
    the group's timeouts and the static member id ``instance_id``."""
    return {
        **client_options(settings),
        "group_id": settings.group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "max_poll_records": settings.max_poll_records,
        "fetch_max_bytes": 64 * 1024 * 1024,
        "session_timeout_ms": settings.session_timeout_ms,
        "heartbeat_interval_ms": settings.heartbeat_ms(),
        "group_instance_id": instance_id,
    }


# -- librdkafka -----------------------------------------------------------------------------
def confluent_client_config(settings: KafkaSettings) -> dict[str, Any]:
    """librdkafka properties of every client of the service (servers, id, security), as
    :func:`client_options` gives kafka-python's."""
    out: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "client.id": settings.client_id,
        "security.protocol": settings.security_protocol,
        "reconnect.backoff.max.ms": 1000,  # as kafka-python's: a broker restart stalls ≤ 1 s
        "logger": logging.getLogger("streaming_dpbandit.kafka.librdkafka"),
    }
    if settings.sasl_mechanism:
        out["sasl.mechanism"] = settings.sasl_mechanism
        out["sasl.username"] = settings.sasl_username
        if settings.sasl_password:
            out["sasl.password"] = settings.sasl_password.get_secret_value()
    if settings.ssl_cafile:
        out["ssl.ca.location"] = settings.ssl_cafile
    return out


def confluent_producer_config(settings: KafkaSettings) -> dict[str, Any]:
    """The producer's properties: acknowledged by every replica, idempotent, the Java
    client's partitioner, batched as configured.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> c = confluent_producer_config(KafkaSettings(bootstrap_servers="127.0.0.1:9"))
    >>> c["acks"], c["enable.idempotence"], c["partitioner"], c["batch.size"]
    ('all', True, 'murmur2_random', 1048576)
    """
    return {
        **confluent_client_config(settings),
        "acks": "all",
        "enable.idempotence": True,
        # kafka-python's and the Java client's default: a key keeps its partition whichever
        # client wrote it (librdkafka's own default, consistent_random, hashes with CRC-32)
        "partitioner": "murmur2_random",
        "linger.ms": settings.linger_ms,
        "batch.size": settings.producer_batch_bytes,
        "message.max.bytes": 4 * 1024 * 1024,
    }


def confluent_consumer_config(settings: KafkaSettings, instance_id: str | None) -> dict[str, Any]:
    """The group consumer's properties: offsets committed by the service only, read from the
    earliest when the group has none, the group's protocol, timeouts and static member id.

    >>> from streaming_dpbandit.settings import KafkaSettings
    >>> c = confluent_consumer_config(KafkaSettings(bootstrap_servers="h:1"), "dpbandit-single")
    >>> c["enable.auto.commit"], c["session.timeout.ms"], c["group.instance.id"]
    (False, 10000, 'dpbandit-single')
    """
    out = {
        **confluent_client_config(settings),
        "group.id": settings.group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": settings.session_timeout_ms,
        "heartbeat.interval.ms": settings.heartbeat_ms(),
    }
    if instance_id is not None:
        out["group.instance.id"] = instance_id
    return out
