"""The DP-LinUCB policy: ledger, labels, state, recovery, clipping, bounds over long runs."""

import copy

import numpy as np
import pytest

from dpbandit_testing.dp_linucb_helpers import ENV, fixed_stream, make, run
from streaming_dpbandit.config import ConfigError, policy_config, validate_for_mode
from streaming_dpbandit.policies import FLIPHAT
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.ledger import Ledger
from streaming_dpbandit.privacy.statement import PAPER_LABEL
from streaming_dpbandit.privacy.symmetric import packing
from streaming_dpbandit.utils.serialization import dumps, loads


def test_ledger_records_and_accountant_spend(tmp_path):
    pol, recs = make(), []
    run(pol, fixed_stream(2000), 2000, recs)
    epoch, releases = recs[0], recs[1:]
    assert epoch.mechanism == "binary-tree/GAUSS" and epoch.dp_valid and epoch.note is None
    assert epoch.accounting == [
        {
            "type": "gaussian",
            "sensitivity": 2.0,
            "sigma": epoch.params["noise_law"]["sigma"],
            "count": pol.calibration_constants().m,
        }
    ]
    assert all(r.accounting == [{"type": "zero"}] for r in releases)
    assert len({r.release_id for r in recs}) == len(recs) == 1 + 2000 // 32 + 1
    for key in ("rho_min", "rho_max", "gamma", "shift", "m", "a8", "a2", "L_tilde", "checks"):
        assert key in epoch.params
    with Ledger(tmp_path / "l.jsonl") as led:
        for r in recs:
            led.append(r)
    spend = Accountant(Ledger(tmp_path / "l.jsonl").open().records()).spend("default", 0.1)
    assert spend.basic_epsilon == 1.0 and spend.dp_valid
    assert spend.epsilon_at_delta == pytest.approx(1.0, abs=0.01)  # certified: exact, tight
    text = str([r.to_dict() for r in recs])
    assert "seed" not in text and "key" not in text  # never noise, keys or raw sums


@pytest.mark.parametrize(
    "calibration, noise, valid, label_part",
    [
        ("paper", "gaussian", True, "valid but conservative"),
        ("zcdp", "gaussian", True, "not paper-faithful"),
        ("authors_code_2018", "wishart", False, "Experiment 2/3 only"),
    ],
)
def test_non_default_calibrations_are_labelled_everywhere(calibration, noise, valid, label_part):
    pol, recs = make(calibration=calibration, noise=noise), []
    run(pol, fixed_stream(100), 100, recs)
    assert all(r.calibration == calibration and label_part in r.note for r in recs)
    assert recs[0].dp_valid is valid
    text = pol.privacy.text()
    assert label_part in text and PAPER_LABEL not in text
    assert label_part in pol.explain()["label"]
    if calibration == "zcdp":
        assert recs[0].rho == pytest.approx(pol.calibration_constants().rho_spent)
    # FLIPHAT's paper calibration keeps its verbatim warning (backward compatible)
    fl = FLIPHAT(d=10, s=2, calibration="paper", clip_contexts=False)
    assert "WARNING" in fl.privacy.text() and PAPER_LABEL in fl.privacy.text()


def test_modes_refuse_simulation_only_options():
    for params in (
        {"calibration": "zcdp"},
        {"calibration": "authors_code_2018"},
        {"track_bounds": True},
    ):
        cfg = policy_config("dp-linucb", {"d": 4, **params})
        validate_for_mode(cfg, "simulation")
        with pytest.raises(ConfigError, match="simulation-only"):
            validate_for_mode(cfg, "service")
    for cal in ("certified", "paper"):
        validate_for_mode(policy_config("dp-linucb", {"d": 4, "calibration": cal}), "service")


