"""User-level slates through a real Kafka broker (issue 22 §2; docs/privacy/user-level-slates.md):
the single service over Kafka bounds each user's slates exactly as the in-process run does (the
shared slate runtime), and no user id reaches the decisions or dead-letter topics."""

from __future__ import annotations

import json
import os

import pytest

from dpbandit_testing.kafka_helpers import read_topic, serve_file_over_kafka
from dpbandit_testing.slate_user_helpers import (
    raw_shoppers_in,
    user_slate_bandit,
    write_user_slate_stream,
)
from dpbandit_testing.stream_helpers import BANDIT, run_file

pytestmark = pytest.mark.kafka


def test_user_level_slates_over_kafka_match_the_in_process_run(kafka_broker, tmp_path):
    path = write_user_slate_stream(tmp_path, 300)
    bandits = {BANDIT: user_slate_bandit()}
    ref, _t, ref_summary = run_file(tmp_path / "ref", path, bandits=bandits)
    svc, summary, topics = serve_file_over_kafka(
        kafka_broker, path, tmp_path / "kafka", f"slateusers{os.getpid()}", bandits
    )
    assert svc.state_bytes() == ref.state_bytes()
    c = svc.bandits[BANDIT].policy.user_counters()
    assert c == ref.bandits[BANDIT].policy.user_counters() and c["bounded"] > 50
    assert summary["bandits"][BANDIT]["user_level"] == ref_summary["bandits"][BANDIT]["user_level"]
    for topic in ("decisions", "dead_letter"):
        blob = json.dumps(
            [m.value.decode() for m in read_topic(kafka_broker.bootstrap, topics[topic])]
        )
        assert raw_shoppers_in(blob) == [], f"user ids on the {topic} topic"
