"""Event times from the future (issue 19, item 3).

One context stamped far ahead used to stall its bandit: decided, its join stays pending (and
blocks the next release) until the feedback watermark reaches its time, and the contexts
watermark it sets turns every later reward into ``unknown_event``; one reward stamped far ahead
expired every pending join. Beyond ``max_event_time_skew_s`` ahead of the stream clock (the
record's timestamp or the wall clock, whichever is earlier) both are dead-lettered
(``event_time_out_of_range``) and change nothing else — also inside a replayed past, where the
wall clock alone bounds nothing. Records read but held behind a blocked release count in
``dpbandit_consumer_lag``.
"""

from __future__ import annotations

import json
import time

import pytest

from dpbandit_testing.stream_helpers import (
    BANDIT,
    dead_letters,
    record_stream,
    run_file,
    settings,
)
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.transport import InProcessTransport

DAY = 86_400.0


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    d = tmp_path_factory.mktemp("future-stream")
    path = d / "stream.jsonl"
    record_stream(path, 1500, seed=4, state_dir=d / "rec")
    svc, _, summary = run_file(d / "ref", path)
    return path, svc.state_bytes(), summary


def _insert(path, out, at: int, value: dict, topic: str) -> None:
    lines = path.read_text().splitlines()
    lines.insert(at, json.dumps({"topic": topic, "value": json.dumps(value)}))
    out.write_text("\n".join(lines) + "\n")


def _context_line(path, i: int) -> dict:
    ctx = [json.loads(x) for x in path.read_text().splitlines()]
    return json.loads([x for x in ctx if x["topic"] == "contexts"][i]["value"])


@pytest.mark.parametrize("ahead", [DAY, 3600.0])
def test_a_context_from_the_future_is_dead_lettered_and_stalls_nothing(stream, tmp_path, ahead):
    path, ref_state, ref_summary = stream
    bad = _context_line(path, 0) | {
        "event_id": "from-the-future",
        "event_time": time.time() + ahead,
    }
    out = tmp_path / "future.jsonl"
    _insert(path, out, 400, bad, "contexts")
    svc, transport, summary = run_file(tmp_path / "state", out)
    dead = [d for d in dead_letters(transport) if d["reason"] == "event_time_out_of_range"]
    assert [json.loads(d["payload"])["event_id"] for d in dead] == ["from-the-future"]
    assert svc.state_bytes() == ref_state  # the rest of the stream learned exactly as without it
    assert summary["bandits"][BANDIT]["rounds"] == ref_summary["bandits"][BANDIT]["rounds"]


def test_a_reward_from_the_future_expires_nothing(stream, tmp_path):
    path, ref_state, _ = stream
    ctx = _context_line(path, 300)
    bad = {
        "v": 1,
        "event_id": ctx["event_id"],
        "bandit_id": BANDIT,
        "reward": 1.0,
        "event_time": time.time() + DAY,
    }
    out = tmp_path / "future.jsonl"
    _insert(path, out, 700, bad, "feedback")
    svc, transport, _ = run_file(tmp_path / "state", out)
    reasons = [d["reason"] for d in dead_letters(transport)]
    assert reasons.count("event_time_out_of_range") == 1
    assert svc.state_bytes() == ref_state


def test_the_skew_is_configurable_and_can_be_switched_off(stream, tmp_path):
    path, _, _ = stream
    # ten minutes ahead of the line before it (whose timestamp it takes)
    at = json.loads(path.read_text().splitlines()[399])["timestamp"] / 1000
    bad = _context_line(path, 0) | {"event_id": "soon", "event_time": at + 600}
    out = tmp_path / "soon.jsonl"
    _insert(path, out, 400, bad, "contexts")
    for skew, dead in ((1200.0, 0), (60.0, 1)):
        _, transport, _ = run_file(tmp_path / f"s{skew}", out, max_event_time_skew_s=skew)
        n = sum(1 for d in dead_letters(transport) if d["reason"] == "event_time_out_of_range")
        assert n == dead, skew
    _, transport, _ = run_file(tmp_path / "off", out, max_event_time_skew_s=None)
    assert not [d for d in dead_letters(transport) if d["reason"] == "event_time_out_of_range"]


