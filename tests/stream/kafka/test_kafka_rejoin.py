"""The Kafka transport recovers from a stalled consumer-group re-join (real broker).

kafka-python 3.0.12 can hang in a re-join: it disables heartbeats for the JoinGroup/SyncGroup
round trip, the response never completes, the broker removes the member and the client never
joins again (docs/operations.md). The hang is reproduced here by making the coordinator's
join attempt never finish after a rebalance request. The single-process transport's watchdog
must re-create the consumer and deliver every remaining record exactly once, from where
deliveries stopped; a group replica and a broadcast decision replica must replace their
consumer too and own their partitions again (they used to exit and wait for a supervisor).
"""

from __future__ import annotations

import os
import time

import pytest
from kafka import KafkaProducer
from kafka.structs import MemberState

from dpbandit_testing.stream_helpers import BANDIT, bandit_config, kafka_topics
from streaming_dpbandit.settings import KafkaSettings
from streaming_dpbandit.stream.kafka.transport import KafkaTransport

pytestmark = pytest.mark.kafka

N = 300


def _produce(bootstrap: str, topic: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(n):
        producer.send(topic, key=b"k", value=str(i).encode())
    producer.flush()
    producer.close()


def _stall_the_next_join(consumer) -> None:
    """Make the coordinator's next JoinGroup/SyncGroup attempt hang for ever, then ask for it."""
    coord = consumer._coordinator

    async def hang():
        with coord._lock:
            coord.state = MemberState.REBALANCING
        await coord._manager._net.sleep(3600)

    coord._do_join_and_sync_async = hang
    coord.request_rejoin()


def test_a_stalled_rejoin_recreates_the_consumer_and_loses_nothing(kafka_broker):
    name = f"rejoin{os.getpid()}"
    topics = kafka_topics(name)
    for t in topics.values():
        kafka_broker.create_topic(t, 1)
    _produce(kafka_broker.bootstrap, topics["contexts"], N)
    settings = KafkaSettings(
        bootstrap_servers=kafka_broker.bootstrap,
        group_id=name,
        topics=topics,
        create_topics=False,
        max_poll_records=50,
        rejoin_stall_s=2.0,
    )
    transport = KafkaTransport(settings)
    transport.open({})
    got: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < 100 and time.monotonic() < deadline:
            got += [r.offset for r in transport.poll(50, 0.2)]
        assert len(got) >= 100, "the consumer never started"
        stalled = transport.consumer.client  # (kafka-python's KafkaConsumer)
        _stall_the_next_join(stalled)
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            got += [r.offset for r in transport.poll(50, 0.2)]
    finally:
        transport.close()
    # (one re-creation; a second when the new member also waits out a slow rebalance)
    assert transport.join_restarts >= 1 and transport.consumer.client is not stalled
    assert got == list(range(N))  # every record once, in order: resumed where deliveries stopped


def _assert_recovers_from_a_stalled_rejoin(service, owned) -> None:
    """Open and run a group member; once it owns partitions 0 and 1, hang its re-join; within
    30 s it must replace the stalled consumer and own partitions 0 and 1 again (``owned``
    reads what it owns: the consumer's assignment, or a group replica's open tasks)."""
    import threading

    service.open()
    outcome: dict = {}

    def progress(svc):
        client = svc.consumer.client  # (kafka-python's KafkaConsumer)
        if "t0" not in outcome and owned(svc) == [0, 1]:
            outcome["stalled"] = client
            outcome["t0"] = time.monotonic()
            _stall_the_next_join(client)
        elif "t0" in outcome and client is not outcome["stalled"] and owned(svc) == [0, 1]:
            outcome["t1"] = time.monotonic()
            svc.request_stop()
        if time.monotonic() - outcome.get("t0", time.monotonic()) > 60:
            svc.request_stop()  # it never recovered: fail in the caller instead of hanging

    def run():
        try:
            service.run(progress)
        except Exception as err:  # reported by the assertions below
            outcome["error"] = f"{type(err).__name__}: {err}"

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(120)
    assert not th.is_alive()
    assert "error" not in outcome, outcome
    assert "t0" in outcome, "never owned partitions 0 and 1"
    assert service.join_restarts == 1, outcome
    assert "t1" in outcome and outcome["t1"] - outcome["t0"] < 30, outcome


def test_a_stalled_rejoin_makes_a_group_replica_rejoin_with_a_new_consumer(kafka_broker):
    """Group mode: the watchdog drops the tasks (the broker moved them) and joins again."""
    from streaming_dpbandit.settings import ServiceSettings
    from streaming_dpbandit.stream.scaling.group import GroupService

    name = f"rejoingroup{os.getpid()}"
    st = ServiceSettings.model_validate(
        {
            "mode": "service",
            "kafka": {
                "bootstrap_servers": kafka_broker.bootstrap,
                "group_id": name,
                "topics": kafka_topics(name),
                "create_topics": True,
                "partitions": 2,
                "poll_timeout_ms": 50,
                "rejoin_stall_s": 2.0,
                "session_timeout_ms": 10_000,
            },
            "scaling": {"mode": "group"},
            "bandits": {BANDIT: bandit_config()},
            "metrics": {"enabled": False},
            "progress": False,
        }
    )
    _assert_recovers_from_a_stalled_rejoin(GroupService(st), lambda svc: sorted(svc.tasks))


def test_a_stalled_rejoin_makes_a_decision_replica_rejoin_with_a_new_consumer(
    kafka_broker, tmp_path
):
    """Broadcast mode: a decision replica (stateless) replaces its consumer too."""
    from dpbandit_testing.broadcast_kafka import settings_for
    from streaming_dpbandit.stream.scaling.replica import DecisionReplica

    name = f"rejoinbc{os.getpid()}"
    topics = kafka_topics(name) | {"models": f"{name}.models"}
    for key, t in topics.items():
        configs = {"cleanup.policy": "compact"} if key == "models" else None
        kafka_broker.create_topic(t, 2, configs=configs)
    st = settings_for("decider", topics, kafka_broker.bootstrap, tmp_path / "r", "r0")
    st = st.model_copy(update={"kafka": st.kafka.model_copy(update={"rejoin_stall_s": 2.0})})
    _assert_recovers_from_a_stalled_rejoin(
        DecisionReplica(st), lambda svc: sorted(p for _t, p in svc.assigned())
    )
