"""Non-private LinUCB (shared and disjoint) and the greedy ridge/OLS baseline."""

import math

import numpy as np
import pytest

from streaming_dpbandit.config import ConfigError, policy_config
from streaming_dpbandit.estimators.ucb_model import UCBModel, oful_beta
from streaming_dpbandit.policies import GreedyRidge, LinUCB, LinUCBDisjoint
from streaming_dpbandit.utils.serialization import dumps, loads


def stream(n, K=6, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, K, d))
    theta = np.linspace(1.0, -0.5, d)
    return X, theta, 0.1 * rng.normal(size=n)


def drive(pol, X, theta, noise, until, start=0):
    while pol.t < until:
        if pol.refit_due():
            pol.refit()
        t0 = pol.t
        m = min(pol.max_decide_batch(), until - t0)
        dec = pol.decide(X[t0 : t0 + m], event_ids=np.arange(t0 + 1, t0 + m + 1))
        x = X[np.arange(t0, t0 + m), dec.arms]
        pol.learn(x, x @ theta + noise[t0 : t0 + m], dec.rounds)


def test_model_is_the_ridge_solution_and_scores_are_the_ucb():
    X, theta, noise = stream(300)
    pol = LinUCB(d=4, reg=2.0, alpha=0.05, sigma=0.5, S=2.0, batch_size=300, seed=0)
    dec = pol.decide(X)
    x = X[np.arange(300), dec.arms]
    y = x @ theta + noise
    pol.learn(x, y, dec.rounds)
    pol.refit()
    V = 2.0 * np.eye(4) + x.T @ x
    np.testing.assert_allclose(pol.coefficients, np.linalg.solve(V, x.T @ y), rtol=1e-10)
    logdet = np.linalg.slogdet(V)[1]
    expected_beta = 0.5 * math.sqrt(2 * math.log(2 / 0.05) + logdet - 4 * math.log(2.0))
    expected_beta += 2.0 * math.sqrt(2.0)  # S·√reg
    assert pol.width == pytest.approx(expected_beta, rel=1e-12)
    # decisions: brute-force UCB with the explicit inverse
    Xn, _, _ = stream(50, seed=1)
    scores = Xn @ pol.coefficients + expected_beta * np.sqrt(
        np.einsum("bkd,de,bke->bk", Xn, np.linalg.inv(V), Xn)
    )
    assert np.array_equal(pol.decide(Xn).arms, scores.argmax(axis=1))


def test_batch_semantics_model_frozen_within_a_batch():
    X, theta, _ = stream(100)
    pol = LinUCB(d=4, batch_size=8, seed=0)
    assert pol.max_decide_batch() == 8 and not pol.refit_due()
    dec = pol.decide(X[:5])
    assert pol.max_decide_batch() == 3
    x = X[np.arange(5), dec.arms]
    pol.learn(x, x @ theta, dec.rounds)
    before = pol.coefficients
    pol.decide(X[5:8])
    np.testing.assert_array_equal(pol.coefficients, before)  # still frozen
    assert pol.refit_due() and pol.max_decide_batch() == 0
    with pytest.raises(RuntimeError, match="refit"):
        pol.decide(X[8:9])
    assert pol.refit() == [] and pol.model_version == 1
    assert not np.array_equal(pol.coefficients, before)
    with pytest.raises(ValueError, match="crosses a model update"):
        pol.decide(X[8:20])


def test_batched_linucb_learns():
    X, theta, noise = stream(3000)
    pol = LinUCB(d=4, batch_size=32, seed=0)
    drive(pol, X, theta, noise, 3000)
    cos = pol.coefficients @ theta / (np.linalg.norm(pol.coefficients) * np.linalg.norm(theta))
    assert cos > 0.99


