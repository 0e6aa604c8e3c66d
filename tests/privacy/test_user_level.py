"""User-level privacy (issue 22 §2): contribution bounding, group accounting, audits.

Derivation: docs/privacy/user-level.md.
"""

import json
import math

import numpy as np
import pytest

from streaming_dpbandit.experiments import user_level_audits as ula
from streaming_dpbandit.policies import REGISTRY
from streaming_dpbandit.policies.user_level import UserLevel
from streaming_dpbandit.privacy.ledger import ReleaseRecord
from streaming_dpbandit.privacy.user_bound import UserContributionBound
from streaming_dpbandit.privacy.user_level import (
    calibrate_for_group,
    group_component,
    user_level_spend,
)

# -- the bounder -------------------------------------------------------------------------------


def _admit(ub, users, windows):
    return ub.admit(ub.hash_users(users), np.asarray(windows)).tolist()


def test_at_most_k_per_user_per_window_and_counted():
    ub = UserContributionBound(2, seed=0)
    users = ["a", "b", "a", "a", "b", "a", "c"]
    got = _admit(ub, users, [0] * 7)
    assert got == [True, True, True, False, True, False, True]
    assert ub.counters["admitted"] == 5 and ub.counters["bounded"] == 2
    assert ub.counters["bounded_contributions"] == 2
    # a new window: fresh per-window counts
    assert _admit(ub, ["a", "a", "a"], [1, 1, 1]) == [True, True, False]


def test_max_releases_stops_a_user_whose_windows_are_spent():
    ub = UserContributionBound(1, max_releases_per_user=2, seed=0)
    assert _admit(ub, ["a", "b"], [0, 0]) == [True, True]
    assert _admit(ub, ["a"], [1]) == [True]
    assert _admit(ub, ["a", "b"], [2, 2]) == [False, True]
    assert ub.counters["bounded_releases"] == 1


def test_closing_frees_window_counts_and_bounds_late_rows():
    ub = UserContributionBound(3, seed=0)
    _admit(ub, [str(i) for i in range(50)], [0] * 50)
    _admit(ub, [str(i) for i in range(20)], [1] * 20)
    assert ub.memory_entries() == 70
    ub.close_below(1)
    assert ub.memory_entries() == 20  # window 0's counts are freed with its release
    assert _admit(ub, ["0"], [0]) == [False]  # a late row of a closed window is not learned
    assert ub.counters["bounded_closed"] == 1


def test_capacity_caps_memory_and_bounds_new_users():
    ub = UserContributionBound(1, max_releases_per_user=5, max_users=10, seed=0)
    got = _admit(ub, [str(i) for i in range(15)], [0] * 15)
    assert got == [True] * 10 + [False] * 5
    assert ub.counters["bounded_capacity"] == 5
    assert ub.memory_entries() == 20  # 10 in the window table + 10 release counters


def test_admission_reads_ids_and_order_only():
    """Same ids → same mask whatever the contents (the derivation's premise), and str(id)
    is the user: 7 and "7" are one user."""
    ub1, ub2 = UserContributionBound(1, seed=3), UserContributionBound(1, seed=3)
    assert _admit(ub1, [7, "7", 8], [0, 0, 0]) == [True, False, True]
    assert _admit(ub2, ["7", 7, 8], [0, 0, 0]) == [True, False, True]


def test_user_ids_are_keyed_hashes_never_in_clear():
    a, b = UserContributionBound(1, seed=1), UserContributionBound(1, seed=2)
    assert a.hash_users(["alice"])[0] != b.hash_users(["alice"])[0]
    assert (a.hash_users(["alice"]) == UserContributionBound(1, seed=1).hash_users(["alice"])).all()
    _admit(a, ["alice", "bob"], [0, 0])
    state = json.dumps(a.state_dict())
    assert "alice" not in state and "bob" not in state
    assert "alice" not in repr(a) and a.state_dict()["key"] not in repr(a)
    # an unseeded bounder draws a fresh key
    c, d = UserContributionBound(1), UserContributionBound(1)
    assert c.hash_users(["x"])[0] != d.hash_users(["x"])[0]


