"""Kafka client setup that needs no broker: the pure-Python CRC warning."""

from __future__ import annotations

import logging

from kafka.record import util

from streaming_dpbandit.config import KafkaSettings
from streaming_dpbandit.stream import kafka_transport


def test_a_missing_native_crc32c_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(kafka_transport, "_SLOW_CRC_WARNED", [False])
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="streaming_dpbandit.kafka"):
        kafka_transport._common(settings)  # the native CRC is installed: silent
        assert not caplog.records
        monkeypatch.setattr(util, "crc32c_c", None)
        kafka_transport._common(settings)
        kafka_transport._common(settings)
    assert [r.getMessage() for r in caplog.records] == [
        "kafka-python checks record CRC-32C in pure Python, about 3x slower: install the "
        "'crc32c' package (pip install 'kafka-python[crc32c]')"
    ]
