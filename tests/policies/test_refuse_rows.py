"""Each private policy refuses rows that break what its noise is calibrated for (issue 31 §3).

One row per round (FLIPHAT, DP-LinUCB with the binary tree and BLT, PrivateLASSO-R, LDP-GLB's
simulated devices), one reward per item per round (DPUCB-MAT, DPTS-MAT), one report per decision
(the LDP client), no row beyond its user's bound (the user-level wrapper): a violation raises
``RowRefused`` naming the offending rows, and nothing of the refused call is learned. Before
issue 31 every one of these calls was accepted (or, for the slate policies, refused with a bare
``ValueError`` the service could not tell from a bug).
"""

from __future__ import annotations

import numpy as np
import pytest

from streaming_dpbandit.ldp import LDPClient, ModelSpec
from streaming_dpbandit.ldp.model import ModelSnapshot
from streaming_dpbandit.policies import REGISTRY
from streaming_dpbandit.policies.user_level import UserLevel
from streaming_dpbandit.privacy.contribution import ReleaseRefused, RowRefused


def _decide(pol, n, d, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, k, d))
    dec = pol.decide(X)
    return X[np.arange(n), dec.arms], rng.normal(size=n), dec.rounds


def _fliphat(**kw):
    return REGISTRY["fliphat"](d=4, s=2, epsilon=1.0, delta=0.01, first_episode_len=8, seed=0, **kw)


def test_fliphat_refuses_a_round_twice_and_learns_nothing_of_the_call():
    pol = _fliphat()
    x, y, r = _decide(pol, 8, 4)
    pol.learn(x[:1], y[:1], r[:1])
    before = pol.state_dict()["accumulators"]["0"]["h"]
    with pytest.raises(RowRefused) as err:  # round 1 again, with a new round 2
        pol.learn(x[:2], y[:2], r[:2])
    assert err.value.reason == "duplicate_round"
    assert err.value.refused.tolist() == [True, False]
    assert pol.counters["rows_learned"] == 1
    assert pol.state_dict()["accumulators"]["0"]["h"] == before  # nothing of the call learned
    with pytest.raises(RowRefused) as err:  # twice within one call
        pol.learn(x[[2, 2]], y[[2, 2]], r[[2, 2]])
    assert err.value.refused.tolist() == [False, True]
    pol.learn(x[1:], y[1:], r[1:])  # the other rows are learned
    assert pol.counters["rows_learned"] == 8


def test_fliphat_late_rows_are_dropped_not_refused_and_the_record_survives_a_snapshot():
    pol = _fliphat()
    x, y, r = _decide(pol, 8, 4)
    pol.learn(x[:4], y[:4], r[:4])
    again = _fliphat().load_state_dict(pol.state_dict())
    with pytest.raises(RowRefused):
        again.learn(x[3:5], y[3:5], r[3:5])
    pol.refit()
    pol.learn(x, y, r)  # episode 0 is released: its rows are late, counted, never refused
    assert pol.counters["late_rows"] == 8 and pol.counters["rows_learned"] == 4
    assert pol.state_dict()["learned_rounds"]["lo"].size == 0  # released rounds are forgotten


def test_fliphat_refit_refuses_an_episode_with_more_rows_than_rounds():
    pol = _fliphat()
    x, y, r = _decide(pol, 8, 4)
    pol.learn(x, y, r)
    state = pol.state_dict()
    state["accumulators"]["0"]["count"] = 9  # damaged state: 9 rows for 8 rounds
    damaged = _fliphat().load_state_dict(state)
    with pytest.raises(ReleaseRefused):
        damaged.refit()
    assert damaged.model_version == 0


@pytest.mark.parametrize("impl", ["binary", "blt"])
def test_dp_linucb_refuses_a_round_twice(impl):
    pol = REGISTRY["dp-linucb"](d=4, n_cap=512, batch_size=8, tree_impl=impl, seed=0)
    pol.refit()
    x, y, r = _decide(pol, 8, 4)
    pol.learn(x[:5], y[:5], r[:5])
    with pytest.raises(RowRefused) as err:
        pol.learn(x[4:], y[4:], r[4:])
    assert err.value.refused.tolist() == [True, False, False, False]
    assert pol.counters["rows_inserted"] == 5
    pol.learn(x[5:], y[5:], r[5:])
    assert pol.counters["rows_inserted"] == 8


def _lasso(mode):
    return REGISTRY["private-lasso"](
        d=4, s0=1, horizon=64, support_cap=2, clip_l2=4.0, reward_bound=4.0, l_min=3,
        mode=mode, seed=0,
    )  # fmt: skip