def test_restart_from_snapshot_continues_identically_and_never_redraws_noise():
    stream = fixed_stream(3000, seed=2)
    full, r_full = make(), []
    run(full, stream, 1234, r_full)
    run(full, stream, 3000, r_full)
    first, r = make(), []
    run(first, stream, 1234, r)
    snap = loads(dumps(first.state_dict()))
    restored = make().load_state_dict(snap)
    run(restored, stream, 3000, r)
    assert [x.content_digest() for x in r] == [x.content_digest() for x in r_full]
    assert dumps(restored.state_dict()) == dumps(full.state_dict())
    # node noise already used is in the snapshot; issue-once is structural (persisted node
    # identities and release count), so no ever-growing list of issued labels is kept
    assert snap["noise"]["issued"] == []
    tree = restored._agg._agg
    high = tree.live_levels()[-1]  # the oldest live node, released many times already
    assert tree._node_s[high] < tree.s
    tree._node_s[high] = -1  # a bug that "forgot" its noise ...
    tree.insert_many(np.zeros((1, tree.p)))
    with pytest.raises(RuntimeError, match="re-draw"):  # ... cannot make the tree re-draw it
        tree.release()


def test_crash_retry_of_a_release_is_identical_and_a_ledger_no_op(tmp_path):
    pol, recs = make(), []
    run(pol, fixed_stream(192, seed=3), 192, recs)
    snapshot = copy.deepcopy(pol.state_dict())  # taken before the due refit
    assert pol.refit_due()
    first = pol.refit()
    retry = make().load_state_dict(snapshot).refit()
    assert [r.content_digest() for r in first] == [r.content_digest() for r in retry]
    with Ledger(tmp_path / "l.jsonl") as led:
        assert led.append(first[-1]) and not led.append(retry[-1])


def test_decisions_are_a_function_of_state_and_event_id():
    a, b = make(ties="coins"), make(ties="coins")
    for p in (a, b):
        run(p, fixed_stream(300), 300, [])
    n = a.max_decide_batch()
    X, _, _ = fixed_stream(n, seed=9)
    ids = [f"evt-{i}" for i in range(n)]
    assert np.array_equal(a.decide(X, event_ids=ids).arms, b.decide(X, event_ids=ids).arms)


def test_inputs_are_clipped_before_the_tree_and_counted():
    pol = make(batch_size=4)
    pol.refit()
    X = np.zeros((4, 2, 4))
    X[:, :, 0] = [[3.0, 0.5]] * 4  # a candidate of norm 3 > L is clipped (scaled) in decisions
    dec = pol.decide(X)
    assert pol.counters["clipped_candidates"] == 4
    pol.learn(X[np.arange(4), dec.arms] * 10, np.array([5.0, -7.0, 0.5, 0.0]), dec.rounds)
    c = pol.counters
    assert c["clipped_actions"] == 4 and c["clipped_rewards"] == 2 and c["rows_inserted"] == 4
    M = packing(5).unpack(pol._agg.aggregator.exact_sum())
    assert np.all(np.diagonal(M)[:4] <= 4.0) and M[4, 4] <= 4.0 * 1.0  # every row ‖a‖² ≤ L̃²
    with pytest.raises(ValueError, match="finite"):
        pol.learn(np.full((1, 4), np.nan), np.zeros(1), dec.rounds[:1])


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_candidates_an_ulp_over_l_are_not_clipped_and_huge_ones_are_scored_clipped(monkeypatch):
    import streaming_dpbandit.policies.dp_linucb as mod

    seen = []
    real = mod.decide_arms

    def spy(pol, scores, *rest):
        seen.append(scores.copy())
        return real(pol, scores, *rest)

    monkeypatch.setattr(mod, "decide_arms", spy)
    pol = make(batch_size=8)
    pol.refit()
    X = np.zeros((2, 3, 4))
    X[:, 0, 0] = np.nextafter(1.0, 2.0)  # one ulp over L = 1: rounding, not an excess
    X[:, 1, :2] = [3.0, 4.0]  # norm 5: clipped to (0.6, 0.8)
    X[:, 2, :] = -1e200  # finite, but ‖x‖² overflows float64: clipped to (−0.5, …)
    pol.decide(X)
    assert pol.counters["clipped_candidates"] == 4  # not the ulp-over ones
    Y = X.copy()
    Y[:, 1, :2] = [0.6, 0.8]
    Y[:, 2, :] = -0.5
    want = pol._model.scores(Y.reshape(-1, 4), pol.width).reshape(2, 3)
    np.testing.assert_allclose(seen[0], want, rtol=1e-12)