@pytest.mark.parametrize(
    "make",
    [
        lambda: LinUCB(d=4, batch_size=16, seed=3),
        lambda: LinUCB(d=4, beta=0.7, seed=3),
        lambda: GreedyRidge(d=4, reg=0.5, batch_size=4, seed=3),
        lambda: LinUCBDisjoint(d=4, max_arms=6, batch_size=16, seed=3),
        lambda: LinUCBDisjoint(d=4, max_arms=6, batch_size=1, seed=3),  # row-by-row refits
    ],
    ids=["linucb", "linucb-fixed-beta", "greedy", "disjoint", "disjoint-per-event"],
)
def test_snapshot_round_trip_restores_identical_behaviour(make):
    X, theta, noise = stream(900)
    full = make()  # same call sequence, without the restart
    drive(full, X, theta, noise, 437)
    drive(full, X, theta, noise, 900)
    first = make()
    drive(first, X, theta, noise, 437)  # mid-batch: rows learned after the last refresh
    restored = make().load_state_dict(loads(dumps(first.state_dict())))
    drive(restored, X, theta, noise, 900)
    assert dumps(restored.state_dict()) == dumps(full.state_dict())
    if full.refit_due():
        full.refit()
        restored.refit()
    n = full.max_decide_batch()
    Xn, _, _ = stream(n, seed=9)
    a, b = full.decide(Xn, event_ids=range(n)), restored.decide(Xn, event_ids=range(n))
    assert np.array_equal(a.arms, b.arms)


def test_ties_lowest_index_or_coins_by_event_id():
    X = np.zeros((200, 4, 3))
    lin = LinUCB(d=3, beta=1.0, batch_size=1000, seed=0)
    dec = lin.decide(X)
    assert set(dec.arms.tolist()) == {0} and np.all(dec.propensities == 1.0)
    g1, g2 = GreedyRidge(d=3, seed=7), GreedyRidge(d=3, seed=7)
    ids = [f"e{i}" for i in range(200)]
    a1 = g1.decide(X[:1], event_ids=ids[:1]).arms
    a2 = g2.decide(X[:1], event_ids=ids[:1]).arms
    assert np.array_equal(a1, a2)  # a function of (state, event id)
    g3 = GreedyRidge(d=3, batch_size=1000, seed=7)
    arms = g3.decide(X, event_ids=ids).arms
    counts = np.bincount(arms, minlength=4)
    assert counts.min() > 20  # uniform over the 4 tied arms (expected 50 each)
    assert np.all(g3.decide(X[:3], event_ids=ids[:3]).propensities == 0.25)


def test_greedy_ols_with_reg_zero():
    rng = np.random.default_rng(0)
    pol = GreedyRidge(d=3, reg=0.0, batch_size=50, seed=0)
    X = rng.normal(size=(50, 2, 3))
    dec = pol.decide(X)
    x = X[np.arange(50), dec.arms]
    y = x @ np.array([1.0, -2.0, 0.5])
    pol.learn(x, y, dec.rounds)
    pol.refit()
    np.testing.assert_allclose(pol.coefficients, [1.0, -2.0, 0.5], atol=1e-8)


def test_disjoint_is_one_ridge_per_arm_and_handles_delayed_feedback():
    rng = np.random.default_rng(1)
    pol = LinUCBDisjoint(d=3, beta=0.5, batch_size=64, pending_capacity=100, seed=0)
    ctx = rng.normal(size=(64, 3))
    X = np.repeat(ctx[:, None, :], 3, axis=1)
    dec = pol.decide(X)
    # feedback arrives in reverse order, in two parts
    y = rng.normal(size=64)
    order = np.arange(64)[::-1]
    pol.learn(ctx[order[:30]], y[order[:30]], dec.rounds[order[:30]])
    pol.learn(ctx[order[30:]], y[order[30:]], dec.rounds[order[30:]])
    pol.refit()
    for a in range(3):
        sel = dec.arms == a
        V = np.eye(3) + ctx[sel].T @ ctx[sel]
        np.testing.assert_allclose(
            pol.coefficients[a], np.linalg.solve(V, ctx[sel].T @ y[sel]), rtol=1e-10
        )
    # feedback older than the pending capacity is dropped and counted
    for _ in range(3):
        if pol.refit_due():
            pol.refit()
        pol.decide(X)
    pol.learn(ctx[:1], y[:1], dec.rounds[:1])
    assert pol.counters["expired_feedback"] == 1


@pytest.mark.parametrize(
    "bad",
    [
        lambda X: X.__setitem__((0, 0, 0), np.nan),
        lambda X: X.__setitem__((1, 2, 1), np.inf),
    ],
)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_non_finite_contexts_are_rejected(bad):
    X = np.ones((3, 3, 2))
    bad(X)
    with pytest.raises(ValueError, match="finite"):
        LinUCB(d=2, beta=1.0, batch_size=10).decide(X)


