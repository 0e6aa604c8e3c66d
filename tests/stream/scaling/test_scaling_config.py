"""Scaling settings and the group service's error classification (no broker needed)."""

import json

import pytest
from kafka.errors import KafkaError, ProducerFencedError
from pydantic import ValidationError

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.scaling.task import TaskLost
from streaming_dpbandit.stream.sim.synthetic import write_multi_bandit_stream

KAFKA = {"bootstrap_servers": "127.0.0.1:1"}


def test_group_mode_needs_kafka_and_excludes_broadcast():
    with pytest.raises(ValidationError, match="needs the kafka section"):
        ServiceSettings.model_validate({"scaling": {"mode": "group"}})
    ok = ServiceSettings.model_validate({"kafka": KAFKA, "scaling": {"mode": "group"}})
    assert ok.scaling.commit_interval_s == 1.0 and ok.scaling.state_topic is None
    with pytest.raises(ValidationError, match="different patterns"):
        ServiceSettings.model_validate(
            {"kafka": KAFKA, "scaling": {"mode": "group"}, "broadcast": {"role": "learner"}}
        )
    with pytest.raises(ValidationError):
        ServiceSettings.model_validate({"kafka": KAFKA, "scaling": {"mode": "cluster"}})


def lost(err: BaseException) -> TaskLost:
    try:
        try:
            raise err
        except BaseException as inner:
            raise TaskLost(f"task-0: {inner}") from inner
    except TaskLost as out:
        return out


def test_fenced_errors_are_told_apart_from_broken_transactions():
    assert lost(ProducerFencedError()).fenced
    # kafka-python wraps the fencing of an earlier request in a generic error
    assert lost(KafkaError("Cannot perform send", ProducerFencedError())).fenced
    assert not lost(KafkaError("request timed out")).fenced
    assert not lost(RuntimeError("Cannot call send in state BUMPING_PRODUCER_EPOCH")).fenced


def test_the_multi_bandit_stream_is_reproducible_and_ordered(tmp_path):
    env = FliphatPaperEnv(d=5, K=2, s_star=2)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    counts = write_multi_bandit_stream(a, ["x", "y", "z"], 200, env, seed=4)
    write_multi_bandit_stream(b, ["x", "y", "z"], 200, env, seed=4)
    assert a.read_bytes() == b.read_bytes()
    recs = [json.loads(line) for line in a.read_text().splitlines()]
    ctx = [r["value"] for r in recs if r["topic"] == "contexts"]
    assert counts["contexts"] == len(ctx) == 600
    times = [c["event_time"] for c in ctx]
    assert times == sorted(times)  # bandits interleaved in event time
    fb = [r["value"] for r in recs if r["topic"] == "feedback" and "reward" in r["value"]]
    assert 0.9 * 600 < len(fb) < 600  # about 95% rewarded
    ends = [r["value"] for r in recs if r["value"].get("type") == "watermark"][-3:]
    assert {e["bandit_id"] for e in ends} == {"x", "y", "z"}


def test_a_ledger_conflict_stops_a_task_instead_of_being_retried():
    """A re-drawn release must stop the replica; other producer errors only lose the task."""
    from streaming_dpbandit.privacy.ledger import LedgerConflictError
    from streaming_dpbandit.stream.scaling.task import TaskService, TaskState

    class Store:  # only the error handling of a task's snapshot is exercised
        def __init__(self, err):
            self.err = err

        def save(self, name, state, send):
            raise self.err

    task = object.__new__(TaskService)
    task.partition = 3
    conflict = TaskState(task, Store(LedgerConflictError("release b/fit/1 differs")), None)
    with pytest.raises(LedgerConflictError):
        conflict.save({})

    broken = TaskState(task, Store(KafkaError("request timed out")), None)
    with pytest.raises(TaskLost, match="task-3") as info:
        broken.save({})
    assert not info.value.fenced
