"""Replay's join keeps the service's clock (issue 31, item 1): a heartbeat from the future in a
logged stream whose records carry timestamps no longer resolves every later event without its
reward. Before issue 31 the replay join's watermark was the largest feedback event time, and a
heartbeat stamped ``1e300`` after event 50 dropped the rewards of all later events."""

from __future__ import annotations

import pytest

from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
from streaming_dpbandit.replay.readers.join import EventJoin
from streaming_dpbandit.replay.readers.service_jsonl import ServiceJsonlReader

N = 200


def _log(stamped: bool, heartbeat: float | None) -> list[dict]:
    """N events one second apart, each rewarded 0.5 s later; every record stamped when its
    message happens (a decision when its context does), like a topic dump."""
    lines = service_log_lines(N, K=3, d=2, seed=1, feedback_delay=0.5)
    for x in lines:
        t = x["value"].get("event_time", x["value"].get("decided_at"))
        if stamped:
            x["timestamp"] = round(t * 1000)
    if heartbeat is not None:
        at = next(j for j, x in enumerate(lines) if x["value"]["event_id"] == "e-50") + 3
        hb = {"v": 1, "type": "watermark", "bandit_id": "b", "event_time": heartbeat}
        lines.insert(
            at,
            {"topic": "feedback", "value": hb}
            | ({"timestamp": lines[at - 1]["timestamp"]} if stamped else {}),
        )
    return lines


@pytest.mark.parametrize("heartbeat", [1e300, "hour"])
def test_a_heartbeat_from_the_future_drops_no_reward(tmp_path, heartbeat):
    t50 = 1_700_000_000.0 + 50
    when = heartbeat if heartbeat != "hour" else t50 + 3600.0
    p = tmp_path / "log.jsonl"
    write_jsonl(p, _log(True, when))
    reader = ServiceJsonlReader(p, feedback_window=2.0)
    rewards = [r for c in reader.chunks(64) for r in c.rewards]
    assert len(rewards) == N  # every event with its reward (missing ones would be dropped)


def test_the_join_skips_out_of_range_event_times_and_reads_the_record_clock():
    join = EventJoin(feedback_window=2.0)
    ctx = {
        "event_id": "e1",
        "bandit_id": "b",
        "event_time": 1000.0,
        "arms": [{"arm_id": "x", "features": [1.0]}, {"arm_id": "y", "features": [2.0]}],
    }
    dec = {
        "event_id": "e1",
        "bandit_id": "b",
        "arm_id": "y",
        "arm_index": 1,
        "propensity": 0.5,
        "model_version": 0,
        "episode": 0,
        "round": 1,
        "calibration": "certified",
        "policy": "random",
        "decided_at": 1000.0,
    }
    join.add("contexts", ctx, timestamp_ms=1_000_000)
    join.add("decisions", dec, timestamp_ms=1_000_000)
    hb = {"type": "watermark", "bandit_id": "b", "event_time": 1e300}
    join.add("feedback", hb, timestamp_ms=1_000_100)  # beyond the skew: skipped
    join.add("feedback", hb | {"event_time": 1100.0}, timestamp_ms=1_000_200)  # moves nothing
    assert join.counters["event_time_out_of_range"] == 1 and join.watermark == 1000.2
    fb = {"event_id": "e1", "bandit_id": "b", "reward": 1, "event_time": 1001.5}
    join.add("feedback", fb, timestamp_ms=1_001_500)
    assert [(e.event_id, e.reward) for e in join.finish()] == [("e1", 1.0)]


def test_a_log_without_timestamps_keeps_the_event_time_clock(tmp_path):
    """As ``serve --file`` without timestamps: the message's event time is its clock."""
    p = tmp_path / "log.jsonl"
    write_jsonl(p, _log(False, 1_700_000_000.0 + 50 + 3600.0))
    rewards = [r for c in ServiceJsonlReader(p, feedback_window=2.0).chunks(64) for r in c.rewards]
    assert len(rewards) == 51  # e-0 … e-50; every later event expired at once (dropped)