def test_mask_excludes_arms():
    X = np.zeros((2, 3, 2))
    X[:, 0, 0] = 5.0
    pol = LinUCB(d=2, beta=1.0, batch_size=10)
    dec = pol.decide(X, mask=np.array([[False, True, True], [True, True, True]]))
    assert dec.arms.tolist() == [1, 0]


def test_ucb_model_repairs_a_non_pd_matrix_by_flooring_eigenvalues():
    V = np.diag([2.0, -1.0])
    m = UCBModel.fit(V, np.array([1.0, 1.0]), floor=0.5)
    assert m.repaired and m.logdet == pytest.approx(math.log(2.0 * 0.5))
    assert oful_beta(0.0, 2, 1.0, 0.1, 1.0, 1.0) > 1.0


@pytest.mark.parametrize(
    "name, params, message",
    [
        ("linucb", {}, "d: Field required"),
        ("linucb", {"d": 3, "batch_size": 0}, "greater than or equal to 1"),
        ("linucb-disjoint", {"d": 3, "max_arms": 0}, "greater than 0"),
        ("greedy", {"d": 3, "reg": -1}, "greater than or equal to 0"),
    ],
)
def test_configs_validate(name, params, message):
    with pytest.raises(ConfigError, match=message):
        policy_config(name, params)


def test_disjoint_cold_start_and_per_round_arm_ids():
    """Rows of one batch may offer different arms (a (B, K) table of ids), each learned by its
    own model; a new arm scores from the prior (θ = 0, width β‖x‖/√reg)."""
    pol = LinUCBDisjoint(d=2, beta=1.0, reg=4.0, batch_size=2, seed=0)
    x = np.array([3.0, 4.0])
    X = np.broadcast_to(x, (2, 2, 2))
    ids = [["p", "q"], ["q", "r"]]
    dec = pol.decide(X, arm_ids=ids)
    chosen = [ids[i][a] for i, a in enumerate(dec.arms)]
    pol.learn(X[:, 0], [10.0, 10.0], dec.rounds)
    pol.refit()
    for a in ("p", "q", "r"):
        n = chosen.count(a)
        expect = np.linalg.solve(4.0 * np.eye(2) + n * np.outer(x, x), n * 10.0 * x)
        np.testing.assert_allclose(pol.coefficients[a], expect, atol=1e-12)
    s = pol._scores_shared_ids(X[:1, :1], pol._slots_of(["new"], 3, True))[0, 0]
    assert s == pytest.approx(5.0 / 2.0)  # prior: 0 + 1·‖x‖/√4
    assert np.all(pol.coefficients["new"] == 0.0)


def test_disjoint_is_keyed_by_id_not_position():
    """Same arms in another order: the same arm wins (the old policy followed positions)."""
    pol = LinUCBDisjoint(d=1, beta=0.0, batch_size=1, seed=0)
    for _ in range(3):
        if pol.refit_due():
            pol.refit()
        dec = pol.decide(np.ones((1, 2, 1)), arm_ids=["good", "bad"])
        arm = ["good", "bad"][int(dec.arms[0])]
        pol.learn([[1.0]], [1.0 if arm == "good" else -1.0], dec.rounds)
    pol.refit()
    dec = pol.decide(np.ones((1, 2, 1)), arm_ids=["bad", "good"])
    assert int(dec.arms[0]) == 1


