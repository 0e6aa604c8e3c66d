"""The secure noise backend (issue 22 §1): grid-valued exact discrete noise, keyed and audited."""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streaming_dpbandit.experiments import audits
from streaming_dpbandit.privacy.laplace import LaplaceMechanism
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.peeling import Peeling
from streaming_dpbandit.privacy.secure_noise import (
    _Bits,
    discrete_gaussian,
    discrete_laplace,
    grid_of,
)
from streaming_dpbandit.privacy.svt import SparseVector


def _on_grid(x, gamma) -> bool:
    q = np.asarray(x) / gamma
    return bool(np.all(q == np.rint(q)))


@pytest.mark.parametrize("scale", [1e-3, 0.7, 1.0, 3.3, 250.0])
def test_releases_lie_on_the_declared_grid(scale):
    g = NoiseSource(5, backend="secure").generator("t", 1)
    x = np.array([0.1234567891234, -7.0, 1e6 + 0.3, 0.0])
    gamma = grid_of(scale)
    assert gamma <= scale * 2.0**-30 and gamma > scale * 2.0**-31
    assert math.log2(gamma) == int(math.log2(gamma))  # a power of two
    for out in (g.laplace(x, scale), g.normal(x, scale)):
        assert _on_grid(out, gamma)
        # the release is the value rounded to the grid plus integer multiples of γ: the low
        # bits of x below γ do not reach the output
        x2 = x + 0.25 * gamma
        assert _on_grid(out - np.rint(x2 / gamma) * gamma, gamma)


def test_streams_are_reproducible_from_the_key_and_independent_across_labels():
    a = NoiseSource(7, backend="secure").generator("fit", 3).laplace(np.zeros(5), 1.0)
    b = NoiseSource(7, backend="secure").generator("fit", 3).laplace(np.zeros(5), 1.0)
    c = NoiseSource(7, backend="secure").generator("fit", 4).laplace(np.zeros(5), 1.0)
    d = NoiseSource(8, backend="secure").generator("fit", 3).laplace(np.zeros(5), 1.0)
    fam = NoiseSource(7, backend="secure").family("fit").generator(3).laplace(np.zeros(5), 1.0)
    assert np.array_equal(a, b) and np.array_equal(a, fam)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # a snapshot restores the key; the configured backend is kept (a snapshot of a fast run
    # restored by a secure service draws its next releases securely from the same key)
    src = NoiseSource(9, backend="secure")
    state = src.state_dict()
    assert state["backend"] == "secure"
    again = NoiseSource(None, backend="secure").load_state_dict(state)
    assert np.array_equal(
        src.generator("x").normal(np.zeros(3), 2.0), again.generator("x").normal(np.zeros(3), 2.0)
    )
    old = NoiseSource(9).state_dict()
    up = NoiseSource(None, backend="secure").load_state_dict(old)
    assert up.backend == "secure"
    assert np.array_equal(
        up.generator("z").laplace(0.0, 1.0, 2), src.generator("z").laplace(0.0, 1.0, 2)
    )
    assert "secret" in repr(src) and "9" not in repr(src)


def test_unmigrated_samplers_fail_loudly():
    g = NoiseSource(1, backend="secure").generator("y")
    for name in ("standard_normal", "random", "chisquare", "uniform"):
        with pytest.raises(NotImplementedError, match="secure noise backend"):
            getattr(g, name)(3)


def _chi2_pvalue(samples: np.ndarray, pmf) -> float:
    """Pearson χ² of integer samples against ``pmf`` (tails pooled so every cell expects ≥ 5)."""
    n = samples.size
    lo, hi = int(samples.min()), int(samples.max())
    support = np.arange(lo - 50, hi + 51)
    p = pmf(support)
    p = p / p.sum()
    keep = n * p >= 5
    first, last = np.flatnonzero(keep)[[0, -1]]
    edges = support[first : last + 1]
    expected = n * np.concatenate([[p[: first + 1].sum()], p[first + 1 : last], [p[last:].sum()]])
    counts = np.array([np.count_nonzero(samples <= edges[0])])
    mid = np.array([np.count_nonzero(samples == v) for v in edges[1:-1]])
    counts = np.concatenate([counts, mid, [np.count_nonzero(samples >= edges[-1])]])
    return float(stats.chisquare(counts, expected).pvalue)


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(3), Fraction(27, 4)])
def test_discrete_laplace_matches_its_pmf(scale):
    """χ² goodness of fit, 20,000 draws: a correct sampler fails with probability 1e-4."""
    z = discrete_laplace(_Bits(b"dlap" + bytes(28)), scale, 20_000)
    assert np.all(z == np.rint(z))
    b = float(scale)
    assert _chi2_pvalue(z, lambda k: np.exp(-np.abs(k) / b)) > 1e-4


