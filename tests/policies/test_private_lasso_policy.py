"""PrivateLASSO-R and the paper variant as policies: schedule, participation, billboard, state.

Spec §11.5 (the path the audit covers), §11.8 participation audit, §11.9 literal goldens,
§11.10 billboard, §11.12 determinism and checkpoints; plus the product rules (forgetting,
duplicates, clipping counts, config gating, release-before-use).
"""

import copy
import math

import numpy as np
import pytest

from streaming_dpbandit.config import ConfigError, policy_config, validate_for_mode
from streaming_dpbandit.envs import MarginEnv
from streaming_dpbandit.experiments.private_lasso_audits import selection_scores
from streaming_dpbandit.policies import REGISTRY, PrivateLASSO, policy_class
from streaming_dpbandit.policies.private_lasso_paper import (
    PrivateLASSOPaper,
    paper_constants,
    paper_svt,
)
from streaming_dpbandit.privacy.accountant import Accountant, _component_rho
from streaming_dpbandit.privacy.contribution import RowRefused
from streaming_dpbandit.privacy.statement import PAPER_LABEL
from streaming_dpbandit.privacy.svt import SparseVector, pass_probability
from streaming_dpbandit.privacy.zcdp import rho_from_epsilon_delta
from streaming_dpbandit.utils.serialization import dumps, loads

ENV = MarginEnv(d=60)
Z_COUNT = 4.0


def make(**kw):
    params = {
        "d": 60,
        "s0": 5,
        "horizon": 2**12,
        "epsilon": 50.0,
        "delta": 1e-8,
        "l_min": 6,
        "seed": 3,
        # the fast backend: the Gaussian-marked components and the audits below are its (the
        # secure backend's: tests/privacy/test_secure_private_lasso.py)
        "noise_backend": "fast",
        **ENV.public_bounds(),
    }
    params.update(kw)
    return PrivateLASSO(**params)


def drive(pol, X, noise, until, records, absent=None, ids=True):
    """Drive ``pol`` over a fixed stream (X: T×K×d) from its current slot up to ``until``."""
    mu = ENV.mean_rewards(X)
    while pol.t < until:
        if pol.refit_due():
            records.extend(pol.refit())
        t0 = pol.t
        n = min(pol.max_decide_batch(), until - t0, 300)
        dec = pol.decide(X[t0 : t0 + n], event_ids=np.arange(t0 + 1, t0 + n + 1) if ids else None)
        rows = np.arange(t0, t0 + n)
        keep = np.ones(n, dtype=bool) if absent is None else ~absent[rows]
        pol.learn(
            X[rows[keep], dec.arms[keep]],
            mu[rows[keep], dec.arms[keep]] + noise[rows[keep], dec.arms[keep]],
            dec.rounds[keep],
        )
        if absent is not None and (~keep).any():
            pol.expire(dec.rounds[~keep])


def stream(T, seed=0):
    rng = np.random.default_rng(seed)
    return ENV.contexts(rng, T), ENV.reward_noise(rng, T)


