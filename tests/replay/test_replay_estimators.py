"""Off-policy estimators: interval coverage on logs with a known value, DR vs IPS variance,
exact streaming moments and the bounded-memory bootstrap."""

import numpy as np
import pytest

from dpbandit_testing.replay_helpers import DiscreteProblem
from streaming_dpbandit.replay.bootstrap import BlockBootstrap
from streaming_dpbandit.replay.moments import RatioMoments
from streaming_dpbandit.replay.ope import DM, DR, ESTIMATORS, IPS, SNIPS, WeightDiagnostics

REPS = 1000  # coverage band 93–97%: ±2 points is ±2.9 binomial s.d. at 95% and 1,000 reps
#: Events per log. Non-uniform logging has heavier weights (here up to 20, E[w²] ≈ 5): at
#: n = 2,000 the normal intervals of IPS cover only ≈ 92–94% (measured), at n ≥ 5,000 ≈ 95%,
#: so that case is tested where the normal approximation is meant to hold.
N = {"uniform": 2000, "softmax": 10000}


def _qhat(problem, seed=3):
    """A good reward model: the true means with small errors."""
    return problem.mu + np.random.default_rng(seed).normal(0, 0.03, problem.mu.shape)


def _coverage(name, problem, n, seed, qhat, reps=REPS, shrink=1.0, bootstrap=0):
    """Share of ``reps`` logs whose interval covers the true value (logs drawn in groups)."""
    hits = 0
    group = 100
    for g in range(0, reps, group):
        logs = problem.logs(np.random.default_rng([seed, g]), min(group, reps - g), n)
        qa, qpi = problem.model_terms(logs, qhat)
        for i in range(logs["r"].shape[0]):
            est = ESTIMATORS[name](bootstrap=bootstrap, seed=g + i)
            est.update(logs["r"][i], logs["w"][i], None, qa[i], qpi[i])
            e = est.estimate()
            if bootstrap:
                lo, hi = e.ci_bootstrap
            else:
                half = (e.ci_normal[1] - e.ci_normal[0]) / 2 * shrink
                lo, hi = e.value - half, e.value + half
            hits += lo <= problem.value <= hi
    return hits / reps


@pytest.mark.parametrize("logging", ["uniform", "softmax"])
@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_normal_intervals_cover_the_true_value(name, logging):
    problem = DiscreteProblem(seed=7, logging=logging)
    cov = _coverage(name, problem, N[logging], seed=70, qhat=_qhat(problem))
    assert 0.93 <= cov <= 0.97, f"{name}, {logging} logging: 95% normal interval covered {cov:.3f}"


def test_coverage_check_catches_too_narrow_intervals():
    """The band is not vacuous: intervals 25% too narrow (≈ 86% intervals) fall out of it."""
    problem = DiscreteProblem(seed=7)
    cov = _coverage("ips", problem, N["uniform"], seed=70, qhat=_qhat(problem), shrink=0.75)
    assert cov < 0.93


@pytest.mark.parametrize("name", ["ips", "snips", "dr"])
def test_bootstrap_intervals_cover_the_true_value(name):
    problem = DiscreteProblem(seed=11)
    cov = _coverage(name, problem, 1000, seed=110, qhat=_qhat(problem, 4), reps=600, bootstrap=400)
    # 600 repetitions: the band is ±2.2 binomial s.d.
    assert 0.93 <= cov <= 0.97, f"{name}: 95% bootstrap interval covered {cov:.3f}"


@pytest.fixture(scope="module")
def uniform_logs():
    problem = DiscreteProblem(seed=7)
    return problem, problem.logs(np.random.default_rng([7, 1]), REPS, N["uniform"])


def _spread(name, problem, logs, qhat):
    qa, qpi = problem.model_terms(logs, qhat)
    vals, ses = [], []
    for i in range(REPS):
        est = ESTIMATORS[name](bootstrap=0)
        est.update(logs["r"][i], logs["w"][i], None, qa[i], qpi[i])
        e = est.estimate()
        vals.append(e.value)
        ses.append(e.se)
    return np.var(vals, ddof=1), np.mean(ses), np.mean(vals)


def test_dr_has_lower_variance_than_ips_with_a_good_reward_model(uniform_logs):
    problem, logs = uniform_logs
    qhat = _qhat(problem)
    v_ips, se_ips, m_ips = _spread("ips", problem, logs, qhat)
    v_dr, se_dr, m_dr = _spread("dr", problem, logs, qhat)
    # F-test scale: the log variance ratio of two samples of 1,000 has s.d. ≈ 0.063, so a
    # ratio below exp(-3·0.063) ≈ 0.83 is a significant reduction
    assert v_dr / v_ips < 0.83
    assert se_dr < se_ips
    # both unbiased: means within 4 standard errors of the truth
    for m, v in ((m_ips, v_ips), (m_dr, v_dr)):
        assert abs(m - problem.value) < 4 * np.sqrt(v / REPS)


def test_dr_with_a_bad_reward_model_is_not_better(uniform_logs):
    """The comparison can fail: with a reward model off by 1.5, DR is far more variable than
    IPS (and still unbiased: the weights correct the model)."""
    problem, logs = uniform_logs
    v_ips, _, _ = _spread("ips", problem, logs, _qhat(problem))
    v_bad, _, m_bad = _spread("dr", problem, logs, problem.mu + 1.5)
    assert v_bad / v_ips > 1.2
    assert abs(m_bad - problem.value) < 4 * np.sqrt(v_bad / REPS)