def test_disjoint_bounds_arms_by_lru_eviction_with_flat_memory():
    """At most max_arms models; the least recently used arm is forgotten (and starts cold if
    it comes back); feedback pending for an evicted arm is dropped and counted; the state's
    size stops growing once max_arms arms are kept."""
    rng = np.random.default_rng(0)
    pol = LinUCBDisjoint(d=3, max_arms=8, beta=1.0, batch_size=4, pending_capacity=64, seed=0)
    sizes = []
    for step in range(300):
        if pol.refit_due():
            pol.refit()
            sizes.append(len(dumps(pol.state_dict())))  # (no rows pending: at one phase)
        ids = [f"item{step * 4 + j}" for j in range(4)]  # four new arms every round
        ctx = rng.normal(size=(1, 4, 3))
        dec = pol.decide(ctx, arm_ids=ids)
        pol.learn(ctx[0, dec.arms], [1.0], dec.rounds)
    assert len(pol.arm_ids) == 8 and pol.counters["evicted_arms"] == 300 * 4 - 8
    assert max(sizes[25:]) <= min(sizes[25:]) * 1.01  # flat (only the ids' digits grow)
    assert pol._G.shape[0] == 9  # 8 slots and the prior
    # the LRU arm goes first: keep "hot" in every round, it is never evicted
    pol = LinUCBDisjoint(d=3, max_arms=3, beta=1.0, batch_size=1, seed=0)
    for step in range(20):
        if pol.refit_due():
            pol.refit()
        dec = pol.decide(np.ones((1, 2, 3)), arm_ids=["hot", f"cold{step}"])
        if step == 5:
            held = dec.rounds
            held_slot = int(dec.arms[0])
        else:
            pol.learn(np.ones((1, 3)), [0.0], dec.rounds)
    assert "hot" in pol.arm_ids and len(pol.arm_ids) == 3
    assert held_slot == 1  # the unexplored cold arm has the wider bound
    pol.learn(np.ones((1, 3)), [5.0], held)  # cold5 was evicted since: dropped, counted
    assert pol.counters["evicted_feedback"] == 1
    with pytest.raises(ValueError, match="more than max_arms"):
        pol.refit()
        pol.decide(np.ones((1, 4, 3)), arm_ids=["a", "b", "c", "d"])


def test_disjoint_frozen_decisions_insert_nothing():
    pol = LinUCBDisjoint(d=2, max_arms=2, beta=1.0, batch_size=4, seed=0)
    pol.decide(np.ones((1, 2, 2)), arm_ids=["a", "b"])
    before = dumps(pol.state_dict())
    frozen = pol.decide_frozen(np.ones((3, 2, 2)), arm_ids=["c", "a"])
    assert dumps(pol.state_dict()) == before
    live = pol.decide(np.ones((3, 2, 2)), arm_ids=["c", "a"])
    assert np.array_equal(frozen.arms, live.arms) and "c" in pol.arm_ids


@pytest.mark.parametrize("n_arms", [5, 100])  # one SYRK per arm; all outer products at once
def test_disjoint_learning_equals_one_ridge_per_arm(n_arms):
    rng = np.random.default_rng(4)
    pol = LinUCBDisjoint(d=3, max_arms=200, beta=1.0, batch_size=1, seed=0)
    X = rng.normal(size=(400, 3))
    y = rng.normal(size=400)
    ids = rng.integers(0, n_arms, 400)
    pol.learn_arms(X, y, [f"a{i}" for i in ids])
    pol.decide(np.zeros((1, 1, 3)), arm_ids=["a0"])
    pol.refit()
    for a in np.unique(ids)[:10]:
        sel = ids == a
        V = np.eye(3) + X[sel].T @ X[sel]
        np.testing.assert_allclose(
            pol.coefficients[f"a{a}"], np.linalg.solve(V, X[sel].T @ y[sel]), rtol=1e-10
        )


def test_disjoint_snapshot_under_a_new_max_arms():
    pol = LinUCBDisjoint(d=2, max_arms=4, beta=1.0, batch_size=8, seed=0)
    pol.decide(np.ones((1, 4, 2)), arm_ids=["a", "b", "c", "d"])
    state = loads(dumps(pol.state_dict()))
    bigger = LinUCBDisjoint(d=2, max_arms=6, beta=1.0, batch_size=8, seed=0).load_state_dict(state)
    bigger.decide(np.ones((1, 2, 2)), arm_ids=["e", "f"])
    assert len(bigger.arm_ids) == 6 and bigger.counters["evicted_arms"] == 0
    with pytest.raises(ValueError, match="max_arms = 2 is smaller"):
        LinUCBDisjoint(d=2, max_arms=2, beta=1.0, batch_size=8, seed=0).load_state_dict(state)


def test_disjoint_cached_scores_follow_every_refit():
    """The side-by-side model matrix is cached per decision set and patched at each refit:
    its scores equal those of a matrix built afresh."""
    rng = np.random.default_rng(2)
    pol = LinUCBDisjoint(d=3, beta=0.7, batch_size=1, seed=0)
    ids = ["a", "b", "c", "d"]
    for _ in range(60):
        if pol.refit_due():
            pol.refit()
        x = rng.normal(size=3)
        dec = pol.decide(np.broadcast_to(x, (1, 4, 3)), arm_ids=ids)
        pol.learn(x[None], [rng.normal()], dec.rounds)
    pol.refit()
    X = np.broadcast_to(rng.normal(size=(5, 1, 3)), (5, 4, 3))
    slots = pol._slots_of(ids, pol.t, False)
    cached = pol._scores_shared_ids(X, slots)
    pol._cat = None
    np.testing.assert_array_equal(cached, pol._scores_shared_ids(X, slots))