def test_state_round_trip_continues_counting():
    ub = UserContributionBound(2, max_releases_per_user=2, seed=5)
    _admit(ub, ["a", "a", "b"], [0, 0, 0])
    ub2 = UserContributionBound(2, max_releases_per_user=2).load_state_dict(
        json.loads(json.dumps(ub.state_dict()))
    )
    assert _admit(ub2, ["a", "b", "a"], [0, 0, 1]) == [False, True, True]
    assert _admit(ub2, ["a"], [2]) == [False]
    # a bounder that hashed with its own key before loading hashes with the loaded key after
    ub3 = UserContributionBound(2, max_releases_per_user=2, seed=99)
    ub3.hash_users(["a"])
    ub3.load_state_dict(ub.state_dict())
    assert ub3.hash_users(["a"])[0] == ub.hash_users(["a"])[0]
    import pickle

    assert pickle.loads(pickle.dumps(ub3)).hash_users(["a"])[0] == ub.hash_users(["a"])[0]


@pytest.mark.parametrize(
    "k, e, users",
    [(0, None, 1), (1.5, None, 1), (1, 0, 1), (True, None, 1), (1, None, 0)],
)
def test_invalid_bounds_are_rejected(k, e, users):
    with pytest.raises(ValueError):
        UserContributionBound(k, e, max_users=users, seed=0).admit(
            np.zeros(1, np.uint64), np.zeros(1)
        )


# -- the policy wrapper ------------------------------------------------------------------------


def _run(pol, user_ids=None, T=600, seed=0, d=5):
    rng = np.random.default_rng(seed)
    recs, arms = [], []
    t = 0
    while t < T:
        if pol.refit_due():
            recs.extend(pol.refit())
        m = min(pol.max_decide_batch(), T - t, 64)
        X = rng.normal(size=(m, 3, d))
        dec = pol.decide(X)
        arms.append(dec.arms)
        y = X[np.arange(m), dec.arms, 0] + 0.1 * rng.normal(size=m)
        if user_ids is None:
            pol.learn(X[np.arange(m), dec.arms], y, dec.rounds)
        else:
            pol.learn(X[np.arange(m), dec.arms], y, dec.rounds, user_ids=user_ids[t : t + m])
        t += m
    return np.concatenate(arms), recs


@pytest.mark.parametrize("name", ["fliphat", "dp-linucb", "linucb", "lasso-bandit"])
def test_without_user_ids_the_wrapper_is_the_policy(name):
    """Backward compatible: no user ids = event level, the same decisions and releases."""
    params = {"d": 5, "seed": 3}
    if name in ("fliphat", "dp-linucb"):
        params |= {"epsilon": 1.0, "delta": 1e-6}
    if name == "fliphat":
        params |= {"s": 3}
    if name == "dp-linucb":
        params |= {"n_cap": 600}
    a0, r0 = _run(REGISTRY[name](**params))
    a1, r1 = _run(UserLevel(REGISTRY[name](**params), 2, seed=1))
    assert (a0 == a1).all()

    def strip(recs):  # everything but the wall-clock time and the user-level bound
        return [
            {k: v for k, v in r.to_dict().items() if k not in ("time", "user_level")} for r in recs
        ]

    assert len(r0) == len(r1) and strip(r0) == strip(r1)
    # the wrapper's releases say the bound their rows were admitted under
    assert all(r.user_level is None for r in r0)
    assert all(r.user_level["max_contributions_per_user"] == 2 for r in r1)


def test_fliphat_learns_at_most_k_rows_per_user_per_episode():
    T, k = 600, 2
    users = np.array(["u"] * T)  # one user only
    pol = UserLevel(
        REGISTRY["fliphat"](d=5, s=3, epsilon=1.0, delta=1e-6, first_episode_len=1, seed=0),
        k,
        seed=0,
    )
    _, recs = _run(pol, users, T=T)
    sch = pol.policy.schedule
    last = int(sch.episode_of(np.array([T]))[0])
    # every episode but the last is complete; the user fills min(k, its length) rows of each
    expect = sum(min(k, sch.length(e)) for e in range(last)) + min(k, T - sch.start(last) + 1)
    assert pol.counters["rows_learned"] == expect
    assert pol.user_counters()["admitted"] == expect
    assert pol.user_counters()["bounded"] == T - expect
    assert all(r.rows_used <= k for r in recs)
    # the per-episode counts were freed with the released episodes
    assert pol.user_counters()["counter_entries"] <= 2


def test_fliphat_rows_go_to_their_episodes_window():
    pol = REGISTRY["fliphat"](d=3, s=2, epsilon=1.0, delta=1e-6, seed=0)
    rounds = np.array([1, 2, 3, 4, 7, 8, 15, 16])
    assert (pol.contribution_windows(rounds) == pol.schedule.episode_of(rounds)).all()
    # the default (every other policy): one window for the run
    lin = REGISTRY["dp-linucb"](d=3, epsilon=1.0, delta=1e-6, n_cap=100)
    assert (lin.contribution_windows(rounds) == 0).all() and lin.open_windows_from() == 0


