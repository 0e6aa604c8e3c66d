"""User-level privacy for the slate policies (issue 22 §2; docs/privacy/user-level-slates.md):
the group calibration ε/k, per-item rewards kept through the bound, the ledger's whole-run
figure per user, and the statistical audit of one batch mean with its two mutants."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_dpbandit.config import UserLevelConfig, policy_config
from streaming_dpbandit.experiments import user_level_slate_audits as ulsa
from streaming_dpbandit.privacy.user_level import user_level_of_records

MATROID = {"type": "uniform", "n_items": 6, "k": 2}


@pytest.mark.parametrize("name", ["dpucb-mat", "dpts-mat"])
def test_slate_group_calibration_and_the_whole_run_figure_per_user(name):
    cfg = policy_config(name, {"matroid": MATROID, "epsilon": 1.5, "update_every": 4})
    ul = UserLevelConfig(max_contributions_per_user=3).build(cfg, seed=2)
    inner = ul.policy
    assert inner.epsilon == pytest.approx(0.5)  # ε/k
    assert inner.epsilon0 == pytest.approx(1.5 / (2 * 2 * 3))  # ε/(2Kk)
    users = ["a", "a", "a", "a", "a", "b", "c", "a"] * 4
    records = []
    for i in range(0, len(users), 4):
        records += ul.refit()
        dec = ul.decide_slates(4)
        rewards = np.tile([[0.9, 0.1]], (4, 1))
        ul.learn(dec.slates, rewards, dec.rounds, user_ids=users[i : i + 4])
    records += ul.refit()
    # each user is admitted k = 3 times over the run (one window): "a" (20 slates), "b" and
    # "c" (4 each) alike
    c = ul.user_counters()
    assert (c["admitted"], c["bounded"]) == (9, len(users) - 9)
    # the K per-item rewards of each admitted slate reach the estimator (no flattening)
    assert inner._est.observations == 2 * 9
    assert inner.counters["rows_learned"] == 9
    assert records and all(r.user_level["max_contributions_per_user"] == 3 for r in records)
    spend = user_level_of_records(records, "default")
    assert spend is not None and spend.releases_per_user == 1
    assert spend.of_record()["epsilon"] == pytest.approx(1.5)  # k slates of one user: ε
    assert spend.of_record()["delta"] == 0.0
    assert spend.statement().startswith("per user: at most 3 events per release")
    assert "ε = 1.5," in ul.privacy.text()


def test_slate_user_level_refuses_paper_and_a_release_cap():
    bound = UserLevelConfig(max_contributions_per_user=2)
    paper = policy_config("dpucb-mat", {"matroid": MATROID, "epsilon": 1.0, "calibration": "paper"})
    assert "calibration=paper" in bound.refusal(paper)
    capped = UserLevelConfig(max_contributions_per_user=2, max_releases_per_user=3)
    plain = policy_config("dpts-mat", {"matroid": MATROID, "epsilon": 1.0})
    assert "does not apply" in capped.refusal(plain)
    assert bound.refusal(plain) is None


def test_explain_states_the_slate_group_calibration_per_user(capsys):
    import json

    from streaming_dpbandit.cli import main

    argv = ["explain", "--policy", "dpts-mat", "--policy-param", f"matroid={json.dumps(MATROID)}"]
    argv += ["--policy-param", "epsilon=2"]
    assert main([*argv, "--max-contributions-per-user", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    ul = out["user_level"]
    assert ul["inner_epsilon"] == pytest.approx(0.5) and out["epsilon0"] == pytest.approx(0.125)
    assert "one user" in out["privacy_statement"] and "ε = 2," in out["privacy_statement"]
    assert main([*argv, "--max-contributions-per-user", "2", "--max-releases-per-user", "2"]) == 2
    assert "does not apply" in capsys.readouterr().err


def test_user_level_slate_audit_bounding_and_halved_noise():
    s0, s1, _pol = ulsa.user_slate_pair()
    assert np.all(s0 - s1 == 3.0)  # u's k admitted rewards hit the same batch mean k times
    ok = ulsa.audit_user_slate_release(1.0)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon  # sharp: k·Δ is attained
    halved = ulsa.audit_user_slate_release(0.5)
    assert not halved.passed and halved.epsilon_lb > 1.5 * ok.claimed_epsilon, halved
    unbounded = ulsa.audit_user_slate_release(1.0, bound=False)  # u's k + 2 slates all enter
    assert not unbounded.passed, unbounded