def test_capacity_and_doubling_epochs_in_the_ledger():
    fixed, recs = make(n_cap=100, batch_size=50), []
    run(fixed, fixed_stream(300), 300, recs)
    assert fixed.counters["rows_inserted"] == 100 and fixed.counters["rows_dropped"] == 200
    dbl, recs = make(horizon_mode="doubling", n0=64, batch_size=50), []
    run(dbl, fixed_stream(1000), 1000, recs)
    epochs = [r for r in recs if "/epoch=" in r.release_id and "release" not in r.release_id]
    assert [r.params["epoch"] for r in epochs] == [0, 1, 2, 3]
    assert epochs[1].params["epoch_reason"] == "doubling: epoch 0 full"
    spend = Accountant(recs).spend("default", 0.1)
    assert spend.slices == 4 and spend.basic_epsilon == 1.0  # parallel composition
    assert "unbounded run" in dbl.privacy.scope


def test_explain_shows_every_constant_and_no_secret():
    out = make(noise="wishart").explain()
    c = out["constants"]
    for key in (
        "m",
        "n",
        "alpha",
        "a8",
        "a2",
        "rho_min",
        "rho_max",
        "gamma",
        "gamma_form",
        "shift",
        "c",
        "checks",
        "noise_law",
        "per_node",
        "L_tilde",
        "total_dof",
    ):
        assert key in c
    # exact calibration: the accountant's pessimistic PLD (grid 1e-3, m compositions) lands a
    # hair above ε — its discretisation error, not a spend beyond the claim
    assert out["accountant"]["epsilon_at_delta_pld"] == pytest.approx(1.0, abs=0.02)
    assert set(out["calibrations_compared"]) == {"certified", "paper", "zcdp", "authors_code_2018"}
    assert "unavailable" in out["calibrations_compared"]["zcdp"]  # Gaussian-only option
    assert "seed" not in out["params"] and "noise_scale_multiplier" in out["params"]


def test_dp_linucb_learns_with_a_large_budget():
    pol, recs = make(epsilon=50.0, n_cap=1 << 13, batch_size=64, calibration="certified"), []
    stream = fixed_stream(8192, seed=4)
    run(pol, stream, 8192, recs)
    cos = pol.coefficients @ ENV.theta / np.linalg.norm(pol.coefficients)
    assert cos > 0.9


@pytest.mark.parametrize(
    "n, kw",
    [
        (4096, dict(noise="gaussian")),
        (4096, dict(noise="wishart", shift=True)),
        (1024, dict(noise="wishart", shift=False)),
        (1024, dict(noise="gaussian", tree_impl="sqrt_toeplitz")),
        (1024, dict(noise="gaussian", tree_impl="blt")),
        (1024, dict(noise="gaussian", calibration="authors_code_2018")),
        (1024, dict(noise="gaussian", horizon_mode="doubling", n0=256)),
    ],
    ids=[
        "gauss",
        "wishart-shifted",
        "wishart-unshifted",
        "sqrt-toeplitz",
        "blt",
        "authors",
        "doubling",
    ],
)
def test_every_release_of_a_long_run_is_pd_and_inside_the_bounds(n, kw):
    """Spec §9: λmin(H_t) ≥ ρ_min, λmax(H_t) ≤ ρ_max, ‖h_t‖_{H_t⁻¹} ≤ γ at every release.

    One release per round (batch_size = 1); each bound fails with probability ≤ α/(2n) per
    round under the theory (α = 1/(2n)), so a single violation would mean wrong constants or
    missing padding. The count of non-PD releases is reported by the counters.
    """
    pol = make(n_cap=n, batch_size=1, track_bounds=True, **kw)
    run(pol, fixed_stream(n, seed=5), n, [])
    c = pol.counters
    assert c["sim_releases_checked"] == n and c["sim_non_pd_H"] == 0
    assert c["sim_min_lambda_min_over_rho_min"] >= 1.0
    assert c["sim_max_lambda_max_over_rho_max"] <= 1.0
    assert c["sim_max_h_norm_over_gamma"] <= 1.0
    assert c["cholesky_repairs"] == 0