# -- schedule, worked example -------------------------------------------------------------------
def test_worked_example_goldens():
    """Spec §5.4: d = 10⁴, s0 = 5, c = 10, nnz ≤ 8, T_max = 2^20, δ = 1e−7."""
    kw = dict(d=10_000, s0=5, horizon=2**20, delta=1e-7, clip_coord=1.0, clip_l2=math.sqrt(8))
    kw["reward_bound"] = math.sqrt(5) + math.sqrt(3) * 0.1
    for eps, mode, expect in [
        (
            1.0,
            "forgetful",
            dict(
                N=2**17,
                sensitivity=4.973e-4,
                rho_svt=0.011285,
                svt_sigma=0.02094,
                margin=0.3183,
                gram_sigma=182.2,
            ),
        ),
        (
            1.0,
            "episodic",
            dict(
                N=2**18,
                sensitivity=2.487e-4,
                rho_svt=6.84e-4,
                svt_sigma=0.04252,
                margin=0.6464,
                snap_sigma=604.3,
                node_sigma=794.2,
            ),
        ),
        (
            8.0,
            "forgetful",
            dict(
                N=2**17,
                sensitivity=4.973e-4,
                rho_svt=0.60249,
                svt_sigma=0.00287,
                margin=0.0436,
                gram_sigma=24.94,
            ),
        ),
        (
            8.0,
            "episodic",
            dict(
                N=2**18,
                sensitivity=2.487e-4,
                rho_svt=0.036515,
                svt_sigma=0.00582,
                margin=0.0885,
                snap_sigma=82.7,
                node_sigma=108.7,
            ),
        ),
    ]:
        pol = PrivateLASSO(epsilon=eps, mode=mode, **kw)
        assert (pol.lmin, pol.lmax, pol.n_episodes, pol.cap) == (9, 19, 11, 10)
        assert pol.elastic_net().lipschitz == pytest.approx(29.629, abs=5e-4)
        assert pol.gram_l2sq == pytest.approx(15.805, abs=5e-4)
        assert pol.elastic_net().smoothness == pytest.approx(17.0)
        k = pol.boundary_constants(18)
        for key, val in expect.items():
            assert k[key] == pytest.approx(val, rel=2e-3), (eps, mode, key)
        assert 4 * k["lambda_N"] == pytest.approx(
            0.0163 if mode == "forgetful" else 0.0118, abs=5e-5
        )
        if mode == "forgetful":
            assert k["iterations"] == 182
            assert pol.shift(k["gram_sigma"], 10) == pytest.approx(
                4523 if eps == 1 else 619.0, rel=2e-3
            )
    assert rho_from_epsilon_delta(1.0, 1e-7) == pytest.approx(0.015047, abs=5e-7)


def test_boundaries_fire_on_schedule_and_forget():
    X, noise = stream(2**12)
    pol, recs = make(), []
    drive(pol, X, noise, 2**12, recs)
    assert [r.params["boundary"] for r in recs] == list(range(6, 12))
    for r in recs:
        lo, hi = r.event_range
        assert (lo, hi) == pol.block(r.params["boundary"]) and r.rows_used == hi - lo + 1
        assert r.composition == "parallel" and r.data_slice == f"block:{r.params['boundary']}"
    # every released block was erased; only records of (2^11, 2^12] were never stored
    assert pol.state_dict()["stores"] == {}
    assert pol.counters["unused_rows"] == 2**11 and pol.counters["late_rows"] == 0


def test_the_policy_runs_the_audited_svt():
    """The boundary's SVT is SparseVector with the boundary's σ, τ, c on |θ̃| in a fresh order."""
    X, noise = stream(2**8)
    pol = make(l_min=7, horizon=2**9)
    drive(pol, X, noise, 2**7, [])
    k = pol.boundary_constants(7)
    q = selection_scores(pol, 7)
    ref = copy.deepcopy(pol)
    (rec,) = pol.refit()
    rng = ref._noise.generator(ref.bandit_id, "private-lasso", "svt", 7)
    order = rng.permutation(60)
    res = SparseVector(k["tau"], k["svt_sigma"], pol.cap).run(q, rng, order=order)
    assert rec.release["support"] == sorted(res.selected.tolist())
    assert rec.params["svt_halt_index"] == res.halted_at


# -- §11.8 participation audit ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["forgetful", "episodic"])
def test_participation_audit(mode):
    T = 2**12
    X, noise = stream(T, seed=1)
    absent = np.random.default_rng(2).random(T) < 0.1
    pol, recs = make(mode=mode, refresh_every=16), []
    drive(pol, X, noise, T, recs, absent=absent)
    rho = pol.rho
    spent = np.zeros(T + 1)
    for r in recs:
        lo, hi = r.event_range
        per_slot = sum(_component_rho(c) for c in r.accounting)
        spent[lo : hi + 1] += per_slot
    assert spent.max() <= rho * (1 + 1e-12)
    if mode == "forgetful":
        used = [r for r in recs if r.release["support"]]
        assert used  # ε = 50 selects at most boundaries
        for r in used:
            lo, hi = r.event_range
            assert np.allclose(spent[lo : hi + 1], rho, rtol=1e-12)
    # the ledger's accountant (sequential records + the worst parallel slice) bounds every slot
    sp = Accountant(recs).spend("default")
    assert sp.dp_valid and spent.max() * (1 - 1e-12) <= sp.rho <= rho * (1 + 1e-12)
    if mode == "forgetful":  # one slice per slot: the accountant is exact
        assert sp.rho == pytest.approx(spent.max(), rel=1e-12)
    # each component as what it is: the SVT pure ε (c runs of ε0), the Gram / tree releases
    # Gaussian-marked zcdp, so the PLD is valid for all of them
    comps = [c for r in recs for c in r.accounting]
    svt = [c for c in comps if c.get("mechanism") == "svt"]
    assert svt and all(c["type"] == "pure" and c["count"] == pol.cap for c in svt)
    gauss = [c for c in comps if c["type"] == "zcdp"]
    assert gauss and all(c["gaussian"] is True for c in gauss)
    assert not sp.rdp_only and Accountant(recs).spend("default", 1e-6).epsilon_at_delta


