"""Kafka client setup that needs no broker: the pure-Python CRC warning, the consumers' group
settings, the choice of client and its configuration errors."""

from __future__ import annotations

import logging

import pytest
from kafka.record import util
from pydantic import ValidationError

from streaming_dpbandit.settings import KafkaSettings
from streaming_dpbandit.stream.kafka import transport as kafka_transport


def test_a_missing_native_crc32c_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(kafka_transport, "_SLOW_CRC_WARNED", [False])
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="streaming_dpbandit.kafka"):
        kafka_transport.client_options(settings)  # the native CRC is installed: silent
        assert not caplog.records
        monkeypatch.setattr(util, "crc32c_c", None)
        kafka_transport.client_options(settings)
        kafka_transport.client_options(settings)
    assert [r.getMessage() for r in caplog.records] == [
        "kafka-python checks record CRC-32C in pure Python, about 3x slower: install the "
        "'crc32c' package (pip install 'kafka-python[crc32c]')"
    ]


def test_session_heartbeat_and_static_membership_reach_the_consumer(monkeypatch):
    """Issue 19, item 4: the single-mode consumer takes its session, heartbeat and static
    membership from the ``kafka`` settings (kafka-python's defaults, a 45-s session and a
    dynamic member, made a restart after ``kill -9`` wait for the old member's session)."""
    import kafka

    created = []

    class Consumer:
        def __init__(self, **kw):
            created.append(kw)

        def partitions_for_topic(self, topic):
            return {0}

        def subscribe(self, topics, listener):
            pass

    monkeypatch.setattr(kafka, "KafkaConsumer", Consumer)
    for data, expected in [
        ({}, (10_000, 2_000, "dpbandit-single")),
        ({"session_timeout_ms": 6000, "group_id": "a b"}, (6_000, 1_200, "a_b-single")),
        ({"heartbeat_interval_ms": 500, "group_instance_id": "pod-0"}, (10_000, 500, "pod-0")),
        ({"static_membership": False}, (10_000, 2_000, None)),
    ]:
        t = kafka_transport.KafkaTransport(KafkaSettings(bootstrap_servers="127.0.0.1:9", **data))
        t.settings = t.settings.model_copy(update={"create_topics": False})
        t.start_offsets, t.delivered, t.paused = {}, {}, set()
        t._join()
        kw = created[-1]
        assert (
            kw["session_timeout_ms"],
            kw["heartbeat_interval_ms"],
            kw["group_instance_id"],
        ) == expected, data


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"kafka": {"bootstrap_servers": "h:1", "heartbeat_interval_ms": 10_000}},
            "heartbeat_interval_ms (10000) must be below session_timeout_ms (10000)",
        ),
        (
            {"kafka": {"bootstrap_servers": "h:1", "group_instance_id": "a/b"}},
            "group_instance_id",
        ),
        (
            {"kafka": {"bootstrap_servers": "h:1"}, "scaling": {"session_timeout_ms": 6000}},
            "scaling.session_timeout_ms moved to kafka.session_timeout_ms",
        ),
    ],
)
def test_bad_session_settings_are_one_clear_error(data, message):
    from streaming_dpbandit.settings import ServiceSettings

    with pytest.raises(ValidationError) as err:
        ServiceSettings.model_validate({"mode": "service", **data})
    assert message in str(err.value)


def test_the_confluent_consumer_gets_the_same_session_and_static_membership():
    """``kafka.client: confluent-kafka``: the librdkafka consumer takes the same session,
    heartbeat, static member id and manual offsets as kafka-python's."""
    from streaming_dpbandit.stream.kafka.confluent import confluent_consumer_config

    for data, expected in [
        ({}, (10_000, 2_000, "dpbandit-single")),
        ({"session_timeout_ms": 6000, "group_id": "a b"}, (6_000, 1_200, "a_b-single")),
        ({"heartbeat_interval_ms": 500, "group_instance_id": "pod-0"}, (10_000, 500, "pod-0")),
        ({"static_membership": False}, (10_000, 2_000, None)),
    ]:
        s = KafkaSettings(bootstrap_servers="127.0.0.1:9", client="confluent-kafka", **data)
        c = confluent_consumer_config(s, s.instance_id(single=True))
        got = (c["session.timeout.ms"], c["heartbeat.interval.ms"], c.get("group.instance.id"))
        assert got == expected, data
        assert c["enable.auto.commit"] is False and c["auto.offset.reset"] == "earliest"


def test_the_runner_builds_the_configured_client():
    from streaming_dpbandit.stream.kafka.confluent import ConfluentTransport
    from streaming_dpbandit.stream.runner import kafka_transport as build

    for client, cls in [
        ("kafka-python", kafka_transport.KafkaTransport),  # (the module imported above)
        ("confluent-kafka", ConfluentTransport),
    ]:
        assert type(build(KafkaSettings(bootstrap_servers="h:1", client=client))) is cls


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"scaling": {"mode": "group"}},
            "kafka.client 'confluent-kafka' runs scaling.mode 'single' only",
        ),
        (
            {"broadcast": {"role": "learner"}},
            "kafka.client 'confluent-kafka' runs scaling.mode 'single' only",
        ),
    ],
)
def test_confluent_kafka_outside_single_mode_is_one_clear_error(data, message):
    from streaming_dpbandit.settings import ServiceSettings

    kafka = {"bootstrap_servers": "h:1", "client": "confluent-kafka"}
    with pytest.raises(ValidationError) as err:
        ServiceSettings.model_validate({"mode": "service", "kafka": kafka, **data})
    assert message in str(err.value)


def test_confluent_kafka_not_installed_is_one_clear_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "confluent_kafka" else real(name, *a),
    )
    with pytest.raises(ValidationError) as err:
        KafkaSettings(bootstrap_servers="h:1", client="confluent-kafka")
    assert "client 'confluent-kafka' needs the confluent-kafka package: pip install" in str(
        err.value
    )
    KafkaSettings(bootstrap_servers="h:1")  # the default client needs nothing more