def test_hashing_on_arrival_gives_the_same_admission():
    mk = lambda: UserLevel(REGISTRY["random"](d=2, seed=0), 1, seed=4)  # noqa: E731
    a, b = mk(), mk()
    users = ["x", "y", "x", "z", "y"]
    rounds = np.arange(1, 6)
    m1 = a.admit(rounds, user_ids=users)
    m2 = b.admit(rounds, user_hashes=b.hash_users(users))
    assert m1.tolist() == m2.tolist() == [True, True, False, True, False]
    with pytest.raises(ValueError):
        b.admit(rounds, user_ids=users[:3])


def test_max_releases_through_the_wrapper():
    T = 600
    users = np.array(["u"] * T)
    pol = UserLevel(
        REGISTRY["fliphat"](d=5, s=3, epsilon=1.0, delta=1e-6, first_episode_len=1, seed=0),
        1,
        3,
        seed=0,
    )
    _run(pol, users, T=T)
    assert pol.user_counters()["admitted"] == 3
    assert pol.user_counters()["bounded_releases"] > 0


def test_wrapper_state_and_statement():
    pol = UserLevel(REGISTRY["dp-linucb"](d=3, epsilon=1.0, delta=1e-6, n_cap=100), 4, 2, seed=9)
    _run(pol, np.array([f"u{i % 7}" for i in range(60)]), T=60, d=3)
    st = pol.state_dict()
    assert "u1" not in json.dumps(st["user_bound"])
    clone = UserLevel(REGISTRY["dp-linucb"](d=3, epsilon=1.0, delta=1e-6, n_cap=100), 4, 2)
    clone.load_state_dict(st)
    assert clone.user_counters() == pol.user_counters()
    text = pol.privacy.text()
    assert "one user" in text and "at most 4" in text and "at most 2 releases" in text
    assert pol.explain()["user_level"]["max_contributions_per_user"] == 4
    assert "compose sequentially" in text and "in parallel" not in text.replace(
        "not in parallel", ""
    )


def test_wrapper_statement_is_per_release_for_k_rows():
    from streaming_dpbandit.experiments.user_level import group_params

    params = group_params("fliphat", {"d": 5, "s": 3}, 4, 1.0, 1e-6)
    st = UserLevel(REGISTRY["fliphat"](**params), 4).privacy
    assert st.epsilon == pytest.approx(1.0) and st.delta == pytest.approx(1e-6)


# -- accounting --------------------------------------------------------------------------------


def _recs(n, comp, parallel=True):
    return [
        ReleaseRecord(
            f"b/r/{i}", "b", "m", "certified", "v", True, epsilon=1.0, delta=1e-6,
            accounting=[dict(comp)], data_slice=f"episode:{i}",
            composition="parallel" if parallel else "sequential",
        )
        for i in range(n)
    ]  # fmt: skip


def test_group_component_rules():
    g = group_component({"type": "gaussian", "sensitivity": 2.0, "sigma": 5.0, "count": 3}, 4)
    assert g["sensitivity"] == 8.0 and g["sigma"] == 5.0 and g["count"] == 3
    assert group_component({"type": "pure", "epsilon": 0.3}, 3)["epsilon"] == pytest.approx(0.9)
    assert group_component({"type": "zero"}, 5)["type"] == "zero"
    e = group_component({"type": "eps_delta", "epsilon": 0.5, "delta": 0.0}, 3)
    assert e["epsilon"] == 1.5 and e["delta"] == 0.0
    with pytest.raises(ValueError):
        group_component({"type": "mystery"}, 2)


def test_a_users_releases_compose_sequentially_not_in_parallel():
    recs = _recs(8, {"type": "laplace", "sensitivity": 1.0, "scale": 2.0})
    one = user_level_spend(recs, "b", k=1, max_releases=1)
    assert one.spend.pure_epsilon == pytest.approx(0.5)  # one slice: event-level parallel value
    sp = user_level_spend(recs, "b", k=3, max_releases=4)
    assert sp.spend.pure_epsilon == pytest.approx(4 * 3 * 0.5)
    nocap = user_level_spend(recs, "b", k=3)
    assert nocap.releases_per_user == 8 and nocap.spend.pure_epsilon == pytest.approx(12.0)
    assert "at most 3 events per release, at most 4 releases" in sp.statement()