def test_duplicates_are_refused_late_rows_and_clipping_are_counted():
    X, noise = stream(2**7)
    pol = make(l_min=6, horizon=2**8)
    absent = np.zeros(2**7, dtype=bool)
    absent[39] = True  # slot 40's reward is learned below
    drive(pol, X, noise, 40, [], absent=absent)
    x = X[:1, 0] * 10.0  # far outside the bounds
    before = pol.counters
    with pytest.raises(RowRefused):  # slot 3 was already learned: refused (issue 31 §3)
        pol.learn(x, np.array([100.0]), np.array([3]))
    assert pol.counters == before  # nothing of the refused call was learned or counted
    pol.learn(x, np.array([100.0]), np.array([40]))  # clipped, not a duplicate
    c = pol.counters
    assert c["clipped_rewards"] == 1 and c["clipped_coords"] > 0
    drive(pol, X, noise, 2**7, [])
    pol.learn(X[:1, 0], np.array([0.0]), np.array([5]))  # block [1, 64] is already released
    assert pol.counters["late_rows"] == 1


# -- §11.10 billboard ----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["forgetful", "episodic"])
def test_decide_reads_only_public_state(mode):
    X, noise = stream(2**11)
    pol = make(mode=mode, refresh_every=8)
    drive(pol, X, noise, 1500, [])
    if pol.refit_due():
        pol.refit()
    n = min(50, pol.max_decide_batch())  # episodic θ̂ refreshes may be due within a few slots
    assert n >= 4
    Xn = ENV.contexts(np.random.default_rng(7), n)
    ids = np.arange(10_000, 10_000 + n)
    a = copy.deepcopy(pol).decide(Xn, event_ids=ids)
    wiped = copy.deepcopy(pol)
    wiped._stores, wiped._hist, wiped._pending, wiped._tree, wiped._G_hist = (
        {},
        None,
        {},
        None,
        None,
    )
    wiped._noise = None  # the secret key too
    b = wiped.decide(Xn, event_ids=ids)
    assert np.array_equal(a.arms, b.arms) and np.array_equal(a.propensities, b.propensities)


def test_empty_support_plays_uniform_with_propensity_one_over_k():
    pol = make(l_min=13, horizon=2**14)  # 5000 slots of burn-in
    dec = pol.decide(ENV.contexts(np.random.default_rng(0), 5000))
    assert np.all(dec.propensities == 1.0 / ENV.K)
    counts = np.bincount(dec.arms, minlength=ENV.K)
    assert np.all(np.abs(counts - 500) <= Z_COUNT * math.sqrt(5000 * 0.1 * 0.9))


# -- §11.12 determinism and checkpoints
@pytest.mark.parametrize("mode", ["forgetful", "episodic"])
def test_checkpoint_restore_continue_equals_uninterrupted(mode):
    T = 2**11
    X, noise = stream(T, seed=4)
    full, recs_full = make(mode=mode, refresh_every=32), []
    drive(full, X, noise, T, recs_full)
    first, recs = make(mode=mode, refresh_every=32), []
    drive(first, X, noise, 700, recs)
    blob = dumps(first.state_dict())  # the snapshot codec: exact JSON
    restored = make(mode=mode, refresh_every=32).load_state_dict(loads(blob))
    drive(restored, X, noise, T, recs)
    assert [r.content_digest() for r in recs] == [r.content_digest() for r in recs_full]
    a, b = full.state_dict(), restored.state_dict()
    assert a["version"] == b["version"] and np.array_equal(a["theta"], b["theta"])
    assert dumps(a) == dumps(b)


