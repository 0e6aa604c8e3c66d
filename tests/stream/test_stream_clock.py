"""Joins expire on the stream clock, never ahead of it (issue 31, item 1; through a broker:
tests/stream/kafka/test_stream_clock_kafka.py).

The issue's cases, on the in-process service over a JSONL file stamped like a Kafka topic dump
(``serve --file``): a FLIPHAT bandit (2 s window), 1,200 contexts 0.1 s apart, each rewarded
0.05 s later. Before issue 31 one heartbeat stamped ``1e300`` (or an hour ahead) after event
100 expired every later join: 101 rewards joined, 1,099 expired, 1,098 dead-lettered
``unknown_event`` — for events that had been decided; kept in the snapshot, it did the same
after a restart. Contexts stamped 0 or −1e10 were decided and their joins expired at once.
"""

from __future__ import annotations

import logging

import pytest

from dpbandit_testing.clock_helpers import T0, clock_stream, count, write_lines
from dpbandit_testing.stream_helpers import BANDIT, dead_letters, run_file
from streaming_dpbandit.stream.snapshot import SnapshotStore

N = 1200


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The stream without any heartbeat: every reward joins."""
    d = tmp_path_factory.mktemp("clock-ref")
    svc, transport, summary = run_file(d / "s", write_lines(d / "in.jsonl", clock_stream()))
    assert count(summary, dead_letters(transport)) == {"joined": N, "expired": 0, "dead": {}}
    return svc.state_bytes()


def _run(tmp_path, lines, **settings):
    tmp_path.mkdir(exist_ok=True)
    svc, transport, summary = run_file(
        tmp_path / "state", write_lines(tmp_path / "in.jsonl", lines), **settings
    )
    return svc, transport, count(summary, dead_letters(transport))


@pytest.mark.parametrize("heartbeat", [1e300, "hour"])
def test_a_heartbeat_beyond_the_skew_is_dead_lettered_and_stops_nothing(
    tmp_path, reference, heartbeat
):
    svc, transport, got = _run(tmp_path, clock_stream(heartbeat=heartbeat))
    assert got == {"joined": N, "expired": 0, "dead": {"event_time_out_of_range": 1}}
    (dead,) = dead_letters(transport)
    assert "ahead of the stream clock" in dead["detail"]
    assert svc.state_bytes() == reference  # learned exactly as without it


def test_an_event_time_within_the_skew_moves_no_clock(tmp_path, reference):
    """A heartbeat 200 s ahead (within max_event_time_skew_s) is accepted: its record's
    timestamp is a clock reading, its event time is not — nothing expires early."""
    svc, _, got = _run(tmp_path, clock_stream(heartbeat=T0 + 100 * 0.1 + 200.0))
    assert got == {"joined": N, "expired": 0, "dead": {}}
    assert svc.state_bytes() == reference


def test_a_reward_stamped_ahead_expires_no_other_join(tmp_path):
    """Event 100's reward stamped 200 s ahead: it is outside its own window (its decision
    expires); every other reward still joins."""
    _, _, got = _run(tmp_path, clock_stream(reward_times={100: T0 + 210.0}))
    assert got == {"joined": N - 1, "expired": 1, "dead": {"feedback_after_expiry": 1}}


def test_a_context_stamped_ahead_waits_no_longer_than_its_window(tmp_path):
    """Event 300's context stamped 250 s ahead (within the skew) is decided; its join closes
    a window after its record's clock, so the next release does not wait 250 s for it."""
    lines = clock_stream(context_times={300: T0 + 300 * 0.1 + 250.0})
    _, _, got = _run(tmp_path, lines)
    # its reward (stamped 250 s ahead as well) arrives before the window of its record closes
    assert got["joined"] == N and got["dead"] == {}


