"""Event times from the future (issue 19, item 3).

One context stamped far ahead used to stall its bandit: decided, its join stays pending (and
blocks the next release) until the feedback watermark reaches its time, and the contexts
watermark it sets turns every later reward into ``unknown_event``; one reward stamped far ahead
expired every pending join. Beyond ``max_event_time_skew_s`` ahead of the wall clock both are
dead-lettered (``event_time_out_of_range``) and change nothing else. Records read but held
behind a blocked release count in ``dpbandit_consumer_lag``.
"""

from __future__ import annotations

import json
import time

import pytest

from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.transport import InProcessTransport
from streaming_dpbandit.testing.stream_helpers import (
    BANDIT,
    dead_letters,
    record_stream,
    run_file,
    settings,
)

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
    bad = _context_line(path, 0) | {"event_id": "soon", "event_time": time.time() + 600}
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
