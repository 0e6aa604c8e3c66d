"""`dpbandit serve --file` as a new user drives it (issue 34, items 3–5): the topic names of a
service log, a run that used nothing, the decisions and dead letters themselves, and what a run
on an existing state reports."""

from __future__ import annotations

import json

import pytest

from streaming_dpbandit.cli import main
from streaming_dpbandit.stream.schemas import DeadLetter, Decision

ARMS = [{"arm_id": "a", "features": [0.1, 0.2]}, {"arm_id": "b", "features": [0.3, 0.1]}]


def context(eid: str, t: float, bandit: str = "shop") -> dict:
    return {"v": 1, "event_id": eid, "bandit_id": bandit, "event_time": t, "arms": ARMS}


def reward(eid: str, t: float, bandit: str = "shop") -> dict:
    return {"v": 1, "event_id": eid, "bandit_id": bandit, "reward": 1.0, "event_time": t}


def write(path, lines) -> str:
    path.write_text("".join(json.dumps({"topic": t, "value": v}) + "\n" for t, v in lines))
    return str(path)


@pytest.fixture
def config(tmp_path) -> str:
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        "idle_timeout_s: 0.5\n"  # decisions left without reward at the end: expired at once
        "bandits:\n  shop:\n    policy: {policy: linucb, d: 2}\n    feedback_window: 5\n"
    )
    return str(cfg)


def serve(config, path, state, *extra) -> int:
    flags = ["--state-dir", str(state), "--no-metrics", "--no-progress"]
    return main(["serve", "--config", config, "--file", path, *flags, *extra])


def test_full_topic_names_are_read_like_short_ones(config, tmp_path, capsys):
    """docs/replay.md calls service-jsonl (full topic names) the serve --file format."""
    path = write(
        tmp_path / "log.jsonl",
        [
            ("dpbandit.contexts", context("e1", 1000.0)),
            ("dpbandit.feedback", reward("e1", 1000.5)),
            ("contexts", context("e2", 1001.0)),
            ("feedback", reward("e2", 1001.5)),
        ],
    )
    out = tmp_path / "summary.json"
    assert serve(config, path, tmp_path / "st", "--summary-json", str(out)) == 0
    s = json.loads(out.read_text())
    assert s["decisions"] == 2 and s["dead_letters"] == {}
    assert s["bandits"]["shop"]["stats"]["joined"] == 2


def test_a_run_whose_every_record_was_dead_lettered_says_so_and_fails(config, tmp_path, capsys):
    path = write(
        tmp_path / "log.jsonl",
        [("contexts", context("e1", 1000.0, "shop ")), ("contexts", context("e2", 1001.0, "x"))],
    )
    assert serve(config, path, tmp_path / "st") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "dpbandit serve: every one of the 2 input records was dead-lettered (unknown_bandit: 2): "
        "nothing was decided or learned; docs/events.md explains the reasons"
    )


def test_decisions_and_dead_letters_are_written_out(config, tmp_path, capsys):
    path = write(
        tmp_path / "log.jsonl",
        [
            ("contexts", context("e1", 1000.0)),
            ("contexts", context("e2", 1001.0) | {"arms": [ARMS[0], ARMS[0]]}),  # dup arm ids
            ("contexts", context("e3", 1002.0)),
            ("feedback", reward("e1", 1003.0) | {"reward": "much"}),
        ],
    )
    decisions = tmp_path / "decisions.jsonl"
    code = serve(
        config, path, tmp_path / "st", "--decisions-out", str(decisions), "--dead-letters-out", "-"
    )
    assert code == 0
    got = [Decision.model_validate_json(line) for line in decisions.read_text().splitlines()]
    assert [d.event_id for d in got] == ["e1", "e3"] and {d.arm_id for d in got} <= {"a", "b"}
    captured = capsys.readouterr()
    dead = [DeadLetter.model_validate_json(line) for line in captured.out.splitlines()]
    assert [(d.reason, d.offset) for d in dead] == [("invalid_event", 1), ("invalid_feedback", 0)]
    assert "arm ids must be unique" in dead[0].detail
    assert "served 2 decisions" in captured.err  # the summary moved off stdout


def test_outputs_are_refused_with_kafka(config, tmp_path, capsys):
    code = main(["serve", "--kafka", "127.0.0.1:1", "--decisions-out", "-", "--no-metrics"])
    assert code == 2
    assert "--decisions-out: an in-process run's outputs" in capsys.readouterr().err


def test_a_run_on_an_existing_state_reports_its_own_counts_and_the_totals_apart(
    config, tmp_path, capsys
):
    path = write(
        tmp_path / "log.jsonl", [("contexts", context(f"e{i}", 1000.0 + i)) for i in range(3)]
    )
    first, again = tmp_path / "a.json", tmp_path / "b.json"
    assert serve(config, path, tmp_path / "st", "--summary-json", str(first)) == 0
    capsys.readouterr()
    assert serve(config, path, tmp_path / "st", "--summary-json", str(again)) == 0
    out = capsys.readouterr().out
    a, b = json.loads(first.read_text()), json.loads(again.read_text())
    assert (a["decisions"], a["decisions_total"]) == (3, 3)
    assert (b["decisions"], b["decisions_total"]) == (0, 3)  # nothing new was decided
    assert b["bandits"]["shop"]["this_run"] == {} and b["bandits"]["shop"]["stats"]["decided"] == 3
    assert (
        out.startswith("served 0 new decisions in ")
        and "the state holds 3 decisions of earlier runs, 3 in all" in out
    )


def test_feedback_still_waiting_at_the_end_is_said_not_dropped(config, tmp_path, capsys):
    """A reward whose event has not arrived when the file ends stays in the state for the next
    run: the summary says so (it said nothing: the reward seemed lost)."""
    lines = [("contexts", context("e1", 1000.0)), ("feedback", reward("e2", 1000.5))]
    first = write(tmp_path / "a.jsonl", lines)
    out, state = tmp_path / "summary.json", tmp_path / "st"
    assert serve(config, first, state, "--summary-json", str(out)) == 0
    assert json.loads(out.read_text())["bandits"]["shop"]["waiting"] == {
        "decisions_awaiting_feedback": 0,
        "feedback_awaiting_its_event": 1,
    }
    assert "shop: 0 decisions await feedback, 1 feedback messages await" in capsys.readouterr().out
    # the file grows by the reward's event: the next run's held reward joins it
    later = write(tmp_path / "b.jsonl", [*lines, ("contexts", context("e2", 1000.2))])
    assert serve(config, later, state, "--summary-json", str(out)) == 0
    s = json.loads(out.read_text())["bandits"]["shop"]
    assert s["this_run"]["joined"] == 1 and not any(s["waiting"].values())
    assert "waiting in the state" not in capsys.readouterr().out
