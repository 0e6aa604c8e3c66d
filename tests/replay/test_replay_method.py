"""The replay method: fixed policies recover their value, learning policies replay like online
simulation, uniform logging is enforced, private releases are accounted."""

import numpy as np
import pytest
from scipy import stats

from streaming_dpbandit.policies import FLIPHAT, DPLinUCB, LinUCB, RandomPolicy, TablePolicy
from streaming_dpbandit.replay.batch import LoggedBatch
from streaming_dpbandit.replay.contexts import DenseContexts
from streaming_dpbandit.replay.errors import LogFormatError
from streaming_dpbandit.replay.replay_method import ReplayMethod

K, D = 4, 3
THETA = np.array([1.0, -0.5, 0.3])


def uniform_log(seed, n, sigma=1.0, binary=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, K, D))
    a = rng.integers(0, K, n)
    mu = X[np.arange(n), a] @ THETA
    if binary:
        y = (rng.random(n) < 1 / (1 + np.exp(-mu))).astype(float)
    else:
        y = mu + sigma * rng.normal(size=n)
    return LoggedBatch(
        np.arange(n), a, y, np.full(n, 1 / K), np.zeros(n, np.int64), DenseContexts(X)
    )


def fixed_greedy(theta, seed=0):
    """LinUCB frozen at θ̂ = theta, width 0, never refreshed: a fixed deterministic policy."""
    pol = LinUCB(d=D, beta=0.0, batch_size=10**9, seed=seed)
    state = pol.state_dict()
    state.pop("model")  # (the frozen model is then rebuilt from model_G and model_u)
    state["model_G"] = np.eye(D)
    state["model_u"] = np.asarray(theta, dtype=float)
    return pol.load_state_dict(state)


def true_value_greedy(theta, binary=False):
    rng = np.random.default_rng(999)
    X = rng.normal(size=(400_000, K, D))
    arms = (X @ theta).argmax(axis=1)
    mu = X[np.arange(X.shape[0]), arms] @ THETA
    return float((1 / (1 + np.exp(-mu))).mean() if binary else mu.mean())


@pytest.mark.parametrize("binary", [False, True], ids=["gaussian", "bernoulli"])
def test_fixed_policy_replay_interval_covers_its_true_value(binary):
    theta = np.array([0.5, 0.2, 1.0])  # a mediocre fixed policy, value ≠ 0
    truth = true_value_greedy(theta, binary)
    reps, hits = 500, 0
    for rep in range(reps):
        rm = ReplayMethod(fixed_greedy(theta, rep), bootstrap=0)
        rm.process(uniform_log([1, rep], 2000, binary=binary))
        lo, hi = rm.estimate().ci_normal
        hits += lo <= truth <= hi
    assert 0.93 <= hits / reps <= 0.97, f"coverage {hits / reps:.3f}"


def test_table_policy_replay_covers_its_value_per_position():
    """A fixed stochastic slate policy: position-specific distributions and click rates."""
    rng = np.random.default_rng(0)
    P, Kt = 3, 5
    tab = rng.dirichlet(np.ones(Kt), size=P)
    ctr = rng.uniform(0.05, 0.4, (P, Kt))
    truth = (tab * ctr).sum(axis=1)  # per position
    reps, n = 500, 3000
    hits = np.zeros(P)
    overall = 0
    for rep in range(reps):
        r2 = np.random.default_rng([2, rep])
        pos = r2.integers(0, P, n)
        a = r2.integers(0, Kt, n)
        y = (r2.random(n) < ctr[pos, a]).astype(float)
        log = LoggedBatch(
            np.arange(n), a, y, np.full(n, 1 / Kt), pos, DenseContexts(np.zeros((n, Kt, 1)))
        )
        rm = ReplayMethod(TablePolicy(tab, seed=rep), bootstrap=0)
        rm.process(log)
        est = rm.estimate()
        for p in range(P):
            lo, hi = est.per_position[p]["ci"]
            hits[p] += lo <= truth[p] <= hi
        # overall: positions are uniform in this log, so the value is their mean
        overall += est.ci_normal[0] <= truth.mean() <= est.ci_normal[1]
    cov = hits / reps
    assert ((cov >= 0.93) & (cov <= 0.97)).all(), cov
    assert 0.93 <= overall / reps <= 0.97


# -- a learning policy: replay ≡ online ------------------------------------------------------
T = 100
REPS = 300
CHECKPOINTS = (10, 25, 50, 100)


def online_rewards(seed):
    rng = np.random.default_rng([seed, 1])
    pol = LinUCB(d=D, batch_size=5, seed=seed)
    out = np.zeros(T)
    t = 0
    while t < T:
        if pol.refit_due():
            pol.refit()
        m = min(pol.max_decide_batch(), T - t)
        X = rng.normal(size=(m, K, D))
        dec = pol.decide(X)
        x = X[np.arange(m), dec.arms]
        y = x @ THETA + rng.normal(size=m)
        pol.learn(x, y, dec.rounds)
        out[t : t + m] = y
        t += m
    return out


