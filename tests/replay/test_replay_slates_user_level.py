"""``dpbandit replay`` of slate policies at user level (issue 22 §2;
docs/privacy/user-level-slates.md): only each user's first k decisions feed the item tapes, the
policy runs at the group calibration, and the output states the whole-run guarantee per user."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpbandit_testing.slate_helpers import slate_decision_value
from streaming_dpbandit.cli import main
from streaming_dpbandit.privacy.user_bound import UserContributionBound
from streaming_dpbandit.replay.slates import read_slate_log

L, K, USERS = 6, 2, 40
MEANS = np.linspace(0.1, 0.8, L)
UNIFORM = {"type": "uniform", "n_items": L, "k": K}


def _user(i: int) -> str:
    return f"visitor-{i:02d}@example.org"


def _log(path, events=2000, with_users=True, seed=0):
    """Service topics of a uniform slate logger; contexts of Zipf-popular users."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, USERS + 1)
    lines = []
    for i in range(events):
        eid, s = f"e{i}", rng.choice(L, K, replace=False)
        ctx = {"event_id": eid, "bandit_id": "home", "event_time": float(i), "slate_size": K}
        if with_users:
            ctx["user_id"] = _user(int(rng.choice(USERS, p=w / w.sum())))
        dec = slate_decision_value(eid, "home", i + 1, s)
        rewards = {f"sku-{e}": float(rng.random() < MEANS[e]) for e in s}
        fb = {"event_id": eid, "bandit_id": "home", "event_time": i + 0.5, "rewards": rewards}
        lines += [
            {"topic": "contexts", "value": ctx},
            {"topic": "dpbandit.decisions", "value": dec},
            {"topic": "feedback", "value": fb},
        ]
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


def test_slate_log_keeps_each_users_first_k_decisions_on_the_tapes(tmp_path):
    path = _log(tmp_path / "log.jsonl")
    full = read_slate_log(path)
    bounded = read_slate_log(path, user_bound=UserContributionBound(3, seed=1))
    kept = int(bounded.tapes.lengths.sum()) // K
    assert kept + bounded.info["bounded"] == full.decisions == 2000
    assert kept <= 3 * USERS and bounded.info["bounded"] > 1000
    # the log's own return still covers every decision; only the tapes are bounded
    assert bounded.on_policy_return == full.on_policy_return


def test_cli_slate_replay_at_user_level_states_the_per_user_guarantee(tmp_path, capsys):
    out = tmp_path / "out.json"
    argv = ["replay", "--log", str(_log(tmp_path / "log.jsonl")), "--policy", "dpts-mat"]
    argv += ["--policy-param", f"matroid={json.dumps(UNIFORM)}", "--epsilon", "2"]
    argv += ["--json", str(out), "--seed", "3"]
    assert main([*argv, "--max-contributions-per-user", "4"]) == 0
    text = capsys.readouterr().out
    assert "dpts-mat ε=2 k=4" in text and "bounded" in text
    data = json.loads(out.read_text())
    assert "visitor-" not in text + out.read_text()  # ids are never printed
    (res,) = data["results"]
    ul = res["privacy"]["user_level"]
    assert ul["statement"].startswith("per user: at most 4 events per release")
    assert ul["of_record"]["epsilon"] == pytest.approx(2.0)  # ε/k configured, ε per user
    assert res["privacy"]["epsilon_certified"] == pytest.approx(2.0)
    assert 0 < res["rounds"] <= 4 * USERS  # the tapes hold ≤ k decisions' values per user
    assert data["log"]["bounded"] > 1000
    nolog = str(_log(tmp_path / "plain.jsonl", with_users=False))
    rc = main([*argv[:2], nolog, *argv[3:], "--max-contributions-per-user", "4"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs user ids in the log" in err and len(err.strip().splitlines()) == 1
