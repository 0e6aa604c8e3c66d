"""Every service shape is one loop with other collaborators (issue 23): the broadcast learner
and a group task are :class:`Service` configurations, and every shape reads a context with the
one parser — the same message gets the same dead letter whatever shape reads it, and a bad
message keeps nothing alive once it is dead-lettered."""

from __future__ import annotations

import gc
import json
import time

from dpbandit_testing.broadcast_helpers import broadcast_stream, run_learner_file
from dpbandit_testing.stream_helpers import BANDIT, decisions, record_stream, run_file
from dpbandit_testing.stream_helpers import settings as service_settings
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.settings import TopicsSettings
from streaming_dpbandit.stream.bandit import BanditRuntime
from streaming_dpbandit.stream.parsing import BadInput
from streaming_dpbandit.stream.scaling.broadcast import learner_service
from streaming_dpbandit.stream.scaling.replica import DecisionReplica, dead_letters_of
from streaming_dpbandit.stream.scaling.task import TaskService
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.transport import InProcessTransport, Record

CYCLIC = {"ContextEvent", "BroadcastDecision", "Pending", "BadInput", "ValidationError", "frame"}


def _no_input(tmp_path) -> InProcessTransport:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    return InProcessTransport(FileSource(empty, ("dpbandit.contexts", "dpbandit.feedback")))


def test_the_learner_and_the_task_are_configurations_of_the_service_not_subclasses(tmp_path):
    st = service_settings(tmp_path, broadcast={"role": "learner"})
    learner = learner_service(st, _no_input(tmp_path), ServiceMetrics())
    assert type(learner) is Service
    assert not issubclass(TaskService, Service) and not issubclass(DecisionReplica, Service)


def test_a_learner_keeps_no_bad_decision_in_a_reference_cycle(tmp_path):
    """A dead-lettered decision is cached by the learner's parser without its traceback or the
    validation error it replaced (they would hold the parser's frames, and through them the
    queued decisions, in a cycle per bad message that only the collector frees)."""
    stream = tmp_path / "stream.jsonl"
    record_stream(stream, 600)
    _, transport, _ = run_file(tmp_path / "svc", stream)
    path = tmp_path / "decisions.jsonl"
    broadcast_stream(stream, decisions(transport), path)
    lines = path.read_text().splitlines()
    first = next(json.loads(r["value"]) for r in map(json.loads, lines) if r["topic"] == "contexts")
    bad = [
        "{",  # malformed
        json.dumps(first | {"features": first["features"][:3], "event_id": "short"}),
        json.dumps(first | {"bandit_id": "nobody", "event_id": "nobody"}),
        json.dumps(first | {"event_time": first["event_time"] + 1e9, "event_id": "future"}),
        json.dumps({k: v for k, v in first.items() if k != "replica"}),  # invalid
    ]
    bad_lines = [json.dumps({"topic": "contexts", "value": v}) for v in bad]
    path.write_text("\n".join(lines[:5] + bad_lines + lines[5:]) + "\n")

    gc.collect()
    gc.disable()
    try:
        learner, _, _ = run_learner_file(tmp_path / "learner", path)
        dead = dict(learner.dead_count)
        del learner
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    for reason in ("malformed_json", "wrong_dimension", "unknown_bandit"):
        assert dead.get(reason) == 1, dead
    assert dead.get("event_time_out_of_range") == 1 and dead.get("invalid_decision") == 1
    assert not cyclic & CYCLIC


def _replica(tmp_path) -> tuple[DecisionReplica, list]:
    """A decision replica's reading of contexts, without its Kafka clients."""
    st = service_settings(tmp_path, max_event_time_skew_s=60)
    rep = DecisionReplica(st)
    b = st.bandits[BANDIT]
    rep.bandits = {BANDIT: BanditRuntime(BANDIT, b, b.policy.build(seed=b.seed), None)}
    sent = []

    class Producer:
        def send(self, topic, key=None, value=None):
            sent.append(json.loads(value))

    rep.dead_letters = dead_letters_of(Producer(), TopicsSettings().dead_letter, st, rep.metrics)
    return rep, sent


class _Msg:
    def __init__(self, value):
        self.offset, self.value, self.key = 0, value, BANDIT.encode()


def test_the_service_and_a_decision_replica_dead_letter_a_context_identically(tmp_path):
    """One parser: a tombstone, a context from the far future, an unknown bandit, an
    oversized or malformed message get the same reason and detail from both."""
    good = {
        "v": 1,
        "event_id": "e1",
        "bandit_id": BANDIT,
        "event_time": 1.7e9,
        "arms": [{"arm_id": "a", "features": [0.0] * 20}],
    }
    future = json.dumps(good | {"event_time": 4e9}).encode()
    values = [None, future, json.dumps(good | {"bandit_id": "x"}).encode(), b"{", b"x" * 10**6]
    rep, sent = _replica(tmp_path)
    svc = Service(
        service_settings(tmp_path / "s", max_event_time_skew_s=60), InProcessTransport(None)
    )
    svc.build_bandits()
    svc.contexts.reset()
    for value in values:
        assert rep.parse("dpbandit.contexts", 0, _Msg(value), 0.0) is None
        svc.contexts.reset()  # (its cache is by record identity)
        svc.wall = time.time()
        got = svc.contexts.parse(Record("dpbandit.contexts", 0, 0, BANDIT.encode(), value), 0.0)
        assert isinstance(got, BadInput)
        assert (got.reason, got.detail) == (sent[-1]["reason"], sent[-1]["detail"])
