"""User-level local DP (issue 22 §2): per-report calibration, client-side bounding, audits.

Derivation: docs/privacy/user-level-ldp.md.
"""

import json
import math

import numpy as np
import pytest

from streaming_dpbandit.config import UserLevelConfig, policy_config
from streaming_dpbandit.experiments import user_level_ldp_audits as ula
from streaming_dpbandit.ldp.gaussian import analytic_sigma
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.user_level import user_level_of_records

CASES = [
    # (params, δ, tight: the accountant of record must also reach ≥ 0.95 ε)
    ({"variant": "sgd"}, 0.0, True),
    ({"variant": "sgd", "setting": "multi", "n_arms": 3, "warmup_rounds": 6}, 0.0, True),
    ({"variant": "ols"}, 1e-2, False),  # classical σ: valid, ~2× conservative at (1, 0.01)
    ({"variant": "ols", "gaussian": "analytic"}, 1e-2, True),
    (
        {
            "variant": "ols",
            "gaussian": "analytic",
            "setting": "multi",
            "n_arms": 3,
            "warmup_rounds": 6,
        },
        1e-3,
        False,
    ),
]


def _run(pol, rounds=40, seed=0):
    """Decide and learn ``rounds`` rounds of 3 users (ids 0, 1, 2 in turn); the records."""
    rng = np.random.default_rng(seed)
    recs = []
    K = pol.n_arms
    for t in range(rounds):
        if pol.refit_due():
            recs.extend(pol.refit())
        X = rng.normal(size=(1, K, pol.d))
        dec = pol.decide(X)
        x = X[0, dec.arms]
        pol.learn(x, rng.normal(size=1), dec.rounds, user_ids=[t % 3])
    if pol.refit_due():
        recs.extend(pol.refit())
    return recs


@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("params,delta,tight", CASES)
def test_k_reports_at_the_per_report_calibration_meet_the_user_target(params, delta, tight, k):
    eps = 1.0
    cfg = policy_config("ldp-glb", {"d": 3, "n_arms": 4, **params, "epsilon": eps, "delta": 0.01})
    if delta:
        cfg = policy_config(
            "ldp-glb", {"d": 3, "n_arms": 4, **params, "epsilon": eps, "delta": delta}
        )
    pol = UserLevelConfig(max_contributions_per_user=k).build(cfg, seed=1)
    inner = pol.policy.model_spec()
    if params["variant"] == "sgd":
        assert inner.epsilon == pytest.approx(eps / k, rel=1e-12)
    elif params.get("gaussian", "classical") == "classical":
        assert inner.epsilon == pytest.approx(eps / math.sqrt(k), rel=1e-9)  # tighter than ε/k
    else:  # analytic τ: √k·τ(ε, δ) (Gaussian composition is exact in Δ/σ), plus the few
        # ppm by which the accountant's pessimistic PLD discretisation asks for more
        blocks_delta = delta / 2 if params.get("setting") == "multi" else delta
        blocks_eps = eps / 2 if params.get("setting") == "multi" else eps
        want = math.sqrt(k) * analytic_sigma(blocks_eps, blocks_delta, 2.0)
        assert inner.tau() == pytest.approx(want, rel=1e-5) and inner.tau() >= want
        assert eps / k < inner.epsilon < eps / math.sqrt(k)
    recs = _run(pol)
    assert recs and all(r.user_level["max_contributions_per_user"] == k for r in recs)
    ul = user_level_of_records(recs, recs[0].bandit_id)
    got = ul.of_record()
    assert got["delta"] <= delta + 1e-15
    assert got["epsilon"] <= eps * (1 + 1e-9)
    if tight:
        assert got["epsilon"] >= 0.95 * eps
    assert "(local DP)" in ul.statement() and f"at most {k} reports" in ul.statement()
    # the same reports accounted per event (no bound): k of them would cost more than ε
    one = Accountant(recs).spend(recs[0].bandit_id).basic_epsilon
    assert one == pytest.approx(inner.report_guarantee()[0])


def test_bounded_reports_never_reach_the_randomizer_and_are_counted():
    cfg = policy_config("ldp-glb", {"d": 2, "n_arms": 3, "epsilon": 1.0})
    pol = UserLevelConfig(max_contributions_per_user=2).build(cfg, seed=3)
    _run(pol, rounds=30)  # 3 users × 10 events each: 2 sent per user
    c = pol.counters
    assert c["reports"] == c["user_admitted"] == 6
    assert c["user_bounded"] == 24


