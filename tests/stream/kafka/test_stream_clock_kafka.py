"""One heartbeat from the future no longer stops learning, through a real broker (issue 31,
item 1; the in-process cases are in tests/stream/test_stream_clock.py).

A FLIPHAT bandit with a 2 s feedback window: contexts 0.1 s apart, each rewarded 0.05 s later,
every record stamped when its message happens (the producer's CreateTime). After event 100 a
heartbeat ``{"type": "watermark", "event_time": 1e300}``; the service stops and restarts, and
after event 700 comes a heartbeat stamped an hour ahead. Before issue 31 the first heartbeat
expired every later join (101 of 1,200 rewards joined) and, kept in the snapshot, made every
reward after the restart ``unknown_event``. The target: ≥ 99 % of the valid rewards joined
after each heartbeat, before and after the restart, on both Kafka clients.
"""

from __future__ import annotations

import json
import os

import pytest

from dpbandit_testing.clock_helpers import clock_stream, count, write_lines
from dpbandit_testing.kafka_helpers import (
    create_topics,
    kafka_settings,
    produce_file,
    read_topic,
    run_in_thread,
)
from dpbandit_testing.stream_helpers import BANDIT, kafka_topics
from streaming_dpbandit.settings import ServiceSettings

pytestmark = pytest.mark.kafka

HALF = 600


def _serve_until_read(bootstrap, topics, state, group, client, counts):
    """Run the service until it has read ``counts`` records per input topic; its summary."""
    st = ServiceSettings.model_validate(
        kafka_settings(state, bootstrap, topics, group, client=client)
    )

    def done(svc) -> bool:
        read = {"contexts": 0, "feedback": 0}
        for (topic, _), off in svc.offsets.items():
            read[topic.rsplit(".", 1)[1]] += off
        return read == counts and not svc.bandits[BANDIT].join.pending

    _svc, th, result = run_in_thread(st, done)
    th.join(timeout=300)
    assert not th.is_alive() and result, "the service did not read its input"
    return result[0]


def test_a_heartbeat_from_the_future_stops_no_learning_across_a_restart(
    kafka_broker, tmp_path, kafka_client
):
    topics = kafka_topics(f"clock{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    first = clock_stream(HALF, after=100, heartbeat=1e300)
    second = clock_stream(HALF, start=HALF, after=HALF + 100, heartbeat="hour")
    counts = produce_file(kafka_broker.bootstrap, write_lines(tmp_path / "a.jsonl", first), topics)
    state = tmp_path / "state"
    group = f"clock-{kafka_client}"
    s1 = _serve_until_read(kafka_broker.bootstrap, topics, state, group, kafka_client, counts)
    more = produce_file(kafka_broker.bootstrap, write_lines(tmp_path / "b.jsonl", second), topics)
    counts = {k: counts[k] + more[k] for k in counts}
    s2 = _serve_until_read(kafka_broker.bootstrap, topics, state, group, kafka_client, counts)

    dead = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, topics["dead_letter"])]
    before, after = count(s1, []), count(s2, dead)
    print(f"{kafka_client}: before the restart {before}; after it {after}")
    # before the restart: 600 rewards, all valid; after it, 600 more
    assert before["joined"] >= 0.99 * HALF
    assert after["joined"] - before["joined"] >= 0.99 * HALF
    reasons = [d["reason"] for d in dead]
    assert reasons == ["event_time_out_of_range"] * 2  # the two heartbeats, nothing else