def test_sequential_records_are_grouped_by_k_times_e():
    recs = _recs(1, {"type": "pure", "epsilon": 0.1}, parallel=False)
    sp = user_level_spend(recs, "b", k=2, max_releases=3, windows=10)
    assert sp.spend.pure_epsilon == pytest.approx(0.1 * 2 * 3)


def test_gaussian_user_level_pld_matches_the_scaled_gaussian():
    """k rows through a Gaussian with Δ/σ = μ equal one Gaussian with kμ (GDP)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    comp = {"type": "gaussian", "sensitivity": 1.0, "sigma": 8.0, "count": 1}
    sp = user_level_spend(_recs(3, comp), "b", k=2, max_releases=2, delta=1e-5)
    ref = pld.from_gaussian_mechanism(8.0 / 2, value_discretization_interval=1e-3)
    ref = ref.compose(ref).get_epsilon_for_delta(1e-5)
    assert sp.spend.epsilon_at_delta == pytest.approx(ref, rel=1e-3)
    assert sp.pld_exact


def test_unequal_slices_with_a_cap_leave_pld_out_and_sum_the_worst():
    recs = _recs(3, {"type": "pure", "epsilon": 0.1})
    recs[1].accounting = [{"type": "pure", "epsilon": 0.4}]
    sp = user_level_spend(recs, "b", k=2, max_releases=2, delta=1e-6)
    assert not sp.pld_exact and sp.spend.epsilon_at_delta is None
    assert sp.spend.pure_epsilon == pytest.approx(2 * (0.4 + 0.1))


def test_calibrate_for_group_gaussian_scales_sigma_by_k():
    def acc(e):
        # analytic-Gaussian-free stand-in: σ(ε) from the accountant's own PLD, via bisection
        return [{"type": "gaussian", "sensitivity": 1.0, "sigma": 4.0 / e, "count": 1}]

    e1 = calibrate_for_group(acc, 3, 1.0, 1e-6)
    # σ(ε′) = 4/ε′ must be 3 × σ*(1) where σ* is the σ that costs ε = 1 for Δ = 1
    target = calibrate_for_group(acc, 1, 1.0, 1e-6)
    assert target == 1.0
    from streaming_dpbandit.privacy.user_level import user_level_spend as uls

    rec = _recs(1, acc(e1)[0])
    assert uls(rec, "b", k=3, delta=1e-6).spend.epsilon_at_delta <= 1.0 + 1e-9
    rec = _recs(1, acc(e1 * 1.01)[0])
    assert uls(rec, "b", k=3, delta=1e-6).spend.epsilon_at_delta > 1.0


# -- audits (DESIGN §7): the derived calibration passes, the mutants are caught ----------------


def test_user_level_laplace_audit_bounding_and_halved_noise():
    ok = ula.audit_user_laplace(1.0)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon  # sharp: k·Δ is attained
    halved = ula.audit_user_laplace(0.5)
    assert not halved.passed and halved.epsilon_lb > 1.5, halved
    unbounded = ula.audit_user_laplace(1.0, bound=False)  # u's k + 2 events all enter
    assert not unbounded.passed, unbounded


def test_user_level_dp_linucb_tree_audit_and_halved_noise():
    ok = ula.audit_user_tree(1.0)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.6 * ok.claimed_epsilon
    halved = ula.audit_user_tree(0.5)
    assert not halved.passed and halved.epsilon_lb > 1.5, halved


def test_user_level_private_lasso_gram_audit_bounding_and_halved_noise():
    ok = ula.audit_user_lasso_gram(1.0)
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.7 * ok.claimed_epsilon  # sharp: u's k aligned rows attain k·L̃²
    halved = ula.audit_user_lasso_gram(0.5)
    assert not halved.passed and halved.epsilon_lb > 1.5, halved
    unbounded = ula.audit_user_lasso_gram(1.0, bound=False)  # u's k + 1 rows all enter
    assert not unbounded.passed, unbounded


def test_private_lasso_group_calibration_meets_the_target():
    from streaming_dpbandit.policies.user_level import group_params, private_lasso_group_epsilon
    from streaming_dpbandit.privacy.zcdp import epsilon_from_rho, rho_from_epsilon_delta

    for k, eps, delta in [(2, 1.0, 1e-6), (5, 1.0, 1e-8), (10, 4.0, 1e-7), (3, 0.1, 1e-9)]:
        e1 = group_params("private-lasso", {"d": 5}, k, eps, delta)["epsilon"]
        assert e1 == private_lasso_group_epsilon(k, eps, delta)
        # k rows cost k²ρ(ε′): at most ρ(ε), and tight to the last digits
        target = rho_from_epsilon_delta(eps, delta)
        assert target * (1 - 1e-9) <= k * k * rho_from_epsilon_delta(e1, delta) <= target
        # (the ρ → ε conversion's own round-off is an ulp or so)
        assert epsilon_from_rho(k * k * rho_from_epsilon_delta(e1, delta), delta) <= eps * (
            1 + 1e-12
        )
    assert private_lasso_group_epsilon(1, 0.7, 1e-6) == 0.7
    # the ledger of a real run states it: every release's k-grouped ρ sums to ≤ ρ(ε) per block
    rho_k, eps_t = ula.lasso_user_target()
    pol = UserLevel(ula.lasso_user_policy(3), 3, seed=0)
    pol.decide(np.zeros((4, 2, 2)))
    pol.learn(np.ones((4, 2)), np.ones(4), np.arange(1, 5), user_ids=["u"] * 4)
    recs = pol.refit()
    sp = pol.user_level_spend(recs, delta=ula.LASSO_AUDIT_DELTA)
    assert sp.spend.rho <= rho_k * (1 + 1e-12) and sp.spend.rho >= rho_k * (1 - 1e-9)
    assert min(c["epsilon"] for c in sp.spend.candidates()) <= eps_t * (1 + 1e-12)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_private_lasso_windows_are_its_blocks():
    """Forgetful: a row enters exactly its block's release, so k rows per user per block;
    episodic: boundaries read every earlier slot, one window for the run."""
    kw = {"d": 5, "s0": 2, "horizon": 600, "clip_l2": 3.0, "reward_bound": 3.0, "seed": 0}
    pol = REGISTRY["private-lasso"](**kw)
    rounds = np.array([1, 256, 257, 512, 513, 600])
    assert pol.contribution_windows(rounds).tolist() == [8, 8, 9, 9, 10, 10]
    assert pol.open_windows_from() == 8
    epi = REGISTRY["private-lasso"](**kw, mode="episodic")
    assert (epi.contribution_windows(rounds) == 0).all() and epi.open_windows_from() == 0
    ul = UserLevel(pol, 2, seed=1)
    recs = _run(ul, np.array([f"u{i % 13}" for i in range(600)]), T=600)[1]
    c = ul.user_counters()
    assert c["admitted"] == 3 * 26 and c["bounded"] == 600 - 3 * 26  # blocks 8, 9 and 10
    assert [r.rows_used for r in recs if r.mechanism != "tree_node"] == [26, 26]
    assert c["counter_entries"] <= 13  # the released blocks' counts were freed


def test_fliphat_group_calibration_meets_the_target():
    from streaming_dpbandit.experiments.user_level import group_params

    for k in (2, 5, 10):
        p = group_params("fliphat", {"d": 5}, k, 1.0, 1e-6)
        g = group_component({"type": "eps_delta", "epsilon": p["epsilon"], "delta": p["delta"]}, k)
        assert g["epsilon"] == pytest.approx(1.0) and g["delta"] == pytest.approx(1e-6)
        assert math.isclose(p["epsilon"], 1.0 / k)


@pytest.mark.parametrize(
    "name, extra",
    [
        ("random", {}),
        ("lasso-bandit", {}),
        ("linucb", {}),
        ("linucb-disjoint", {}),
        ("greedy", {}),
        ("dp-linucb", {}),
        ("th-lasso", {}),
        ("sa-lasso", {}),
        ("ldp-glb", {}),
        ("ldp-ucb", {}),
        ("ldp-gloc", {}),
        (
            "private-lasso",
            {"s0": 2, "horizon": 600, "clip_l2": 3.0, "reward_bound": 3.0} | {"mode": "episodic"},
        ),
    ],
)
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_every_registered_policy_learns_through_the_bound(name, extra):
    """One window for the run (the default hook): k = 2 rows of each of 13 users."""
    pol = UserLevel(REGISTRY[name](d=5, seed=0, **extra), 2, seed=1)
    _run(pol, np.array([f"u{i % 13}" for i in range(120)]), T=120)
    c = pol.user_counters()
    assert c["admitted"] == 26 and c["bounded"] == 120 - 26