@pytest.mark.parametrize("sigma", [Fraction(1, 2), Fraction(2), Fraction(13, 3)])
def test_discrete_gaussian_matches_its_pmf(sigma):
    z = discrete_gaussian(_Bits(b"dgau" + bytes(28)), sigma, 20_000)
    s2 = float(sigma) ** 2
    assert _chi2_pvalue(z, lambda k: np.exp(-(k.astype(float) ** 2) / (2 * s2))) > 1e-4


def test_a_sampler_with_the_wrong_scale_is_rejected_by_the_same_test():
    """The goodness-of-fit test has power: 10 % too much noise is caught."""
    z = discrete_laplace(_Bits(b"dlap" + bytes(28)), Fraction(33, 10), 20_000)
    assert _chi2_pvalue(z, lambda k: np.exp(-np.abs(k) / 3.0)) < 1e-4


@pytest.mark.parametrize("kind", ["laplace", "normal"])
def test_grid_releases_follow_the_continuous_law_at_the_grid_scale(kind):
    """At b/γ ≥ 2³⁰ the grid release is the continuous law to within 2⁻³⁰: Kolmogorov–Smirnov
    against Laplace(x, b) / N(x, b²), 5,000 draws (critical value at α = 1e-4: 1.95/√n)."""
    g = NoiseSource(3, backend="secure").generator("ks", kind)
    b, x = 2.5, 0.3
    out = getattr(g, kind)(np.full(5000, x), b)
    dist = stats.laplace(x, b) if kind == "laplace" else stats.norm(x, b)
    assert stats.kstest(out, dist.cdf).statistic < 1.95 / math.sqrt(out.size)


def test_mechanisms_release_on_the_grid_with_the_secure_backend():
    src = NoiseSource(11, backend="secure")
    lap = LaplaceMechanism(epsilon=1.0, sensitivity=2.0)
    out = lap.release(np.array([0.1, 0.2]), src.generator("lap"))
    assert _on_grid(out, grid_of(lap.scale))
    peel = Peeling(2, 5.0, 0.01, 1.0)
    _idx, vals = peel.release_many(np.array([[5.0, 0.1, 9.0, 0.2]]), src.generator("peel"))
    assert _on_grid(vals, grid_of(peel.scale))
    svt = SparseVector(tau=0.5, sigma=0.1, cap=1)
    assert svt.run(np.array([0.0, 10.0, 0.0]), src.generator("svt")).selected.tolist() == [1]
    # the fast backend gives the same bits as before the migration (value + noise)
    f1 = lap.release(np.array([0.1, 0.2]), NoiseSource(4).generator("lap"))
    f2 = np.array([0.1, 0.2]) + NoiseSource(4).generator("lap").laplace(0.0, lap.scale, 2)
    assert np.array_equal(f1, f2)


@pytest.mark.parametrize(
    "fn, n",
    [(audits.audit_laplace, 40_000), (audits.audit_gaussian, 60_000)],
    ids=["laplace", "gaussian"],
)
def test_secure_backend_audit_passes_and_halved_noise_is_caught(fn, n):
    ok = fn(multiplier=1.0, n=n, backend="secure")
    assert ok.passed, ok
    assert ok.epsilon_lb > 0.6 * ok.claimed_epsilon  # sharp, not vacuous
    halved = fn(multiplier=0.5, n=n, backend="secure")
    assert not halved.passed, halved


def test_secure_backend_matroid_batch_mean_audit():
    from streaming_dpbandit.experiments import dp_matroid_audits

    ok = dp_matroid_audits.audit_batch_release(1.0, n=30_000, backend="secure")
    assert ok.passed, ok
    halved = dp_matroid_audits.audit_batch_release(0.5, n=30_000, backend="secure")
    assert not halved.passed, halved


def test_secure_backend_peeling_audit():
    ok = audits.audit_peeling(claim="values", multiplier=1.0, n=6_000, backend="secure")
    assert ok.passed, ok
    halved = audits.audit_peeling(claim="values", multiplier=0.5, n=6_000, backend="secure")
    assert not halved.passed, halved


# -- policies, ledger, statement and serve default ----------------------------------------------
def _drive_fliphat(pol, rounds, seed=0):
    from streaming_dpbandit.envs import FliphatPaperEnv

    env = FliphatPaperEnv(d=30, s_star=3, K=4)
    rng = np.random.default_rng(seed)
    records = []
    while pol.t < rounds:
        if pol.refit_due():
            records += pol.refit()
        n = min(pol.max_decide_batch(), rounds - pol.t, 256)
        X = env.contexts(rng, n)
        dec = pol.decide(X)
        x = X[np.arange(n), dec.arms]
        y = env.mean_rewards(X)[np.arange(n), dec.arms] + env.reward_noise(rng, n)[:, 0]
        pol.learn(x, y, dec.rounds)
    return records