def test_crash_retry_recomputes_the_release_bit_for_bit():
    X, noise = stream(2**9)
    pol = make()
    drive(pol, X, noise, 2**8, [])
    snapshot = copy.deepcopy(pol.state_dict())
    first = pol.refit()[0]
    retry = make().load_state_dict(snapshot).refit()[0]
    assert first.content_digest() == retry.content_digest()
    with pytest.raises(RuntimeError, match="already issued"):
        pol._noise.generator(pol.bandit_id, "private-lasso", "svt", 8)


def test_arrival_order_does_not_change_releases():
    X, noise = stream(2**9, seed=5)
    mu = ENV.mean_rewards(X)
    pols = [make(l_min=6, horizon=2**9), make(l_min=6, horizon=2**9)]
    dec = pols[0].decide(X[:64])
    pols[1].decide(X[:64])
    rows = np.arange(64)
    x, y = X[rows, dec.arms], mu[rows, dec.arms] + noise[rows, dec.arms]
    pols[0].learn(x, y, dec.rounds)
    perm = np.random.default_rng(0).permutation(64)
    for chunk in np.array_split(perm, 5):
        pols[1].learn(x[chunk], y[chunk], dec.rounds[chunk])
    assert pols[0].refit()[0].content_digest() == pols[1].refit()[0].content_digest()


