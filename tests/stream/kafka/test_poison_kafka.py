"""No input may stop the loop, through a real broker (issue 19, item 1): the hand-picked poison
of ``test_poison_input.py`` (the issue's 400-digit event time on both topics, tombstones,
bytes that are no JSON, nesting deeper than any parser's stack) is dead-lettered once each and
the good contexts around it are decided."""

from __future__ import annotations

import json
import os

import pytest
from kafka import KafkaProducer

from dpbandit_testing.kafka_helpers import (
    create_topics,
    kafka_settings,
    read_topic,
    run_in_thread,
)
from dpbandit_testing.poison_helpers import (
    CONTEXTS,
    FIXED,
    T0,
    dumps,
    good_context,
    good_feedback,
)
from dpbandit_testing.stream_helpers import BANDIT, kafka_topics
from streaming_dpbandit.settings import ServiceSettings

pytestmark = pytest.mark.kafka

STAMP = round((T0 + 100) * 1000)  # the record timestamp: when the good events happen


def test_poison_through_kafka_is_dead_lettered_and_the_loop_goes_on(kafka_broker, tmp_path):
    topics = kafka_topics(f"poison{os.getpid()}")
    create_topics(kafka_broker, topics)
    records = [(t == CONTEXTS, v) for t, v in FIXED]
    records += [(True, dumps(good_context(100 + i))) for i in range(5)]
    records += [(False, dumps(good_feedback(100 + i))) for i in range(5)]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    counts = {"contexts": 0, "feedback": 0}
    for is_ctx, value in records:
        kind = "contexts" if is_ctx else "feedback"
        # one key: one partition; stamped when the good events happen (the stream clock)
        producer.send(topics[kind], key=BANDIT.encode(), value=value, timestamp_ms=STAMP)
        counts[kind] += 1
    producer.flush()
    producer.close()
    cfg = kafka_settings(
        tmp_path / "state", kafka_broker.bootstrap, topics, "poison", max_message_bytes=10**6
    )
    st = ServiceSettings.model_validate(cfg)

    def done(s):
        total = {"contexts": 0, "feedback": 0}
        for (t, _), off in s.offsets.items():
            total["contexts" if t.endswith("contexts") else "feedback"] += off
        return total == counts

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=120)
    assert result, "the service did not get through the poison"
    decided = [
        json.loads(m.value)["event_id"]
        for m in read_topic(kafka_broker.bootstrap, topics["decisions"])
    ]
    assert sorted(decided) == [f"e{100 + i}" for i in range(5)]
    dead = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, topics["dead_letter"])]
    by_topic = {}
    for dl in dead:
        by_topic.setdefault(dl["source_topic"], []).append(dl["offset"])
    n_ctx_poison = sum(1 for is_ctx, _ in records[: len(FIXED)] if is_ctx)
    # every poisoned context once; every poisoned feedback message once (the good ones join)
    assert sorted(by_topic[topics["contexts"]]) == list(range(n_ctx_poison))
    assert sorted(by_topic[topics["feedback"]]) == list(range(len(FIXED) - n_ctx_poison))
    assert svc.bandits[BANDIT].stats["joined"] == 5