def test_fliphat_on_the_secure_backend_releases_on_the_grid_and_says_so(tmp_path, capsys):
    from streaming_dpbandit.cli import main
    from streaming_dpbandit.policies import FLIPHAT
    from streaming_dpbandit.privacy.ledger import Ledger

    kw = dict(d=30, s=3, epsilon=1.0, delta=0.01, seed=5, noise_backend="secure")
    pol = FLIPHAT(**kw)
    recs = _drive_fliphat(pol, 600)
    fits = [r for r in recs if r.params.get("iterations")]
    assert fits and all(r.noise_backend == "secure" for r in recs)
    for r in fits:
        gamma = grid_of(r.params["scales"][-1])
        assert _on_grid(r.release["values"], gamma)
    assert "Noise: secure backend" in pol.privacy.text()
    # a restored policy re-derives the same release from the key (crash before use)
    twin = FLIPHAT(**kw)
    assert [r.release for r in _drive_fliphat(twin, 600)] == [r.release for r in recs]
    fast = FLIPHAT(**{**kw, "noise_backend": "fast"})
    frecs = _drive_fliphat(fast, 600)
    assert all(r.noise_backend == "fast" for r in frecs)
    # the ledger and `dpbandit budget` say which backend each release drew from
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as led:
        for r in recs:
            led.append(r)
    assert main(["budget", str(path)]) == 0
    out = capsys.readouterr().out
    assert "secure" in out and "Noise: secure backend" in out


def test_every_command_defaults_to_the_secure_backend_where_the_policy_has_one():
    """One noise story (issue 31 §5): ``serve``, ``simulate``/``explain``/``replay`` (through
    ``policy_config``) and the library constructors resolve ``noise_backend="auto"`` alike."""
    from streaming_dpbandit.config import policy_config
    from streaming_dpbandit.policies import REGISTRY
    from streaming_dpbandit.settings import BanditSettings

    b = BanditSettings(policy={"policy": "fliphat", "d": 10})
    assert b.policy.noise_backend == "secure"
    assert b.policy.build(seed=1).noise_backend_in_force == "secure"
    b = BanditSettings(policy={"policy": "fliphat", "d": 10, "noise_backend": "fast"})
    assert b.policy.noise_backend == "fast"
    m = BanditSettings(
        policy={
            "policy": "dpucb-mat",
            "epsilon": 1.0,
            "matroid": {"type": "uniform", "n_items": 5, "k": 2},
        }
    )
    assert m.policy.noise_backend == "secure"
    # simulate, explain and replay build the same configurations: the same default
    assert policy_config("fliphat", {"d": 10}).noise_backend == "secure"
    assert policy_config("dp-linucb", {"d": 3}).noise_backend == "secure"
    # and so do the library's constructors
    assert REGISTRY["fliphat"](d=10).noise_backend_in_force == "secure"
    assert REGISTRY["fliphat"](d=10).privacy.noise_backend == "secure"
    assert REGISTRY["dpts-mat"](matroid={"type": "uniform", "n_items": 5, "k": 2}, epsilon=1.0)\
        .noise_backend_in_force == "secure"  # fmt: skip
    # DP-LinUCB: secure on the Gaussian binary tree, which "auto" resolves to on that backend
    lin = BanditSettings(policy={"policy": "dp-linucb", "d": 3})
    assert lin.policy.noise_backend == "secure"
    assert lin.policy.build(seed=1).resolved_tree_impl() == "binary"
    assert REGISTRY["dp-linucb"](d=3).resolved_tree_impl() == "binary"
    # where no affordable secure construction exists the default is fast
    for extra in ({"noise": "wishart"}, {"tree_impl": "blt"}):
        other = BanditSettings(policy={"policy": "dp-linucb", "d": 3, **extra})
        assert other.policy.noise_backend == "fast", extra
        assert policy_config("dp-linucb", {"d": 3, **extra}).noise_backend == "fast", extra
    ldp = BanditSettings(policy={"policy": "ldp-glb", "d": 3}, privacy="local")
    assert ldp.policy.noise_backend == "fast"  # drawn on the devices, which serve cannot see