@pytest.mark.parametrize(
    ("d", "n_arms", "batch"),
    [(3, 5, 1), (4, 6, 64), (20, 10, 256), (60, 4, 32)],  # per event, stacked, per-arm SYRK
)
def test_disjoint_decisions_equal_a_plain_per_arm_ridge_ucb(d, n_arms, batch):
    """Every decision of ``LinUCBDisjoint`` (batched learning, cached side-by-side scores,
    refits of the dirty arms only) equals that of a per-arm ridge UCB written plainly:
    V_a = reg·I + Σ x xᵀ, θ_a = V_a⁻¹ u_a, score θ_aᵀx + β·sqrt(xᵀV_a⁻¹x), argmax, the model
    refreshed every ``batch`` rounds. The arm ids are shuffled every round."""
    rng = np.random.default_rng(7)
    reg, beta, n = 2.0, 0.8, 2048
    ids = [f"arm{k}" for k in range(n_arms)]
    thetas = rng.normal(size=(n_arms, d)) / math.sqrt(d)
    pol = LinUCBDisjoint(d=d, reg=reg, beta=beta, batch_size=batch, seed=0)
    V = np.broadcast_to(reg * np.eye(d), (n_arms, d, d)).copy()
    u = np.zeros((n_arms, d))
    t = 0
    while t < n:
        if pol.refit_due():
            pol.refit()
        Vinv = np.linalg.inv(V)  # the plain model, frozen for this batch
        theta = np.einsum("kij,kj->ki", Vinv, u)
        m = min(pol.max_decide_batch(), n - t)
        perm = rng.permutation(n_arms)  # the order of the decision set, shared by the batch
        ctx = rng.normal(size=(m, d))
        dec = pol.decide(
            np.broadcast_to(ctx[:, None, :], (m, n_arms, d)), arm_ids=[ids[k] for k in perm]
        )
        scores = ctx @ theta[perm].T + beta * np.sqrt(
            np.einsum("bi,kij,bj->bk", ctx, Vinv[perm], ctx)
        )
        assert np.array_equal(dec.arms, scores.argmax(axis=1)), f"round {t}"
        chosen = perm[dec.arms]
        y = np.einsum("bd,bd->b", ctx, thetas[chosen]) + 0.1 * rng.normal(size=m)
        pol.learn(ctx, y, dec.rounds)
        for b, a in enumerate(chosen):
            V[a] += np.outer(ctx[b], ctx[b])
            u[a] += y[b] * ctx[b]
        t += m
    pol.refit()
    for k in range(n_arms):
        np.testing.assert_allclose(pol.coefficients[ids[k]], np.linalg.solve(V[k], u[k]), rtol=1e-8)


