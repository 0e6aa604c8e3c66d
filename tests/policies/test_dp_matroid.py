"""DPUCB-MAT / DPTS-MAT (DP-matroid spec §5, §6, §12): the doubling-batch estimator, the indices,
the calibrations, the ledger records and the synchronous-mode behaviour."""

import math

import numpy as np
import pytest
from scipy import stats

from streaming_dpbandit.envs import MatroidSyntheticEnv
from streaming_dpbandit.estimators.batch_means import UNIT, DoublingBatchMeans
from streaming_dpbandit.policies import DPTSMAT, DPUCBMAT, OMM, CTSGaussian
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.utils.serialization import dumps, loads


class StubNoise:
    """A noise source whose every Laplace draw is a known Z (records the labels asked for)."""

    def __init__(self, z):
        self.z, self.labels = z, []

    def generator(self, *labels, track=True):
        self.labels.append(labels)
        z = self.z

        class G:
            def laplace(self, loc, scale):  # the value to protect comes as loc
                return loc + z

        return G()


def play(pol, env, n, rng):
    """Synchronous protocol: each decision's rewards are learned before the next decision."""
    slates = []
    for _ in range(n):
        if pol.refit_due():
            pol.refit()
        dec = pol.decide_slates(1)
        w = env.draw(rng, 1)
        pol.learn(dec.slates, np.take_along_axis(w, dec.slates, 1), dec.rounds)
        slates.append(dec.slates[0].tolist())
    return slates


# -- the estimator ------------------------------------------------------------------------------
def test_batches_release_at_counts_1_3_7_15_with_sizes_1_2_4_8():
    est = DoublingBatchMeans(n_items=3, epsilon0=1.0)
    noise = StubNoise(0.25)
    rng = np.random.default_rng(0)
    seen, released = [], []
    for t in range(1, 16):
        r = float(rng.random())
        seen.append(r)
        est.learn_many(np.array([1]), np.array([r]), np.array([t]))
        for rel in est.release(noise, "b", "dp-matroid"):
            released.append((t, rel))
    assert [t for t, _ in released] == [1, 3, 7, 15]
    assert [r.size for _, r in released] == [1, 2, 4, 8]
    assert [r.batch for _, r in released] == [0, 1, 2, 3]
    starts = [0, 1, 3, 7]
    for (_, rel), a in zip(released, starts):  # mean = (sum + Z)/T, sum of that batch only
        total = sum(round(x * UNIT) for x in seen[a : a + rel.size]) / UNIT
        assert rel.noisy_mean == (total + 0.25) / rel.size
    assert noise.labels == [("b", "dp-matroid", 1, s) for s in range(4)]
    assert est.T.tolist() == [0, 8, 0] and est.cnt.tolist() == [0, 0, 0]
    assert est.buf.tolist() == [0, 0, 0]  # the raw rewards are forgotten


def test_every_reward_enters_exactly_one_release():
    est = DoublingBatchMeans(n_items=5, epsilon0=0.5)
    rng = np.random.default_rng(1)
    released = 0
    for t in range(1, 400):
        items = rng.choice(5, size=2, replace=False)
        est.learn_many(items, rng.random(2), np.full(2, t))
        released += sum(r.size for r in est.release(NoiseSource(3), "x"))
    assert released + int(est.cnt.sum()) == est.observations == 2 * 399
    assert all(s == -1 or int(est.T[e]) == 1 << int(s) for e, s in enumerate(est.s.tolist()))


def test_batch_sums_are_exact_whatever_the_order_and_batching():
    rng = np.random.default_rng(2)
    items = rng.integers(0, 4, 300)
    rewards = rng.random(300)
    rounds = np.arange(1, 301)
    a = DoublingBatchMeans(4, 1.0)
    a.learn_many(items, rewards, rounds)
    b = DoublingBatchMeans(4, 1.0)
    for lo in range(0, 300, 7):
        b.learn_many(items[lo : lo + 7], rewards[lo : lo + 7], rounds[lo : lo + 7])
    ra, rb = a.release(NoiseSource(9), "b"), b.release(NoiseSource(9), "b")
    assert ra == rb and dumps(a.state_dict()) == dumps(b.state_dict())


@pytest.mark.parametrize("bad", [1.5, -0.1, np.nan])
def test_estimator_refuses_unclipped_rewards(bad):
    with pytest.raises(ValueError, match="clipped"):
        DoublingBatchMeans(2, 1.0).learn_many(np.array([0]), np.array([bad]), np.array([1]))