# -- configuration ------------------------------------------------------------------------------
def test_config_gating_and_registry():
    assert REGISTRY["private-lasso"] is PrivateLASSO
    base = {"d": 60, "s0": 5, "horizon": 4096, **ENV.public_bounds()}
    cfg = policy_config("private-lasso", base)
    validate_for_mode(cfg, "service")
    assert isinstance(cfg.build(seed=1), PrivateLASSO)
    with pytest.raises(ConfigError, match="allow_invalid_privacy"):
        policy_config("private-lasso", {**base, "calibration": "paper"})
    paper = policy_config(
        "private-lasso", {**base, "calibration": "paper", "allow_invalid_privacy": True}
    )
    validate_for_mode(paper, "simulation")
    with pytest.raises(ConfigError, match="simulation"):
        validate_for_mode(paper, "service")
    oracle = policy_config("private-lasso", {**base, "support": "oracle", "oracle_support": [1, 2]})
    with pytest.raises(ConfigError, match="simulation"):
        validate_for_mode(oracle, "replay")
    for bad, msg in [
        ({"support_cap": 5}, "support_cap"),
        ({"horizon": 100}, "burn-in"),
        ({"rho_split": {"sel": 0.5, "ls": 0.6}}, "rho_split"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            policy_config("private-lasso", {**base, **bad})
    with pytest.raises(ConfigError, match="clip_l2"):
        policy_config("private-lasso", {"d": 60, "s0": 5, "horizon": 4096, "reward_bound": 1.0})


# -- §11.9 the literal variant -------------------------------------------------------------------
def test_paper_golden_table_and_uninformative_selection():
    """Spec §4.3 at T = 2^16, δ = 1e−5, d = 1000, s0 = 5, t = 2^15 (λ_t = 0.06621)."""
    lam = math.sqrt(2 * math.log(2**15) * math.log(1000) / 2**15)
    assert lam == pytest.approx(0.06621, abs=5e-6)
    rng = np.random.default_rng(11)
    for eps, xi, gamma, thr, p_pass in [
        (0.1, 4.992e6, 3.022e5, 3.478e5, 0.488),
        (1.0, 4.992e5, -0.3876, -0.4462, 0.500),
        (10.0, 4.992e4, -3022, -3479, 0.512),
    ]:
        k = paper_constants(2**16, 1e-5, 1000, 5, eps)
        assert k.epsilon1 == pytest.approx(2.086e-4 * eps * 10, rel=1e-3)
        assert (k.xi, k.gamma, k.threshold(lam)) == pytest.approx((xi, gamma, thr), rel=1e-3)
        assert k.k_w == pytest.approx(4.1e9 / eps**2, rel=0.01)
        assert k.sbar == pytest.approx(18.89, abs=5e-3) and k.cap == pytest.approx(9.346, abs=5e-4)
        theta = rng.uniform(-1, 1, size=1000)  # any coefficients of order 1
        assert float(pass_probability(k.threshold(lam) - 1.0, k.xi)) == pytest.approx(
            p_pass, abs=2e-3
        )
        queried = passed = 0
        for _ in range(1500):
            _, q, ok = paper_svt(theta, np.arange(1000), k.threshold(lam), k.xi, k.cap, rng)
            queried += q.size
            passed += int(ok.sum())
        frac = passed / queried
        assert 0.47 <= frac <= 0.53, (eps, frac)
        assert abs(frac - p_pass) <= Z_COUNT * math.sqrt(0.25 / queried) + 0.003


def test_the_paper_calibration_is_its_own_class_picked_where_the_policy_is_built():
    """No constructor returns another class: the registry's and the configuration's choice."""
    kw = dict(d=20, s0=2, horizon=64, clip_l2=4.5, reward_bound=2.0)
    paper = {**kw, "calibration": "paper", "allow_invalid_privacy": True}
    with pytest.raises(ValueError, match="class PrivateLASSOPaper"):
        PrivateLASSO(**paper)
    with pytest.raises(ValueError, match="is calibration='paper'"):
        PrivateLASSOPaper(**kw)
    assert policy_class("private-lasso", paper) is PrivateLASSOPaper
    assert policy_class("private-lasso", kw) is PrivateLASSO is REGISTRY["private-lasso"]
    cfg = policy_config("private-lasso", paper)
    assert type(cfg.build(seed=0)) is PrivateLASSOPaper
    certified = policy_config("private-lasso", {**kw, "horizon": 1024})
    assert type(certified.build(seed=0)) is PrivateLASSO


def test_paper_variant_is_gated_labelled_and_restorable():
    kw = dict(d=20, s0=2, horizon=64, clip_l2=4.5, reward_bound=2.0)
    with pytest.raises(ValueError, match="allow_invalid_privacy"):
        PrivateLASSOPaper(calibration="paper", **kw)
    with pytest.raises(ValueError, match="allow_large"):
        PrivateLASSOPaper(calibration="paper", allow_invalid_privacy=True, **{**kw, "d": 2000})
    pol = PrivateLASSOPaper(calibration="paper", allow_invalid_privacy=True, seed=1, **kw)
    assert type(pol.clone()) is PrivateLASSOPaper
    assert "WARNING" in pol.privacy.text() and pol.explain()["valid"] is False
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(64, 3, 20))
    recs, snap = [], None
    for t in range(64):
        if pol.refit_due():
            recs += pol.refit()
        if t == 30:
            snap = dumps(pol.state_dict())
        dec = pol.decide(X[t : t + 1], event_ids=[t + 1])
        pol.learn(X[t, dec.arms], X[t, dec.arms, 0], dec.rounds)
    assert recs and all(
        not r.dp_valid and r.note == PAPER_LABEL and r.calibration == "paper" for r in recs
    )
    again = PrivateLASSOPaper(calibration="paper", allow_invalid_privacy=True, seed=1, **kw)
    again.load_state_dict(loads(snap))
    for t in range(30, 64):
        if again.refit_due():
            again.refit()
        dec = again.decide(X[t : t + 1], event_ids=[t + 1])
        again.learn(X[t, dec.arms], X[t, dec.arms, 0], dec.rounds)
    assert np.array_equal(again.coefficients[1], pol.coefficients[1])


def test_snapshot_does_not_grow_with_tree_leaves():
    """Tree node streams are issued once by structure (the persisted leaf count), so the noise
    source's issued-label list holds only the per-episode labels, not one label per leaf."""
    X, noise = stream(2**10, seed=3)
    pol = make(mode="episodic", refresh_every=8)
    drive(pol, X, noise, 2**10, [])
    assert pol._tree is not None and pol._tree.count > 8  # the tree is in use
    issued = [tuple(x) for x in pol.state_dict()["noise"]["issued"]]
    assert not [x for x in issued if "tree" in x]
