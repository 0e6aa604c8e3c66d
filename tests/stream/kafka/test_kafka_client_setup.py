"""Kafka client setup that needs no broker: the pure-Python CRC warning, the consumers' group
settings, the choice of client and its configuration errors."""

from __future__ import annotations

import logging

import pytest
from kafka.record import util
from pydantic import ValidationError

from streaming_dpbandit.settings import KafkaSettings
from streaming_dpbandit.stream.kafka import options as kafka_options
from streaming_dpbandit.stream.kafka.python_client import KafkaPythonClient
from streaming_dpbandit.stream.kafka.transport import KafkaTransport


def test_a_missing_native_crc32c_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(kafka_options, "_SLOW_CRC_WARNED", [False])
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")
    with caplog.at_level(logging.WARNING, logger="streaming_dpbandit.kafka"):
        kafka_options.client_options(settings)  # the native CRC is installed: silent
        assert not caplog.records
        monkeypatch.setattr(util, "crc32c_c", None)
        kafka_options.client_options(settings)
        kafka_options.client_options(settings)
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
        s = KafkaSettings(bootstrap_servers="127.0.0.1:9", **data)
        KafkaPythonClient().group_consumer(s, s.instance_id(single=True)).subscribe([], None)
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
    from streaming_dpbandit.stream.kafka.options import confluent_consumer_config

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
    from streaming_dpbandit.stream.runner import kafka_transport as build

    for client in ("kafka-python", "confluent-kafka"):
        t = build(KafkaSettings(bootstrap_servers="h:1", client=client))
        assert type(t) is KafkaTransport and t.client.name == client


@pytest.mark.parametrize(
    "data",
    [{"scaling": {"mode": "group"}}, {"broadcast": {"role": "learner"}}],
    ids=["group", "broadcast"],
)
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_every_scaling_mode_runs_on_librdkafka(data, protocol):
    """Issue 32: group mode and the model broadcast run on confluent-kafka too (they used to
    be refused with 'runs scaling.mode single only'), with either group protocol."""
    from streaming_dpbandit.settings import ServiceSettings

    kafka = {"bootstrap_servers": "h:1", "client": "confluent-kafka", "group_protocol": protocol}
    st = ServiceSettings.model_validate({"mode": "service", "kafka": kafka, **data})
    assert st.kafka.client == "confluent-kafka" and st.kafka.group_protocol == protocol


@pytest.mark.parametrize(
    "kafka, message",
    [
        (
            {"group_protocol": "consumer"},
            "kafka.group_protocol 'consumer' (KIP-848) needs kafka.client 'confluent-kafka': "
            "kafka-python speaks the classic protocol only",
        ),
        (
            {"client": "confluent-kafka", "rejoin_stall_s": 30},
            "kafka.rejoin_stall_s is kafka-python's re-join stall watchdog",
        ),
        (
            {"client": "confluent-kafka", "group_protocol": "consumer", "session_timeout_ms": 6000},
            "kafka.session_timeout_ms is the broker's under group_protocol 'consumer'",
        ),
        (
            {
                "client": "confluent-kafka",
                "group_protocol": "consumer",
                "heartbeat_interval_ms": 500,
            },
            "kafka.heartbeat_interval_ms is the broker's under group_protocol 'consumer'",
        ),
    ],
)
def test_an_option_the_client_does_not_have_is_one_line_and_exit_2(
    tmp_path, capsys, kafka, message
):
    """Never silently ignored: ``dpbandit serve`` stops before it starts, one line, exit 2."""
    import yaml

    from streaming_dpbandit.cli import main

    cfg = tmp_path / "serve.yaml"
    cfg.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": "127.0.0.1:9", **kafka}}))
    try:
        code = main(["serve", "--config", str(cfg)])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


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
