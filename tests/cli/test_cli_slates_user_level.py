"""``dpbandit simulate`` of the slate policies on a matroid environment, event level and behind a
user bound (issue 22 §2; docs/privacy/user-level-slates.md)."""

from __future__ import annotations

import json

import pytest

from streaming_dpbandit.cli import main

CAPPED = ["--max-contributions-per-user", "2", "--max-releases-per-user", "2"]
BASE = ["simulate", "--env", "dp-matroid-synthetic", "--horizon", "1500", "--jobs", "1"]


def test_simulate_slates_with_returning_users_bounds_them_and_states_it(tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = [*BASE, "--policy", "dpts-mat", "--seeds", "2", "--users", "50", "--json", str(out)]
    assert main([*argv, "--max-contributions-per-user", "3"]) == 0
    text = capsys.readouterr().out
    assert "dpts-mat ε=1 k=3" in text
    (row,) = json.loads(out.read_text())["results"]
    assert len(row["regret"]) == 2 and row["k"] == 3
    # 50 users, at most 3 slates each over the run: at most 150 of 1500 rounds learned from
    assert 0 < row["admitted"] <= 150 / 1500
    assert row["user_level"].startswith("per user: at most 3 events per release")
    assert row["of_record"]["epsilon"] == pytest.approx(1.0) and row["user_level"] in text
    assert main([*argv[:-4], "--json", str(out)]) == 0  # event level: every round learned
    (event,) = json.loads(out.read_text())["results"]
    assert event["admitted"] == 1.0 and event["user_level"] is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "fliphat"], "serves slates"),
        (["--policy", "dpts-mat", "--plot", "p.png"], "--plot is not available"),
        (["--policy", "dpucb-mat", "--users", "9"], "--users needs"),
        (["--policy", "dpucb-mat", *CAPPED], "does not apply"),
    ],
)
def test_simulate_slates_refuses_with_one_line(extra, message, capsys):
    assert main([*BASE, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