def test_per_event_linucb_updates_match_a_fresh_factorisation_and_survive_a_restart():
    """b = 1: each refresh updates the factor row by row (square-root Sherman–Morrison), every
    REFACTOR_EVERY-th refactors; θ and the widths equal a fresh factorisation of V within
    rounding; the Gram sum does not depend on how rows were grouped into learn() calls; a
    policy restored from its state decides exactly as the uninterrupted one."""
    from streaming_dpbandit.estimators.ucb_model import UCBModel
    from streaming_dpbandit.policies.linucb import FOLD, REFACTOR_EVERY

    rng = np.random.default_rng(3)
    d, K, n = 12, 5, FOLD + REFACTOR_EVERY + 40
    X = rng.normal(size=(n, K, d)) / np.sqrt(d)
    theta = rng.normal(size=d)
    pol = LinUCB(d=d, beta=0.8, batch_size=1, seed=0)
    arms = []
    twin = None
    for t in range(n):
        if pol.refit_due():
            pol.refit()
        dec = pol.decide(X[t : t + 1])
        arms.append(int(dec.arms[0]))
        x = X[t, dec.arms]
        pol.learn(x, x @ theta, dec.rounds)
        if t == n // 2:
            twin = LinUCB(d=d, beta=0.8, batch_size=1, seed=0).load_state_dict(pol.state_dict())
            twin_from = t + 1
    chosen = X[np.arange(n), arms]
    V = np.eye(d) + chosen.T @ chosen
    np.testing.assert_allclose(pol.state_dict()["G"], V, rtol=1e-12, atol=1e-12)
    pol.refit()
    fresh = UCBModel.fit(V, chosen.T @ (chosen @ theta))
    np.testing.assert_allclose(pol.coefficients, fresh.theta, rtol=1e-9, atol=1e-9)
    probe = rng.normal(size=(50, d))
    np.testing.assert_allclose(
        pol._model.mean_width(probe)[1], fresh.mean_width(probe)[1], rtol=1e-9
    )
    # the restored twin, fed the same rounds, decides exactly the same
    for t in range(twin_from, n):
        if twin.refit_due():
            twin.refit()
        dec = twin.decide(X[t : t + 1])
        assert int(dec.arms[0]) == arms[t]
        x = X[t, dec.arms]
        twin.learn(x, x @ theta, dec.rounds)
    # one learn() call of all rows: the same Gram sum, bit for bit
    bulk = LinUCB(d=d, beta=0.8, batch_size=n, seed=0)
    bulk.decide(X)
    bulk.learn(chosen, chosen @ theta, np.arange(1, n + 1))
    assert np.array_equal(bulk.state_dict()["G"], pol.state_dict()["G"])


def test_disjoint_per_event_compiled_kernels_equal_the_numpy_path(monkeypatch):
    """Per event (b = 1, one context for every arm) the compiled kernels (numba: scores and
    argmax, the square-root Sherman–Morrison step, the rank-1 sums) decide exactly as the numpy
    path and learn the same sums and models within rounding, across periodic refactorisations;
    both refuse a non-finite context or reward and leave the model as it was."""
    from streaming_dpbandit.estimators import _ucb_kernels
    from streaming_dpbandit.policies.linucb import REFACTOR_EVERY

    if _ucb_kernels.load() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(11)
    K, d = 3, 20
    n = K * REFACTOR_EVERY + 50  # (some arm learns more than REFACTOR_EVERY rows: refactors)
    ids = [f"arm{k}" for k in range(K)]
    thetas = rng.normal(size=(K, d)) / math.sqrt(d)
    ctx = rng.normal(size=(n, d)) / math.sqrt(d)
    noise = 0.1 * rng.normal(size=n)

    def run():
        pol = LinUCBDisjoint(d=d, beta=0.8, batch_size=1, seed=0)
        arms = []
        for t in range(n):
            if pol.refit_due():
                pol.refit()
            dec = pol.decide(np.broadcast_to(ctx[t], (1, K, d)), arm_ids=ids)
            a = int(dec.arms[0])
            arms.append(a)
            pol.learn(ctx[t : t + 1], [ctx[t] @ thetas[a] + noise[t]], dec.rounds)
        pol.refit()
        assert pol._nupd.max() < pol.counters["rows_learned"] // K  # (an arm was refactored)
        before = pol.state_dict()
        bad = ctx[0].copy()
        bad[3] = np.nan
        with pytest.raises(ValueError, match="finite"):
            pol.decide(np.broadcast_to(bad, (1, K, d)), arm_ids=ids)
        dec = pol.decide(np.broadcast_to(ctx[0], (1, K, d)), arm_ids=ids)
        with pytest.raises(ValueError, match="finite"):
            pol.learn(bad[None], [1.0], dec.rounds)
        with pytest.raises(ValueError, match="finite"):
            pol.learn(ctx[:1], [np.inf], dec.rounds)
        np.testing.assert_array_equal(pol.state_dict()["G"], before["G"])
        return arms, before

    arms_c, state_c = run()
    monkeypatch.setattr(_ucb_kernels, "_loaded", None)  # the numpy path
    assert _ucb_kernels.load() is None
    arms_n, state_n = run()
    assert arms_c == arms_n
    np.testing.assert_allclose(state_c["G"], state_n["G"], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(state_c["u"], state_n["u"], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(state_c["theta"], state_n["theta"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state_c["proj"], state_n["proj"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state_c["logdet"], state_n["logdet"], rtol=1e-12)