def test_dm_with_the_true_model_is_exact_in_expectation():
    problem = DiscreteProblem(seed=5)
    logs = problem.logs(np.random.default_rng(1), 1, 50_000)
    qa, qpi = problem.model_terms(logs, problem.mu)
    est = DM(bootstrap=0)
    est.update(logs["r"][0], logs["w"][0], None, qa[0], qpi[0])
    e = est.estimate()
    assert abs(e.value - problem.value) < 4 * e.se
    assert e.label and "bias" in e.label


# -- streaming exactness ------------------------------------------------------------------------
@pytest.mark.parametrize("chunks", [1, 2, 7, 100])
def test_ratio_moments_are_exact_under_any_chunking(chunks):
    rng = np.random.default_rng(0)
    a = rng.exponential(size=1000) * 1e3 + 1e6  # large mean: naive sums would cancel badly
    b = rng.uniform(0.5, 2.0, size=1000)
    pos = rng.integers(0, 3, 1000)
    m = RatioMoments()
    for part in np.array_split(np.arange(1000), chunks):
        m.update(a[part], b[part], pos[part])
    n, ma, _mb, caa, _cbb, cab = m.total()
    assert n == 1000
    assert ma == pytest.approx(a.mean(), rel=1e-12)
    assert caa == pytest.approx(((a - a.mean()) ** 2).sum(), rel=1e-9)
    assert cab == pytest.approx(((a - a.mean()) * (b - b.mean())).sum(), rel=1e-9)
    for p, est in enumerate(m.per_position()):
        sel = pos == p
        assert est["value"] == pytest.approx(a[sel].mean() / b[sel].mean(), rel=1e-12)


def test_snips_standard_error_is_the_delta_method():
    rng = np.random.default_rng(2)
    w = rng.exponential(size=500)
    r = rng.random(500)
    est = SNIPS(bootstrap=0)
    est.update(r, w)
    e = est.estimate()
    v = (w * r).sum() / w.sum()
    resid = w * (r - v)
    se = np.sqrt((resid**2).sum() / (500 - 1) / 500) / w.mean()
    assert e.value == pytest.approx(v)
    assert e.se == pytest.approx(se, rel=1e-9)


def test_per_position_estimates_are_the_positions_alone():
    rng = np.random.default_rng(3)
    n = 3000
    pos = rng.integers(0, 3, n)
    r = rng.random(n)
    w = rng.exponential(size=n)
    whole = IPS(bootstrap=0)
    whole.update(r, w, pos)
    per = whole.estimate().per_position
    for p in range(3):
        alone = IPS(bootstrap=0)
        alone.update(r[pos == p], w[pos == p])
        assert per[p]["value"] == pytest.approx(alone.estimate().value)
        assert per[p]["se"] == pytest.approx(alone.estimate().se)
    assert whole.estimate().value == pytest.approx((w * r).mean())


def test_block_bootstrap_is_the_event_bootstrap_while_blocks_are_events():
    rng = np.random.default_rng(4)
    x = rng.normal(size=300)
    boot = BlockBootstrap(capacity=1024)
    boot.add(x, np.ones_like(x))
    assert boot.block_size == 1 and boot.blocks == 300
    reps = boot.replicates(4000, np.random.default_rng(0))
    assert reps.std() == pytest.approx(x.std() / np.sqrt(300), rel=0.05)


def test_block_bootstrap_memory_is_bounded_and_merges_exactly():
    rng = np.random.default_rng(5)
    boot = BlockBootstrap(capacity=64)
    total_a = 0.0
    for _ in range(50):
        x = rng.normal(size=997)
        boot.add(x, np.ones_like(x))
        total_a += x.sum()
    assert boot.blocks <= 64 and boot.events == 50 * 997
    assert boot._n[: boot.blocks].sum() == 50 * 997
    assert boot._a[: boot.blocks].sum() == pytest.approx(total_a)
    # the standard error stays right after many merges
    reps = boot.replicates(3000, np.random.default_rng(1))
    assert reps.std() == pytest.approx(1 / np.sqrt(50 * 997), rel=0.1)


def test_weight_diagnostics_flag_wrong_propensities():
    problem = DiscreteProblem(seed=9)
    logs = problem.logs(np.random.default_rng(0), 1, 20_000)
    ok = WeightDiagnostics()
    ok.update(logs["w"][0])
    assert ok.summary()["warning"] is None
    bad = WeightDiagnostics()
    bad.update(logs["w"][0] * 0.8)  # propensities logged 25% too high
    assert "wrong propensities" in bad.summary()["warning"]
    s = ok.summary()
    w = logs["w"][0]
    assert s["ess"] == pytest.approx(w.sum() ** 2 / (w**2).sum())


def test_few_nonzero_terms_are_flagged():
    est = IPS(bootstrap=0)
    est.update(np.zeros(200), np.ones(200))
    e = est.estimate()
    assert e.ci_normal == (0.0, 0.0)
    assert "unreliable" in e.diagnostics["warning"]


def test_estimators_need_their_inputs():
    with pytest.raises(ValueError, match="reward model"):
        DR().update(np.ones(3), np.ones(3))


def test_running_curve_points_are_the_estimates_of_the_prefixes():
    rng = np.random.default_rng(6)
    r = rng.random(1000)
    w = rng.exponential(size=1000)
    est = SNIPS(bootstrap=0)
    for part in np.array_split(np.arange(1000), 3):
        est.update(r[part], w[part], events=int(part[-1]) + 1)
    curve = est.estimate().curve
    assert curve["events"][-1] == 1000 and len(curve["events"]) > 3 * 4
    for x, v, lo, hi in zip(curve["events"], curve["value"], curve["lo"], curve["hi"]):
        alone = SNIPS(bootstrap=0)
        alone.update(r[:x], w[:x])
        e = alone.estimate()
        assert v == pytest.approx(e.value, rel=1e-9)
        assert (lo, hi) == pytest.approx(e.ci_normal, rel=1e-7)
