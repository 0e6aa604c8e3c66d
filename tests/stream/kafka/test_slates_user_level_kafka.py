"""User-level slates through a real Kafka broker (issue 22 §2; docs/privacy/user-level-slates.md):
the single service over Kafka bounds each user's slates exactly as the in-process run does (the
shared slate runtime), and no user id reaches the decisions or dead-letter topics."""

from __future__ import annotations

import json
import os

import pytest

from streaming_dpbandit.config import ServiceSettings
from streaming_dpbandit.testing.kafka_helpers import (
    create_topics,
    kafka_settings,
    produce_file,
    read_topic,
    run_in_thread,
)
from streaming_dpbandit.testing.slate_user_helpers import (
    raw_shoppers_in,
    user_slate_bandit,
    write_user_slate_stream,
)
from streaming_dpbandit.testing.stream_helpers import BANDIT, kafka_topics, run_file

pytestmark = pytest.mark.kafka


def test_user_level_slates_over_kafka_match_the_in_process_run(kafka_broker, tmp_path):
    path = write_user_slate_stream(tmp_path, 300)
    bandits = {BANDIT: user_slate_bandit()}
    ref, _t, ref_summary = run_file(tmp_path / "ref", path, bandits=bandits)
    topics = kafka_topics(f"slateusers{os.getpid()}")
    create_topics(kafka_broker, topics)
    counts = produce_file(kafka_broker.bootstrap, path, topics)
    st = ServiceSettings.model_validate(
        kafka_settings(
            tmp_path / "kafka", kafka_broker.bootstrap, topics, "slateusers", bandits=bandits
        )
    )

    def done(svc) -> bool:  # every context and every feedback message read
        read = {t: 0 for t in ("contexts", "feedback")}
        for (topic, _p), off in svc.offsets.items():
            read[topic.rsplit(".", 1)[1]] += off
        return read == counts and not svc.bandits[BANDIT].join.pending

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=120)
    assert not th.is_alive() and result, "the service did not finish"
    assert svc.state_bytes() == ref.state_bytes()
    c = svc.bandits[BANDIT].policy.user_counters()
    assert c == ref.bandits[BANDIT].policy.user_counters() and c["bounded"] > 50
    assert (
        result[0]["bandits"][BANDIT]["user_level"] == ref_summary["bandits"][BANDIT]["user_level"]
    )
    for topic in ("decisions", "dead_letter"):
        blob = json.dumps(
            [m.value.decode() for m in read_topic(kafka_broker.bootstrap, topics[topic])]
        )
        assert raw_shoppers_in(blob) == [], f"user ids on the {topic} topic"