def replayed_rewards(seed):
    log = uniform_log([seed, 2], 2 * K * T)
    rm = ReplayMethod(LinUCB(d=D, batch_size=5, seed=seed), bootstrap=0, record_matches=True)
    rm.process(log)
    idx = np.concatenate(rm.matches)[:T]
    assert idx.size == T
    return log.rewards[idx]


def broken_replay_rewards(seed):
    """A wrong replay that learns from every logged event, matched or not."""
    log = uniform_log([seed, 2], 2 * K * T)
    pol = LinUCB(d=D, batch_size=5, seed=seed)
    X = log.contexts.dense()
    out: list = []
    pos = 0
    while len(out) < T:
        if pol.refit_due():
            pol.refit()
        m = pol.max_decide_batch()
        sl = slice(pos, pos + m)
        dec = pol.decide(X[sl], log.event_ids[sl])
        out += log.rewards[sl][dec.arms == log.actions[sl]].tolist()
        pol.learn(X[sl][np.arange(m), log.actions[sl]], log.rewards[sl], dec.rounds)
        pos += m
    return np.array(out[:T])


def _z_scores(A, B):
    zs = []
    for t in CHECKPOINTS:
        a, b = A[:, :t].sum(axis=1), B[:, :t].sum(axis=1)
        zs.append((b.mean() - a.mean()) / np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)))
    return np.array(zs)


@pytest.fixture(scope="module")
def online():
    return np.array([online_rewards(s) for s in range(REPS)])


def test_learning_policy_replay_matches_online_simulation(online):
    replayed = np.array([replayed_rewards(s + 10_000) for s in range(REPS)])
    z = _z_scores(online, replayed)
    # four checkpoints, Bonferroni at α = 0.01 overall: |z| < 3.02
    assert np.abs(z).max() < 3.02, z
    assert stats.ks_2samp(online.sum(axis=1), replayed.sum(axis=1)).pvalue > 0.01
    # the learning is real: late rounds earn more than early ones
    assert replayed[:, -25:].mean() > replayed[:, :5].mean() + 0.3


def test_the_distribution_check_detects_a_broken_replay(online):
    broken = np.array([broken_replay_rewards(s + 10_000) for s in range(REPS)])
    assert np.abs(_z_scores(online, broken)).max() > 4


# -- rules -------------------------------------------------------------------------------------
def test_replay_refuses_non_uniform_logs():
    log = uniform_log(0, 100)
    log.propensities = np.full(100, 0.4)
    with pytest.raises(LogFormatError, match="uniformly logged"):
        ReplayMethod(RandomPolicy(d=D, seed=0)).process(log)


def test_replay_leaves_unmatched_events_unseen():
    log = uniform_log(3, 4000)
    rm = ReplayMethod(LinUCB(d=D, batch_size=1, seed=0), bootstrap=0)
    rm.process(log)
    assert rm.policy.t == rm.matched
    assert rm.policy.counters["rows_learned"] == rm.matched
    assert abs(rm.matched - 4000 / K) < 4 * np.sqrt(4000 * (1 / K) * (1 - 1 / K))


@pytest.mark.parametrize("chunks", [3, 17, 50])
def test_replay_is_independent_of_chunking(chunks):
    """The same events are matched whatever the chunking (sums differ only by rounding)."""
    log = uniform_log(4, 3000)
    out = []
    for c in (1, chunks):
        rm = ReplayMethod(LinUCB(d=D, batch_size=3, seed=0), bootstrap=0, record_matches=True)
        for part in np.array_split(np.arange(3000), c):
            rm.process(log.take(part))
        out.append((np.concatenate(rm.matches), rm.estimate().value, rm.policy.coefficients))
    assert np.array_equal(out[0][0], out[1][0])
    assert out[0][1] == pytest.approx(out[1][1], rel=1e-12)
    assert np.allclose(out[0][2], out[1][2], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        lambda: FLIPHAT(d=D, s=2, epsilon=0.5, delta=1e-6, seed=0),
        # the fast backend: the PLD composition below is the continuous Gaussian's (a secure
        # tree is Rényi-only: no PLD, its zCDP by CKS; tests/privacy/test_secure_gram_tree.py)
        lambda: DPLinUCB(
            d=D, epsilon=0.5, delta=1e-6, n_cap=4096, batch_size=8, seed=0, noise_backend="fast"
        ),
    ],
    ids=["fliphat", "dp-linucb"],
)
def test_private_policy_releases_are_composed(make):
    log = uniform_log(5, 6000)
    rm = ReplayMethod(make(), bootstrap=0)
    rm.process(log)
    spend = rm.ledger.spend(delta=1e-6)
    assert rm.refits >= 2 and spend["releases"] == rm.ledger.releases >= 2
    assert spend["basic_epsilon"] == pytest.approx(0.5)  # parallel episodes / one tree epoch
    assert spend["epsilon_at_delta"] <= 0.5 * (1 + 1e-3)  # PLD discretisation is pessimistic
    assert spend["dp_valid"] and spend["calibrations"] == ["certified"]