def test_refusals_are_one_line():
    ul = UserLevelConfig(max_contributions_per_user=2)
    assert "authors_code" in ul.refusal(
        policy_config("ldp-glb", {"d": 2, "profile": "authors_code", "epsilon": 1.0})
    )
    why = ul.refusal(policy_config("ldp-glb", {"d": 2, "variant": "ols", "gaussian": "discrete"}))
    assert "no user-level split" in why and "\n" not in why
    assert ul.refusal(policy_config("ldp-ucb", {"d": 2})) is not None
    assert ul.refusal(policy_config("ldp-glb", {"d": 2})) is None


def test_user_level_l2_ball_audit_catches_halved_noise_and_an_unbounded_client():
    ok = ula.audit_user_ldp_l2_ball(1.0, n=60_000)
    assert ok.passed and ok.epsilon_lb > 0.8  # pure ε, tight
    halved = ula.audit_user_ldp_l2_ball(0.5, n=60_000)
    assert not halved.passed and halved.epsilon_lb > 2.0
    unbounded = ula.audit_user_ldp_l2_ball(1.0, bound=False, n=60_000)
    assert "sent=5" in unbounded.name and not unbounded.passed and unbounded.epsilon_lb > 1.2


def test_user_level_gaussian_audit_catches_halved_noise_and_an_unbounded_client():
    ok = ula.audit_user_ldp_gaussian(1.0, n=100_000)
    assert ok.passed and ok.epsilon_lb > 0.7  # analytic: the (ε, δ) claim is exact
    halved = ula.audit_user_ldp_gaussian(0.5, n=100_000)
    assert not halved.passed and halved.epsilon_lb > 1.5
    unbounded = ula.audit_user_ldp_gaussian(1.0, bound=False, n=100_000)
    assert "sent=4" in unbounded.name and not unbounded.passed


def test_simulate_states_the_user_level_guarantee_of_a_local_policy(tmp_path, capsys):
    from streaming_dpbandit.cli import main

    out = tmp_path / "r.json"
    argv = ["simulate", "--env", "ldp-glb-single", "--policy", "ldp-glb", "--epsilon", "1"]
    argv += ["--horizon", "600", "--seeds", "1", "--users", "50", "--no-progress"]
    argv += ["--max-contributions-per-user", "2", "--json", str(out)]
    assert main(argv) == 0
    run = json.loads(out.read_text())["runs"][0]
    ul = run["privacy"]["user_level"]
    assert ul["privacy_model"] == "local" and ul["max_contributions_per_user"] == 2
    assert ul["of_record"]["epsilon"] <= 1.0 + 1e-9 and ul["of_record"]["delta"] == 0.0
    c = run["counters"]
    assert c["reports"] == c["user_admitted"] <= 100 and c["user_bounded"] >= 500


def test_replay_of_a_local_policy_sends_at_most_k_reports_per_user(tmp_path, capsys):
    from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
    from streaming_dpbandit.cli import main

    lines = service_log_lines(1200, K=3, d=4, seed=2)
    rng = np.random.default_rng(1)
    for line in lines:
        if line["topic"] == "contexts":
            line["value"]["user_id"] = f"replay-user-{int(rng.integers(10)):02d}"
    log = tmp_path / "log.jsonl"
    write_jsonl(log, lines)
    out = tmp_path / "replay.json"
    argv = ["replay", "--log", str(log), "--policy", "ldp-glb", "--estimator", "replay"]
    argv += ["--bootstrap", "0", "--no-progress", "--json", str(out)]
    assert main([*argv, "--max-contributions-per-user", "3"]) == 0
    text = out.read_text()
    assert "replay-user" not in text + capsys.readouterr().out  # ids are never printed
    data = json.dumps(json.loads(text))
    assert "per user: at most 3 reports sent by their device over the run (local DP)" in data
    # the bound is applied, not only stated: the policy randomizes ≤ k reports per user
    from streaming_dpbandit.replay.build import make_reader
    from streaming_dpbandit.replay.replay_method import ReplayMethod

    reader = make_reader(str(log), "service-jsonl").open()
    pol = UserLevelConfig(max_contributions_per_user=3).build(
        policy_config("ldp-glb", {"d": 4, "n_arms": 3}), seed=0
    )
    rm = ReplayMethod(pol, bootstrap=0)
    for batch in reader.chunks(512):
        rm.process(batch)
    c = pol.counters
    assert c["reports"] == c["user_admitted"] <= 3 * 10
    assert c["user_admitted"] + c["user_bounded"] == rm.matched > 100


