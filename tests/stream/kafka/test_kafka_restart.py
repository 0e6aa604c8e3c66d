"""Restarts through a real broker (issue 19, item 4): a single-mode service restarted after
``kill -9`` or SIGTERM gets its partitions back without waiting out the session of the process
it replaces, and a second process claiming the same static membership stops the first with a
clear error.

The session here is 60 s (``kafka.session_timeout_ms``): before issue 19 a restarted process
waited for the broker to drop the killed member (kafka-python's 45-s default session), so
getting the partitions within half the session shows the restart did not wait for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import yaml
from kafka import KafkaProducer

from dpbandit_testing.stream_helpers import BANDIT, D, bandit_config, kafka_topics
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.messages import context_value
from streaming_dpbandit.stream.runner import kafka_transport
from streaming_dpbandit.stream.transport import Transport

pytestmark = pytest.mark.kafka

SESSION_MS = 60_000


def settings_data(bootstrap: str, name: str, state_dir, **kafka) -> dict:
    return {
        "mode": "service",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "group_id": name,
            "topics": kafka_topics(name),
            "create_topics": True,
            "partitions": 2,
            "poll_timeout_ms": 50,
            "session_timeout_ms": SESSION_MS,
            **kafka,
        },
        "bandits": {BANDIT: bandit_config()},
        "snapshots": {"directory": str(state_dir)},
        "metrics": {"enabled": False},
        "progress": False,
    }


def settings(*args, **kw) -> ServiceSettings:
    return ServiceSettings.model_validate(settings_data(*args, **kw))


def serve(data: dict, tmp_path, log) -> subprocess.Popen:
    """``dpbandit serve`` with these settings, in a process of its own."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return subprocess.Popen(
        [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(cfg)],
        stdout=log,
        stderr=log,
    )


def wait_assigned(proc_log, timeout: float) -> None:
    """Until a ``partitions assigned: [...]`` line with partitions appears in the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "partitions assigned: [(" in proc_log.read_text():
            return
        time.sleep(0.1)
    pytest.fail(f"no partitions within {timeout:.0f} s; see {proc_log}")


def seconds_to_partitions(transport: Transport, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        transport.poll(100, 0.1)
        if transport.assigned():
            return time.monotonic() - t0
    return float("inf")


@pytest.mark.parametrize(
    "how, kafka",
    [
        ("kill_9", {}),  # the default: static membership
        ("sigterm", {}),
        ("sigterm", {"static_membership": False}),  # a dynamic member leaves the group
    ],
)
def test_a_restart_gets_the_partitions_without_waiting_for_the_session(
    kafka_broker, tmp_path, how, kafka, kafka_client
):
    name = f"restart-{how}-{len(kafka)}-{os.getpid()}-{kafka_client}"
    data = settings_data(
        kafka_broker.bootstrap, name, tmp_path / "state", client=kafka_client, **kafka
    )
    st = ServiceSettings.model_validate(data)
    log_path = tmp_path / "serve.log"
    with log_path.open("a") as log:
        proc = serve(data, tmp_path, log)
        try:
            wait_assigned(log_path, 120)
        finally:
            proc.send_signal(signal.SIGKILL if how == "kill_9" else signal.SIGTERM)
            assert proc.wait(60) in (0, -signal.SIGKILL)
    transport = kafka_transport(st.kafka)
    transport.open({})
    try:
        waited = seconds_to_partitions(transport, SESSION_MS / 1000)
    finally:
        transport.close()
    assert waited < SESSION_MS / 2000, f"{waited:.1f} s: the restart waited for the session"


def test_a_second_process_with_the_same_static_membership_stops_the_first(
    kafka_broker, tmp_path, kafka_client
):
    """Single mode runs one process per group; a second one with the same (default)
    ``group.instance.id`` fences the first, which stops with one clear error line and exit
    status 2 at its next offset commit (after a snapshot) instead of going on deciding next to
    it."""
    name = f"fenced-{os.getpid()}-{kafka_client}"
    log_path = tmp_path / "a.log"
    data = settings_data(kafka_broker.bootstrap, name, tmp_path / "a", client=kafka_client)
    data["snapshots"]["interval_s"] = 1.0
    with log_path.open("a") as log:
        first = serve(data, tmp_path, log)
        try:
            wait_assigned(log_path, 120)
            producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
            for i in range(20):  # offsets to commit
                value = context_value(f"e{i}", BANDIT, 1000.0 + i, np.ones((3, D)) / D, list("abc"))
                producer.send(f"{name}.contexts", key=BANDIT.encode(), value=value)
            producer.flush()
            producer.close()
            other = settings(kafka_broker.bootstrap, name, tmp_path / "b", client=kafka_client)
            transport = kafka_transport(other.kafka)
            transport.open({})
            try:
                assert seconds_to_partitions(transport, 60) < 60
                code = first.wait(60)
            finally:
                transport.close()
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    err = log_path.read_text()
    assert code == 2, textwrap.shorten(err, 2000)
    assert f"another process joined consumer group {name!r} as static member" in err
    assert "Traceback" not in err


def test_librdkafka_recreates_a_consumer_fenced_right_after_broker_trouble(kafka_broker, tmp_path):
    """librdkafka makes a fenced static member's error fatal, also when the member fenced
    itself (it re-joined with a new member id after its session expired while the broker was
    away, and a commit still carried the old id; seen in the ``kill -9`` test's broker restart).
    Right after broker trouble the confluent transport re-creates its consumer and gets its
    partitions back; without trouble the same fencing is another process: the one-line error.
    Here a second member with the same id produces the fencing."""
    from streaming_dpbandit.stream.errors import ServiceStartError

    def fenced_first(name: str, trouble: bool):
        st = settings(kafka_broker.bootstrap, name, tmp_path / name, client="confluent-kafka")
        first, second = kafka_transport(st.kafka), kafka_transport(st.kafka)
        first.open({})
        assert seconds_to_partitions(first, 60) < 60
        second.open({})
        assert seconds_to_partitions(second, 60) < 60  # takes the static member's place
        first.commit({(f"{name}.contexts", 0): 0})  # refused: fenced (fatal)
        if trouble:
            # as a lost session or a broker error sets it
            first.consumer._trouble_at = time.monotonic()
        return first, second

    name = f"selffence-{os.getpid()}"
    first, second = fenced_first(name, trouble=True)
    try:
        deadline = time.monotonic() + 60
        while first.join_restarts == 0 and time.monotonic() < deadline:
            first.poll(100, 0.1)
        assert first.join_restarts == 1
        assert seconds_to_partitions(first, 60) < 60  # a member again
    finally:
        first.close()
        second.close()
    name = f"fenced2-{os.getpid()}"
    first, second = fenced_first(name, trouble=False)
    try:
        with pytest.raises(ServiceStartError, match="another process joined consumer group"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                first.poll(100, 0.1)
        assert first.join_restarts == 0
    finally:
        first.close()
        second.close()