# -- calibration --------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [DPUCBMAT, DPTSMAT])
def test_epsilon0_and_ledger_under_both_calibrations(cls):
    env = MatroidSyntheticEnv()
    for calibration, eps0, certified in (("certified", 2 / 6, 2.0), ("paper", 2 / 3, 4.0)):
        pol = cls(env.matroid, epsilon=2.0, calibration=calibration, seed=1, bandit_id="b")
        assert pol.epsilon0 == pytest.approx(eps0) and pol.epsilon_certified == certified
        records = []
        for _ in range(50):
            if pol.refit_due():
                records += pol.refit()
            dec = pol.decide_slates(1)
            pol.learn(dec.slates, np.ones((1, 3)), dec.rounds)
        reg = [r for r in records if r.release_id.endswith("/guarantee")]
        assert len(reg) == 1 and reg[0].epsilon == certified and reg[0].calibration == calibration
        assert reg[0].params["epsilon0"] == pytest.approx(eps0)
        assert (reg[0].note is not None) == (calibration == "paper")
        spend = Accountant(records).spend("b")
        assert spend.pure_epsilon == pytest.approx(certified) and spend.basic_epsilon == certified
        batches = [r for r in records if "/batches/" in r.release_id]
        n_released = sum(len(r.release["items"]) for r in batches)
        T, _ = pol.noisy_means
        assert n_released == sum(int(math.log2(x)) + 1 for x in T.tolist() if x > 0)
        assert pol.privacy.epsilon == certified


# -- indices ------------------------------------------------------------------------------------
def stub_state(pol, T, mean):
    pol._state()
    pol._est.T[:] = T
    pol._est.mean[:] = mean
    pol._est.s[:] = np.where(np.asarray(T) > 0, np.log2(np.maximum(T, 1)), -1)
    pol._refresh()


def test_dpucb_index_values():
    pol = DPUCBMAT(
        {"type": "uniform", "n_items": 4, "k": 2}, epsilon=1.0, seed=0, exploration="thesis"
    )
    stub_state(pol, [0, 1, 4, 64], [0.0, 0.9, -0.2, 0.55])
    t = np.array([1, 7, 10_000])
    keys = pol._keys(t)
    eps0 = 1.0 / 4
    for row, tt in zip(keys, t.tolist()):
        c = 3 * math.log(2 * tt)
        assert row[0] == math.inf
        for e, (T, m) in enumerate(zip([1, 4, 64], [0.9, -0.2, 0.55]), start=1):
            assert row[e] == pytest.approx(m + math.sqrt(c / T) + c / (eps0 * T), rel=1e-14)


def test_k1_t1_bonus_is_zero():
    pol = DPUCBMAT(
        {"type": "uniform", "n_items": 3, "k": 1}, epsilon=1.0, seed=0, exploration="thesis"
    )
    stub_state(pol, [2, 2, 8], [0.3, 0.7, 0.1])
    assert pol._keys(np.array([1]))[0].tolist() == [0.3, 0.7, 0.1]


def test_thompson_samples_have_the_specified_mean_and_variance():
    pol = DPTSMAT(
        {"type": "uniform", "n_items": 3, "k": 1}, epsilon=2.0, seed=4, exploration="thesis"
    )
    stub_state(pol, [16, 256, 0], [0.3, -0.1, 0.0])
    n = 20_000
    rounds = np.arange(1, n + 1)
    keys = pol._keys(rounds)
    assert np.isinf(keys[:, 2]).all()
    eps0 = 2.0 / 2
    for e, (T, m) in enumerate([(16, 0.3), (256, -0.1)]):
        z = (keys[:, e] - m - 3 * np.log(rounds) / (eps0 * T)) * math.sqrt(T)
        assert abs(z.mean()) < 4 / math.sqrt(n)  # mean w̃ + bonus: 4 s.e.
        assert abs(z.var() - 1) < 4 * math.sqrt(2 / n)  # variance 1/T: 4 s.e. of the variance
        assert stats.kstest(z, "norm").pvalue > 1e-3


def stub_pool(pol, batches):
    """Release the given (item, size, noisy mean) batches into the policy's estimator pool."""
    pol._state()
    est = pol._est
    for e, size, m in batches:
        w = 1.0 / est.batch_variance(size)
        est.pool_num[e] += m * w
        est.pool_den[e] += w
        est.T[e], est.mean[e] = size, m
    pol._refresh()