@pytest.mark.parametrize("kind", ["laplace", "gaussian"])
def test_samplers_agree_with_opendp(kind):
    """Two-sample χ² of our exact samplers against OpenDP's audited ones (a dev dependency;
    OpenDP cannot be seeded from our key, so it is the reference, not the backend)."""
    import opendp.prelude as dp  # a dev dependency: this test never skips

    dp.enable_features("contrib")
    n = 20_000
    dom = dp.vector_domain(dp.atom_domain(T=int))
    if kind == "laplace":
        ours = discrete_laplace(_Bits(b"odp" + bytes(29)), Fraction(3), n)
        ref = dp.m.make_laplace(dom, dp.l1_distance(T=int), scale=3.0)([0] * n)
    else:
        ours = discrete_gaussian(_Bits(b"odp" + bytes(29)), Fraction(2), n)
        ref = dp.m.make_gaussian(dom, dp.l2_distance(T=int), scale=2.0)([0] * n)
    ref = np.asarray(ref, dtype=np.float64)
    values = np.union1d(ours, ref)
    table = np.array([[np.count_nonzero(a == v) for v in values] for a in (ours, ref)])
    # pool the tails until every cell expects ≥ 5
    while table.shape[1] > 2 and table.sum(axis=0)[0] < 10:
        table = np.column_stack([table[:, 0] + table[:, 1], table[:, 2:]])
    while table.shape[1] > 2 and table.sum(axis=0)[-1] < 10:
        table = np.column_stack([table[:, :-2], table[:, -2] + table[:, -1]])
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_secure_gaussian_mechanism_records_a_discrete_gaussian_at_its_cks_bound():
    """The secure GaussianMechanism draws N_ℤ on a grid: its ledger component is
    ``discrete_gaussian`` (not the continuous ``gaussian``, whose analytic (ε, δ) is unproven for
    it), calibrated so that CKS's certified conversion of its ρ meets the target."""
    from streaming_dpbandit.privacy.accountant import Accountant
    from streaming_dpbandit.privacy.gaussian import GaussianMechanism
    from streaming_dpbandit.privacy.ledger import ReleaseRecord
    from streaming_dpbandit.privacy.zcdp import epsilon_from_rho_cks

    eps, delta = 1.0, 1e-5
    mech = GaussianMechanism(1.0, epsilon=eps, delta=delta, noise_backend="secure", dim=2)
    src = NoiseSource(3, backend="secure")
    out = mech.release(np.array([0.1, 0.2]), src.generator("g"))
    assert _on_grid(out, grid_of(mech.sigma))
    comp = mech.accounting()
    assert comp["type"] == "discrete_gaussian"
    rho = comp["sensitivity"] ** 2 / (2 * comp["sigma"] ** 2)
    assert rho == pytest.approx(mech.rho_spent, rel=1e-12)
    cks = epsilon_from_rho_cks(rho, delta)
    assert cks <= eps * (1 + 1e-6)  # calibrated to the certified discrete bound
    r = ReleaseRecord("b/g", "b", "gaussian", "certified", "cks", True, eps, delta, [comp])
    rec = Accountant([r]).spend("b", delta).of_record()
    assert rec["epsilon"] >= cks * (1 - 1e-9) and rec["accountant"] != "pld"
    # more noise than the continuous analytic σ (whose ε the old continuous record claimed)
    assert mech.sigma > GaussianMechanism(1.0, epsilon=eps, delta=delta).sigma
    # the component follows the stream: a mismatch, the continuous-only classic calibration and
    # too many coordinates are refused
    with pytest.raises(ValueError, match="noise stream"):
        GaussianMechanism(1.0, eps, delta).release(np.zeros(1), src.generator("h"))
    with pytest.raises(ValueError, match="noise stream"):
        mech.release(np.zeros(1), NoiseSource(3).generator("h"))
    with pytest.raises(ValueError, match="continuous"):
        _ = GaussianMechanism(1.0, 0.5, delta, calibration="classic", noise_backend="secure").sigma
    with pytest.raises(ValueError, match="dim"):
        mech.release(np.zeros(3), src.generator("k"))


@pytest.mark.parametrize("name", ["fliphat", "private-lasso", "dpucb-mat", "dp-linucb"])
def test_a_state_saved_under_the_old_fast_default_resumes_as_written_or_says_how(name):
    """Upgrading (issue 31 §5): a state saved when the library's default was ``fast`` is not
    silently continued on the secure backend by a default-configured policy: one line says
    which ``noise_backend`` resumes it as written, and with that it resumes exactly (the same
    next decisions and state as the run that saved it)."""
    from streaming_dpbandit.checks import contextual, slate
    from streaming_dpbandit.checks.common import assert_same_state
    from streaming_dpbandit.policies import REGISTRY

    cls = REGISTRY[name]
    kind = slate.KIND if name == "dpucb-mat" else contextual.KIND
    params = next(iter(cls._unit_test_params()))
    old = kind.warm_up(cls(**params, seed=5, noise_backend="fast"))
    state = old.state_dict()
    assert cls(**params).noise_backend_in_force == "secure"  # today's default
    with pytest.raises(ValueError, match="drawn on the fast noise backend") as err:
        cls(**params).load_state_dict(state)
    assert "noise_backend='fast' to resume it as written" in str(err.value)
    assert "\n" not in str(err.value)
    resumed = cls(**params, noise_backend="fast").load_state_dict(state)
    kind.assert_same(kind.next_decisions(old), kind.next_decisions(resumed))
    assert_same_state(old, resumed)