def test_records_held_behind_a_blocked_release_count_in_the_consumer_lag(stream, tmp_path):
    path, _, _ = stream
    only_contexts = tmp_path / "contexts.jsonl"
    lines = [x for x in path.read_text().splitlines() if json.loads(x)["topic"] == "contexts"]
    only_contexts.write_text("\n".join(lines[:600]) + "\n")  # no rewards: blocked at a release
    st = settings(tmp_path / "state", max_batch=64)
    src = FileSource(only_contexts, ("dpbandit.contexts", "dpbandit.feedback"))
    svc = Service(st, InProcessTransport(src), ServiceMetrics())
    svc.open()
    seen = {}

    def progress(s):
        if s.blocked and s.transport.exhausted:
            s.export_metrics()
            seen["queued"] = sum(len(q) for q in s.queues.values())
            seen["lag"] = s.metrics.registry.get_sample_value(
                "dpbandit_consumer_lag", {"topic": "dpbandit.contexts", "partition": "0"}
            )
            s.request_stop()

    svc.run(progress)
    assert seen["queued"] > 0
    assert seen["lag"] == seen["queued"]


def _stamped_past(path, out, shift: float) -> list[dict]:
    """The stream moved ``shift`` seconds into the past, each line stamped like a Kafka topic
    dump (``timestamp``: its event time in ms, as the producer's CreateTime would be)."""
    lines = []
    for raw in path.read_text().splitlines():
        line = json.loads(raw)
        value = json.loads(line["value"])
        value["event_time"] = value["event_time"] - shift
        line["value"] = json.dumps(value)
        line["timestamp"] = int(value["event_time"] * 1000)
        lines.append(line)
    out.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return lines


def test_a_jump_inside_a_replayed_past_is_bounded_by_the_records_timestamps(stream, tmp_path):
    """A context stamped a day ahead of the records around it, in a stream that lies years in
    the past: the wall clock alone accepts it (and the bandit stalls); its record's timestamp
    does not."""
    path, _, ref_summary = stream
    shift = 3 * 365 * DAY + 0.25  # the whole stream three years back
    past = tmp_path / "past.jsonl"
    lines = _stamped_past(path, past, shift)
    ref_svc, _, ref_past = run_file(tmp_path / "ref", past)
    assert ref_past["bandits"][BANDIT]["rounds"] == ref_summary["bandits"][BANDIT]["rounds"]

    neighbour = lines[400]
    bad = _context_line(past, 0) | {"event_id": "a-day-ahead"}
    bad["event_time"] = neighbour["timestamp"] / 1000 + DAY
    lines.insert(
        400, {"topic": "contexts", "value": json.dumps(bad), "timestamp": neighbour["timestamp"]}
    )
    out = tmp_path / "jump.jsonl"
    out.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    svc, transport, summary = run_file(tmp_path / "state", out)
    dead = [d for d in dead_letters(transport) if d["reason"] == "event_time_out_of_range"]
    assert [json.loads(d["payload"])["event_id"] for d in dead] == ["a-day-ahead"]
    assert svc.state_bytes() == ref_svc.state_bytes()
    assert summary["bandits"][BANDIT]["rounds"] == ref_past["bandits"][BANDIT]["rounds"]

    # without timestamps the same file is judged by the wall clock: the jump gets through
    unstamped = tmp_path / "unstamped.jsonl"
    unstamped.write_text(
        "\n".join(json.dumps({k: v for k, v in x.items() if k != "timestamp"}) for x in lines)
        + "\n"
    )
    _, transport, _ = run_file(tmp_path / "wall", unstamped)
    assert not [d for d in dead_letters(transport) if d["reason"] == "event_time_out_of_range"]


def test_a_kafka_record_is_bounded_by_its_broker_timestamp():
    """The Kafka transport hands on kafka-python's ConsumerRecord: its ``timestamp`` (ms;
    -1 when the record has none) is the stream clock, never later than the wall clock."""
    from kafka.consumer.fetcher import ConsumerRecord

    from streaming_dpbandit.stream.parsing import event_time_limit

    def rec(ts):
        return ConsumerRecord("t", 0, -1, 7, ts, 0, None, b"{}", [], None, 0, 2, -1)

    wall = 2_000_000.0
    assert event_time_limit(rec(1_000_000_000), 300.0, wall) == 1_000_000.0 + 300.0
    assert event_time_limit(rec(-1), 300.0, wall) == wall + 300.0  # no timestamp
    assert event_time_limit(rec(9_000_000_000), 300.0, wall) == wall + 300.0  # clock ahead
    assert event_time_limit(rec(1_000_000_000), None, wall) == float("inf")