def test_the_sdk_client_sends_at_most_max_reports_and_keeps_its_count():
    from streaming_dpbandit.ldp import BudgetExceeded, LDPClient, ModelSnapshot, ModelSpec

    spec = ModelSpec(variant="sgd", setting="single", d=3, K=4, epsilon=0.5)
    snap = ModelSnapshot("shop", "shop-1", 1, spec, theta=np.zeros(3))
    client = LDPClient(snap, max_epsilon=0.5, max_reports=2, rng=np.random.default_rng(0))
    X = np.eye(4, 3)
    for _ in range(2):
        client.report(client.decide(X), 1.0)
    with pytest.raises(BudgetExceeded, match="sent its 2 reports"):
        client.report(client.decide(X), 1.0)
    assert client.reports_sent == 2
    again = LDPClient(snap, max_epsilon=0.5, max_reports=2, reports_sent=client.reports_sent)
    with pytest.raises(BudgetExceeded):  # a restarted app restores the device's count
        again.report(again.decide(X), 1.0)


def test_windowed_bound_k_per_window_e_windows_composed(tmp_path):
    """k reports per window of W rounds, at most E windows: the whole run is k·E reports."""
    from streaming_dpbandit.cli import main

    out = tmp_path / "w.json"
    argv = ["simulate", "--env", "ldp-glb-single", "--policy", "ldp-glb", "--epsilon", "1"]
    argv += ["--horizon", "900", "--seeds", "1", "--users", "30", "--no-progress"]
    argv += ["--max-contributions-per-user", "2", "--max-releases-per-user", "2"]
    argv += ["--user-window-rounds", "300", "--json", str(out)]
    assert main(argv) == 0
    run = json.loads(out.read_text())["runs"][0]
    ul = run["privacy"]["user_level"]
    assert ul["window_rounds"] == 300 and ul["releases_per_user"] == 2
    assert ul["of_record"]["epsilon"] == pytest.approx(2.0)  # 2 windows of ε = 1 (pure)
    assert "per window of 300 rounds, at most 2 windows" in ul["statement"]
    c = run["counters"]
    assert c["reports"] == c["user_admitted"] <= 2 * 2 * 30
    assert c["user_admitted"] > 2 * 30  # returning users report again in a later window
    assert c["user_bounded_releases"] > 0  # and stop after their E windows


def test_window_rounds_is_refused_without_e_and_for_central_policies():
    ul = UserLevelConfig(max_contributions_per_user=2, window_rounds=100)
    assert "needs max_releases_per_user" in ul.refusal(policy_config("ldp-glb", {"d": 2}))
    ul = UserLevelConfig(max_contributions_per_user=2, window_rounds=100, max_releases_per_user=2)
    assert ul.refusal(policy_config("ldp-glb", {"d": 2})) is None
    assert "local-DP" in ul.refusal(policy_config("dp-linucb", {"d": 2}))
    # unset, the field is not in the fingerprint (states written before it existed resume)
    assert "window_rounds" not in UserLevelConfig(max_contributions_per_user=2).model_dump()


def test_the_wrapped_local_policy_states_the_device_as_the_unit():
    cfg = policy_config("ldp-glb", {"d": 2, "n_arms": 3, "epsilon": 1.0})
    st = UserLevelConfig(max_contributions_per_user=4).build(cfg, seed=0).privacy
    assert st.model == "local" and st.epsilon == 1.0 and st.delta == 0.0
    assert "every report their device sends (at most 4 over the run)" in st.unit
    assert any("cannot enforce" in c for c in st.caveats)


def test_bounded_rounds_free_their_pending_decision_and_snapshot():
    cfg = policy_config("ldp-glb", {"d": 2, "n_arms": 3, "epsilon": 1.0})
    pol = UserLevelConfig(max_contributions_per_user=1).build(cfg, seed=3)
    _run(pol, rounds=60)  # per-round snapshots; 3 users: 57 rounds bounded
    inner = pol.policy
    assert (inner._ring_round >= 0).sum() == 0  # no round waits for a report that never comes
    assert len(inner._snaps) <= 2  # the bounded rounds' snapshots are not kept