@pytest.mark.parametrize("when", [0.0, -1e10, T0 - 2 * 86_400.0])
def test_a_context_from_the_far_past_is_dead_lettered(tmp_path, when):
    _, transport, got = _run(tmp_path, clock_stream(context_times={300: when}))
    # the context and its reward (stamped 0.05 s after it) are both beyond the lower bound
    assert got == {"joined": N - 1, "expired": 0, "dead": {"event_time_out_of_range": 2}}
    assert all("behind the stream clock" in d["detail"] for d in dead_letters(transport))


def test_the_lower_bound_is_configurable_and_can_be_switched_off(tmp_path):
    lines = clock_stream(context_times={300: T0 - 3600.0})
    for lag, dead in ((7200.0, 0), (600.0, 2)):
        _, _, got = _run(tmp_path / str(lag), lines, max_event_time_lag_s=lag)
        assert got["dead"].get("event_time_out_of_range", 0) == dead, lag
    _, _, got = _run(tmp_path / "off", lines, max_event_time_lag_s=None)
    assert "event_time_out_of_range" not in got["dead"]


def test_a_snapshot_holding_a_clock_from_the_future_is_repaired_at_start(tmp_path, caplog):
    """What a version before issue 31 wrote after the heartbeat: the join's clock at 1e300.
    It is repaired at start with one warning line, and the events after the restart join."""
    state = tmp_path / "state"
    first = clock_stream(600, after=None)
    run_file(state, write_lines(tmp_path / "a.jsonl", first))
    store = SnapshotStore(state)
    snap = store.load()
    snap["bandits"][BANDIT]["join"]["feedback_watermark"] = 1e300
    store.save(snap)
    both = first + clock_stream(600, start=600, after=None)
    with caplog.at_level(logging.WARNING, logger="streaming_dpbandit.service"):
        _, transport, summary = run_file(state, write_lines(tmp_path / "b.jsonl", both))
    warnings = [r for r in caplog.records if r.name == "streaming_dpbandit.service"]
    assert len(warnings) == 1 and "repaired" in warnings[0].getMessage()
    assert count(summary, dead_letters(transport)) == {"joined": N, "expired": 0, "dead": {}}


@pytest.fixture(scope="module")
def slates(tmp_path_factory):
    """A recorded slate stream (600 requests, per-item rewards) and what it teaches."""
    from dpbandit_testing.slate_helpers import (
        PARTITION40,
        PartitionEnv,
        record_slate_stream,
        slate_bandit,
    )

    d = tmp_path_factory.mktemp("clock-slates")
    policy = {"policy": "dpts-mat", "matroid": PARTITION40, "epsilon": 1.0, "update_every": 32}
    bandit = slate_bandit(policy)
    path = d / "slates.jsonl"
    record_slate_stream(path, 600, PartitionEnv(), bandit, seed=3, state_dir=d / "rec")
    ref, _, _ = run_file(d / "ref", path, bandits={BANDIT: bandit})
    return path, bandit, ref.state_bytes()


@pytest.mark.parametrize("ahead", [1e300, 3600.0])
def test_the_slate_join_keeps_the_same_clock(tmp_path, slates, ahead):
    """A slate bandit (per-item rewards, default fill at expiry) behind the same rules: the
    heartbeat from the future is dead-lettered and the bandit learns exactly as without it."""
    import json

    path, bandit, ref = slates
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    at = next(i for i, x in enumerate(lines) if x["topic"] == "feedback" and i > 300)
    when = ahead if ahead > 1e9 else lines[at]["timestamp"] / 1000 + ahead
    hb = {"v": 1, "type": "watermark", "bandit_id": BANDIT, "event_time": when}
    lines.insert(at, {"topic": "feedback", "value": json.dumps(hb)})  # takes the stamp before
    svc, transport, _ = run_file(
        tmp_path / "s", write_lines(tmp_path / "hb.jsonl", lines), bandits={BANDIT: bandit}
    )
    assert [d["reason"] for d in dead_letters(transport)].count("event_time_out_of_range") == 1
    assert svc.state_bytes() == ref