@pytest.mark.filterwarnings("ignore:dense features")
@pytest.mark.parametrize("mode", ["forgetful", "episodic"])
def test_private_lasso_refuses_a_slot_twice(mode):
    pol = _lasso(mode)
    x, y, r = _decide(pol, 8, 4)
    pol.learn(x[:3], y[:3], r[:3])
    with pytest.raises(RowRefused) as err:
        pol.learn(x[2:4], y[2:4], r[2:4])
    assert err.value.refused.tolist() == [True, False]
    assert pol.counters["rows_learned"] == 3
    pol.refit()  # the first boundary: slots 1..8 are released, their rows late from now on
    pol.learn(x[:1], y[:1], r[:1])
    assert pol.counters["late_rows"] == 1


@pytest.mark.parametrize("name", ["dpucb-mat", "dpts-mat"])
def test_slate_policies_refuse_a_round_twice_and_a_slate_repeating_an_item(name):
    m = {"type": "uniform", "n_items": 5, "k": 2}
    pol = REGISTRY[name](matroid=m, epsilon=1.0, update_every=8, seed=0)
    b = pol.decide_slates(3)
    R = np.full((3, 2), 0.5)
    pol.learn(b.slates[:1], R[:1], b.rounds[:1])
    with pytest.raises(RowRefused) as err:
        pol.learn(b.slates[:2], R[:2], b.rounds[:2])
    assert err.value.reason == "duplicate_round" and err.value.refused.tolist() == [True, False]
    twice = b.slates[1:].copy()
    twice[0] = twice[0, 0]  # one item served twice: two rewards for it in one round
    with pytest.raises(RowRefused) as err:
        pol.learn(twice, R[1:], b.rounds[1:])
    assert err.value.reason == "slate_repeats_item"
    assert err.value.refused.tolist() == [True, False]
    assert pol.counters["rows_learned"] == 1


def test_ldp_glb_reports_each_round_once():
    pol = REGISTRY["ldp-glb"](d=4, n_arms=3, epsilon=4.0, refresh_every=8, seed=0)
    x, y, r = _decide(pol, 4, 4)
    with pytest.raises(RowRefused) as err:  # a second fresh report of round 1 would cost ε again
        pol.learn(x[[0, 0]], y[[0, 0]], r[[0, 0]])
    assert err.value.refused.tolist() == [False, True]
    assert pol.counters["reports"] == 0
    pol.learn(x, y, r)
    with pytest.raises(RowRefused):
        pol.learn(x[:1], y[:1], r[:1])
    assert pol.counters["reports"] == 4


def test_ldp_client_reports_a_decision_once():
    spec = ModelSpec(variant="sgd", setting="single", d=4, K=3, epsilon=1.0)
    snap = ModelSnapshot(
        bandit_id="b", model_id="m", model_version=0, spec=spec, theta=np.zeros(4), phase="main"
    )
    client = LDPClient(snap, max_epsilon=1.0, rng=np.random.default_rng(0))
    choice = client.decide(np.ones((3, 4)))
    client.report(choice, 1.0)
    with pytest.raises(RowRefused) as err:
        client.report(choice, 1.0)
    assert err.value.reason == "duplicate_report" and client.reports_sent == 1


@pytest.mark.parametrize("name", ["fliphat", "dp-linucb"])
def test_user_level_refuses_a_row_its_bound_refused_at_decision_time(name):
    inner = REGISTRY[name](**next(REGISTRY[name]._unit_test_params()), seed=0)
    pol = UserLevel(inner, max_contributions_per_user=1, seed=1)
    if pol.refit_due():
        pol.refit()
    x, y, r = _decide(pol, 3, 4)
    admitted = pol.admit(r, user_ids=["a", "a", "b"])  # as the service does, when deciding
    assert admitted.tolist() == [True, False, True]
    with pytest.raises(RowRefused) as err:
        pol.learn(x, y, r)
    assert err.value.reason == "beyond_user_bound"
    assert err.value.refused.tolist() == [False, True, False]
    assert pol.counters["rows_learned" if name == "fliphat" else "rows_inserted"] == 0
    pol.learn(x[admitted], y[admitted], r[admitted])
    again = UserLevel(REGISTRY[name](**next(REGISTRY[name]._unit_test_params()), seed=0), 1)
    again.load_state_dict(pol.state_dict())
    with pytest.raises(RowRefused):  # the refusal survives a snapshot
        again.learn(x[1:2], y[1:2], r[1:2])
