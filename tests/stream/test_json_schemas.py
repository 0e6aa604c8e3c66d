"""The JSON Schemas of the service's messages (stream/json_schemas.py, ``dpbandit schema``).

* the files shipped in the package and in docs/schemas/ are exactly what the pydantic models
  generate, one per message kind;
* every example in docs/events.md validates against the schema of its section (and is read by
  the service's own parser);
* every message the load generator sends, and every message a service run reads or writes
  (contexts, rewards, heartbeats, decisions, dead letters, slates, LDP reports and models, a
  broadcast's released model), validates against its schema — and a broken one does not.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from dpbandit_testing.ldp_stream_helpers import local_bandit, record_reports
from dpbandit_testing.slate_helpers import SYNTHETIC, record_slate_stream, slate_bandit
from dpbandit_testing.stream_helpers import (
    BANDIT,
    bad_input_stream,
    record_stream,
    run_file,
)
from streaming_dpbandit.cli import main
from streaming_dpbandit.envs import FliphatPaperEnv, MatroidSyntheticEnv
from streaming_dpbandit.stream.json_schemas import MESSAGES, json_schema, schema_text
from streaming_dpbandit.stream.local.schemas import LDPModelMessage, LDPReportMessage
from streaming_dpbandit.stream.scaling.models_topic import ModelMessage, model_message
from streaming_dpbandit.stream.schemas import (
    ContextEvent,
    DeadLetter,
    parse_decision,
    parse_feedback,
)
from streaming_dpbandit.stream.sim.loadgen import RealTimeStream

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [REPO / "streaming_dpbandit" / "data" / "schemas", REPO / "docs" / "schemas"]
VALIDATORS = {name: Draft202012Validator(json_schema(name)) for name in MESSAGES}

#: docs/events.md's sections with examples, and the messages each one shows
SECTIONS = {
    "`contexts` — a request for a decision": ["context"],
    "Binary features (`arm_features_f64`, `shared_f64`)": ["context"],
    "`decisions` — the service's answer": ["decision"],
    "`feedback` — a reward, or a watermark heartbeat": ["feedback", "watermark"],
    "`dead-letter` — what the service could not use": ["dead-letter"],
    "Slate request (`contexts`)": ["context"],
    "Slate decision (`decisions`)": ["slate-decision"],
    "Per-item feedback (`feedback`)": ["slate-feedback"],
    '`feedback` — an LDP report (`"type": "ldp_report"`)': ["ldp-report"],
    '`models` — a published model snapshot (`"type": "ldp_model"`)': ["ldp-model"],
    "`models` of a model broadcast — a released model": ["model"],
}

#: what the service's own readers make of a message of each kind
PARSERS = {
    "context": ContextEvent.model_validate_json,
    "feedback": parse_feedback,
    "watermark": parse_feedback,
    "slate-feedback": parse_feedback,
    "ldp-report": LDPReportMessage.model_validate_json,
    "decision": parse_decision,
    "slate-decision": parse_decision,
    "dead-letter": DeadLetter.model_validate_json,
    "ldp-model": LDPModelMessage.model_validate_json,
    "model": ModelMessage.model_validate_json,
}


def kinds_valid_for(message) -> list[str]:
    return [name for name, v in VALIDATORS.items() if v.is_valid(message)]


def check(message, *allowed: str) -> None:
    """``message`` validates against one of ``allowed`` (and against no other kind)."""
    valid = kinds_valid_for(message)
    assert valid and set(valid) <= set(allowed), (valid, allowed, message)


@pytest.mark.parametrize("where", SHIPPED, ids=["package", "docs"])
def test_shipped_schemas_are_what_the_models_generate(where):
    files = {p.name: p.read_text(encoding="utf-8") for p in where.glob("*.schema.json")}
    assert sorted(files) == sorted(f"{n}.schema.json" for n in MESSAGES)
    for name in MESSAGES:
        assert files[f"{name}.schema.json"] == schema_text(name), (
            f"{where}/{name}.schema.json is stale: dpbandit schema --write {where}"
        )
        Draft202012Validator.check_schema(json.loads(files[f"{name}.schema.json"]))


def test_every_example_in_events_md_validates_against_its_sections_schema():
    text = (REPO / "docs" / "events.md").read_text(encoding="utf-8")
    seen = set()
    heading = None
    for block in re.split(r"^(#+ .*)$", text, flags=re.M):
        if block.startswith("#"):
            heading = block.lstrip("#").strip()
            continue
        for raw in re.findall(r"```json\n(.*?)```", block, flags=re.S):
            assert heading in SECTIONS, f"an example under {heading!r}: which message is it?"
            seen.add(heading)
            decoder, i, raw = json.JSONDecoder(), 0, raw.strip()
            while i < len(raw):
                obj, i = decoder.raw_decode(raw, i)
                i += len(raw[i:]) - len(raw[i:].lstrip())
                check(obj, *SECTIONS[heading])
                (kind,) = kinds_valid_for(obj)
                PARSERS[kind](json.dumps(obj).encode())  # the service reads it
    assert seen == set(SECTIONS)


@pytest.mark.parametrize("encoding", ["json", "f64"])
def test_every_message_the_load_generator_sends_validates(encoding):
    env = FliphatPaperEnv(d=6, K=3, s_star=2)
    s = RealTimeStream(env, "shop", rate=200, start=1000.0, seed=2, feature_encoding=encoding)
    sent = 0
    for tick in range(1, 6):
        now = 1000.0 + tick * 0.1
        for value in s.contexts(now):
            ctx = json.loads(value)
            check(ctx, "context")
            s.on_decision({"event_id": ctx["event_id"], "arm_index": 1}, now)
            sent += 1
        for fb in s.feedback(now + 5.0):
            check(json.loads(json.dumps(fb)), "feedback", "watermark")
            sent += 1
    assert s.events > 50 and s.rewards_sent > 0 and sent > s.events + s.rewards_sent


def _inputs(path: Path):
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if "value" in rec:  # (value_b64: a binary context, no JSON)
            yield rec["topic"], json.loads(rec["value"])


def test_every_message_of_service_runs_validates(tmp_path):
    seen = set()

    def validate(topic: str, message: dict, kinds: tuple[str, ...]) -> None:
        valid = kinds_valid_for(message)
        assert valid and set(valid) <= set(kinds), (topic, valid, message)
        seen.update(valid)

    # single-arm bandit: contexts, rewards and heartbeats in; decisions and dead letters out
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    record_stream(good, 400, seed=1, state_dir=tmp_path / "rec")
    bad_input_stream(good, bad)
    _, tr, _ = run_file(tmp_path / "a", bad)
    for topic, value in _inputs(good):
        validate(topic, value, ("context",) if topic == "contexts" else ("feedback", "watermark"))
    for value in tr.outputs["dpbandit.decisions"]:
        validate("decisions", json.loads(value), ("decision",))
    dead = [json.loads(v) for v in tr.outputs["dpbandit.dead-letter"]]
    assert len({d["reason"] for d in dead}) > 10
    for value in dead:
        validate("dead-letter", value, ("dead-letter",))
    # slates: requests and per-item rewards in, slate decisions out
    env = MatroidSyntheticEnv()
    bandit = slate_bandit(
        {"policy": "dpts-mat", "matroid": SYNTHETIC, "epsilon": 2.0, "update_every": 8}, lag=0
    )
    slates = tmp_path / "slates.jsonl"
    record_slate_stream(slates, 300, env, bandit, seed=2, state_dir=tmp_path / "rec-s")
    _, tr, _ = run_file(tmp_path / "s", slates, bandits={BANDIT: bandit})
    for topic, value in _inputs(slates):
        validate(
            topic, value, ("context",) if topic == "contexts" else ("slate-feedback", "watermark")
        )
    for value in tr.outputs["dpbandit.decisions"]:
        validate("decisions", json.loads(value), ("slate-decision",))
    # privacy=local: reports in, published models out
    reports = tmp_path / "reports.jsonl"
    record_reports(reports, 400)
    _, tr, _ = run_file(tmp_path / "l", reports, bandits={BANDIT: local_bandit()})
    for topic, value in _inputs(reports):
        validate(topic, value, ("ldp-report",))
    for value in tr.outputs["dpbandit.models"]:
        validate("models", json.loads(value), ("ldp-model",))
    # a model broadcast's released model
    from streaming_dpbandit.policies import FLIPHAT

    pol = FLIPHAT(d=4, s=1, delta=0.01, first_episode_len=1, bandit_id="shop", seed=1)
    pol.decide(np.ones((1, 2, 4)))
    pol.refit()
    msg = model_message("shop", pol, now=1.0)
    validate("models", json.loads(msg.model_dump_json()), ("model",))
    assert seen == set(MESSAGES)


@pytest.mark.parametrize(
    "name, broken",
    [
        ("context", {"event_id": "e", "bandit_id": "b", "event_time": 1, "arms": []}),
        ("context", {"event_id": "e", "bandit_id": "b", "event_time": True, "slate_size": 3}),
        ("feedback", {"event_id": "e", "bandit_id": "b", "reward": "1", "event_time": 1}),
        ("watermark", {"type": "watermark", "bandit_id": "b"}),
        ("decision", {"v": 1, "event_id": "e", "bandit_id": "b", "arm_id": "a"}),
        (
            "dead-letter",
            {
                "source_topic": "t",
                "partition": 0,
                "offset": 1,
                "reason": "x",
                "at": 1.0,
                "user_id": "u",
            },
        ),
    ],
)
def test_a_broken_message_is_invalid(name, broken):
    assert not VALIDATORS[name].is_valid(broken)


def test_dpbandit_schema_prints_and_writes(tmp_path, capsys):
    assert main(["schema", "decision"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema("decision")
    assert main(["schema"]) == 0
    assert set(re.findall(r"^(\S+)", capsys.readouterr().out, flags=re.M)) == set(MESSAGES)
    assert main(["schema", "--write", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {f"{n}.schema.json" for n in MESSAGES}
    assert main(["schema", "decisions"]) == 2
    assert "unknown message 'decisions'" in capsys.readouterr().err