def test_the_pool_is_the_precision_weighted_mean_of_every_released_batch():
    est = DoublingBatchMeans(n_items=2, epsilon0=0.5)  # Laplace scale b = 2
    noise = StubNoise(0.0)
    rewards = np.r_[1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]  # batches {1}, {0, 1}, {1, 0, 0, 1}
    for t, r in enumerate(rewards, start=1):
        est.learn_many(np.array([0]), np.array([r]), np.array([t]))
        est.release(noise, "b")
    v = [0.25 / n + 2 * 4 / n**2 for n in (1, 2, 4)]
    means = [1.0, 0.5, 0.5]
    w = [1 / x for x in v]
    assert est.pooled_mean[0] == pytest.approx(sum(m * x for m, x in zip(means, w)) / sum(w))
    assert est.pooled_var[0] == pytest.approx(1 / sum(w))
    assert est.mean[0] == 0.5 and est.T[0] == 4  # the thesis's last-batch statistics are kept
    assert est.pooled_mean[1] == 0.0 and est.pooled_var[1] == math.inf  # never released
    # snapshots keep the pool; a snapshot without one starts it from the last batch
    back = DoublingBatchMeans(2, 0.5).load_state_dict(loads(dumps(est.state_dict())))
    assert back.pooled_mean.tolist() == est.pooled_mean.tolist()
    old = {k: v for k, v in est.state_dict().items() if not k.startswith("pool")}
    legacy = DoublingBatchMeans(2, 0.5).load_state_dict(old)
    assert legacy.pooled_mean[0] == 0.5 and legacy.pooled_var[0] == pytest.approx(v[2])


def test_posterior_indices_use_the_clipped_pool_and_its_variance():
    m = {"type": "uniform", "n_items": 4, "k": 1}
    ucb = DPUCBMAT(m, epsilon=1.0, seed=0)
    ts = DPTSMAT(m, epsilon=1.0, seed=4)
    assert ucb.exploration == ts.exploration == "posterior"  # the default
    batches = [(1, 1, 1.7), (1, 2, 0.5), (2, 4, -0.3), (3, 64, 0.55)]
    for pol in (ucb, ts):
        stub_pool(pol, batches)
    est = ucb._est
    mean = np.clip(est.pooled_mean, 0, 1)
    sd = np.sqrt(est.pooled_var)
    assert mean[2] == 0.0 and 0.0 < mean[1] < 1.0  # a negative pool is clipped to 0
    rounds = np.array([1, 7, 10_000])
    keys = ucb._keys(rounds)
    assert np.isinf(keys[:, 0]).all()  # never released: first
    for row, t in zip(keys, rounds.tolist()):
        assert row[1:] == pytest.approx(mean[1:] + math.sqrt(2 * math.log(t)) * sd[1:], rel=1e-12)
    n = 20_000
    keys = ts._keys(np.arange(1, n + 1))
    assert np.isinf(keys[:, 0]).all()
    for e in (1, 2, 3):
        z = (keys[:, e] - mean[e]) / sd[e]
        assert abs(z.mean()) < 4 / math.sqrt(n) and abs(z.var() - 1) < 4 * math.sqrt(2 / n)


def test_posterior_and_thesis_release_the_same_batches():
    """The exploration rule is post-processing: on the same rewards, fed in the same order,
    both rules release the same batches (noise streams are keyed by item and batch)."""
    env = MatroidSyntheticEnv()
    a = DPTSMAT(env.matroid, epsilon=1.0, seed=9)
    b = DPTSMAT(env.matroid, epsilon=1.0, seed=9, exploration="thesis")
    rng = np.random.default_rng(0)
    for t in range(1, 300):
        items = np.array([0, 1, 2])
        r = env.draw(rng, 1)[0, items]
        for pol in (a, b):
            pol._state()._est.learn_many(items, r, np.full(3, t))
    ra = a._est.release(a._noise, "x")
    rb = b._est.release(b._noise, "x")
    assert ra == rb and ra


def test_decisions_do_not_depend_on_batching():
    for cls in (DPUCBMAT, DPTSMAT):
        a = cls(
            {"type": "partition", "categories": [0, 0, 1, 1, 1, 2], "capacities": [1, 2, 1]},
            epsilon=1.0,
            update_every=64,
            seed=5,
        )
        b = cls(a.matroid, epsilon=1.0, update_every=64, seed=5)
        stub_state(a, [1, 2, 4, 0, 1, 8], [0.5, 0.5, 0.1, 0.0, 0.9, 0.3])
        stub_state(b, [1, 2, 4, 0, 1, 8], [0.5, 0.5, 0.1, 0.0, 0.9, 0.3])
        ids = [f"ev-{i}" for i in range(64)]
        whole = a.decide_slates(event_ids=ids)
        parts = [b.decide_slates(event_ids=ids[i : i + 5]) for i in range(0, 64, 5)]
        assert np.array_equal(whole.slates, np.vstack([p.slates for p in parts]))
        assert np.array_equal(whole.keys, np.vstack([p.keys for p in parts]))


# -- synchronous behaviour ----------------------------------------------------------------------
@pytest.mark.parametrize("cls", [DPUCBMAT, DPTSMAT, OMM])
def test_never_played_items_first_loops_never_served_no_lock_in(cls):
    env = MatroidSyntheticEnv()
    kwargs = {"epsilon": 2.0} if cls.private else {}
    for seed in range(5):
        pol = cls(env.matroid, seed=seed, **kwargs)
        slates = play(pol, env, 200, np.random.default_rng(seed))
        served = [set(s) for s in slates]
        assert all(6 not in s for s in served)  # e7 is a loop
        first_l = set().union(*served[:7])
        assert first_l == {0, 1, 2, 3, 4, 5}  # every non-loop item within the first L decisions
        assert len({tuple(sorted(s)) for s in served[:7]}) > 1  # not stuck on its first slate
        assert len({tuple(sorted(s)) for s in served}) > 1


def test_state_round_trips_exactly():
    env = MatroidSyntheticEnv()
    for cls, kw in (
        (DPUCBMAT, {"epsilon": 1.0}),
        (DPTSMAT, {"epsilon": 1.0}),
        (OMM, {}),
        (CTSGaussian, {}),
    ):
        a = cls(env.matroid, seed=2, **kw)
        play(a, env, 100, np.random.default_rng(0))
        b = cls(env.matroid, seed=2, **kw).load_state_dict(loads(dumps(a.state_dict())))
        assert dumps(b.state_dict()) == dumps(a.state_dict())
        sa = play(a, env, 50, np.random.default_rng(1))
        sb = play(b, env, 50, np.random.default_rng(1))
        assert sa == sb


def test_learn_takes_each_round_once_in_order():
    pol = DPUCBMAT({"type": "uniform", "n_items": 4, "k": 2}, epsilon=1.0, update_every=8, seed=0)
    dec = pol.decide_slates(3)
    pol.learn(dec.slates[:2], np.zeros((2, 2)), dec.rounds[:2])
    with pytest.raises(ValueError, match="once each"):
        pol.learn(dec.slates[1:2], np.zeros((1, 2)), dec.rounds[1:2])
    with pytest.raises(ValueError, match="never decided"):
        pol.learn(dec.slates[:1], np.zeros((1, 2)), np.array([9]))


def test_reward_intake_maps_clips_and_fills():
    pol = DPUCBMAT(
        {"type": "uniform", "n_items": 3, "k": 3},
        epsilon=1.0,
        seed=0,
        reward_range=(0, 10),
        default_reward=0.5,
        update_every=4,
    )
    dec = pol.decide_slates(1)
    pol.learn(dec.slates, np.array([[5.0, 20.0, np.nan]]), dec.rounds)
    c = pol.counters
    assert c["clipped_rewards"] == 1 and c["default_filled"] == 1
    assert sorted(pol._est.buf.tolist()) == [0, 0, 0] and pol._est.pending == 3  # all closed
    totals = sorted(x[3] / UNIT for x in pol._est._sealed)
    assert totals == [0.5, 0.5, 1.0]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": 1.0, "calibration": "thesis"}, "calibration"),
        ({"epsilon": 1.0, "default_reward": 2.0}, "default_reward"),
        ({"epsilon": 1.0, "reward_range": (1, 1)}, "reward_range"),
        ({"epsilon": 1.0, "update_every": 0}, "update_every"),
        ({"epsilon": 1.0, "item_ids": ["a", "a", "b"]}, "item_ids"),
    ],
)
def test_invalid_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DPUCBMAT({"type": "uniform", "n_items": 3, "k": 2}, **kwargs).decide_slates(1)
