"""The secure noise backend on DP-LinUCB's Gram tree (issue 22 §1).

Node noise is exact discrete Gaussian in integer units of a power-of-two grid dividing the
rows' 2⁻³² unit (docs/privacy/secure-noise.md, "Gram tree"): grid, reproducibility, snapshots,
goodness of fit, the privacy audit with its halved-noise mutant on both backends, the
calibration and the accountant, and the configurations that have no secure construction.
"""

import numpy as np
import pytest
from scipy import stats

from dpbandit_testing.secure_audit_helpers import (
    SecureBatches,
    check_audit_and_mutant,
    run_audit,
)
from streaming_dpbandit.experiments.audits import _rescaled_weights, gram_pair
from streaming_dpbandit.policies import DPLinUCB
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.rows import prepare_rows
from streaming_dpbandit.privacy.secure_steps import ExactToeplitzSteps
from streaming_dpbandit.privacy.symmetric import packing
from streaming_dpbandit.privacy.zcdp import delta_from_rho_cks


def _drive(pol, rounds, seed=0, batch=8):
    rng = np.random.default_rng(seed)
    recs = list(pol.refit() or [])
    for t in range(0, rounds, batch):
        X = rng.normal(size=(batch, pol.d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        pol.decide(np.zeros((batch, 1, pol.d)))
        recs += pol.learn(X, rng.uniform(-1, 1, batch), np.arange(t, t + batch) + 1) or []
        recs += pol.refit() or []
    return recs


def _secure(**kw):
    base = dict(d=3, epsilon=1.0, delta=1e-6, n_cap=256, batch_size=8, seed=11)
    return DPLinUCB(**{**base, **kw, "noise_backend": "secure"})


def test_releases_lie_on_the_declared_grid_and_are_exact_integer_sums():
    pol = _secure()
    recs = _drive(pol, 64)
    tree = pol._agg.aggregator
    g = tree.grid_exponent
    assert g >= 32  # γ = 2^−g divides the rows' unit 2⁻³²: node sums are never rounded
    R = pol._agg.release()
    units = R * 2.0**g
    assert np.array_equal(units, np.rint(units))
    # the release is the float of the exact integer M·2^(g−32) + noise units
    M = tree._M.astype(object) * (1 << (g - 32))
    exact = M + tree._noise_sum.astype(object)
    assert np.array_equal(R, np.array([float(v) for v in exact]) * 2.0**-g)
    assert {r.noise_backend for r in recs} == {"secure"}
    assert "Noise: secure backend" in pol.privacy.text()


def test_a_reprocessed_episode_rederives_the_same_release_and_snapshots_never_redraw():
    a, b = _secure(), _secure()
    _drive(a, 48)
    snap = a.state_dict()
    Ra = a._agg.release().copy()
    _drive(b, 48)  # the same rows from the same key: bit-identical
    assert np.array_equal(Ra, b._agg.release())
    # restoring the snapshot serves the same release without drawing anything
    c = _secure().load_state_dict(snap)
    before = c._agg.aggregator.draw_counts() if hasattr(c._agg.aggregator, "draw_counts") else None
    assert np.array_equal(c._agg.release(), Ra)
    if before is not None:
        assert c._agg.aggregator.draw_counts() == before
    assert np.array_equal(c._agg.aggregator._E, a._agg.aggregator._E)
    assert c._agg.aggregator._E.dtype == np.int64
    # a different key gives a different release
    d = DPLinUCB(
        d=3, epsilon=1.0, delta=1e-6, n_cap=256, batch_size=8, seed=12, noise_backend="secure"
    )
    _drive(d, 48)
    assert not np.array_equal(Ra, d._agg.release())


def test_node_noise_matches_the_declared_discrete_gaussian():
    """KS of standardised entries against N(0, 1): at σ/γ ≥ 2³⁰ the discrete Gaussian's CDF is
    the normal one to 2⁻³⁰, far below the KS critical value at n = 20,000 (p > 10⁻⁴); a
    sampler with 10 % too much noise is rejected by the same test."""
    p, sigma, n = 2, 3.0, 6_700
    pk = packing(p)
    smp = SymmetricGaussianNoise(p, sigma)
    g = smp.grid_exponent(32)
    src = NoiseSource(4, backend="secure")
    units = np.array([smp.sample_units(src.generator("gof", i), g) for i in range(n)])
    scale = sigma * np.where(pk.is_diag, np.sqrt(2.0), 1.0) * 2.0**g
    z = (units / scale).ravel()
    assert z.size >= 20_000
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert stats.kstest(z / 1.1, "norm").pvalue < 1e-4
    # pads: one draw of terms·σ² per entry
    pads = np.array([smp.sample_units(src.generator("pad", i), g, 4) for i in range(2_000)])
    zp = (pads / (2 * scale)).ravel()
    assert stats.kstest(zp, "norm").pvalue > 1e-4


def _releases_audit(backend, smp, V0, V1, name, n, epsilon=1.0, delta=1e-2, seed=5):
    """m Gaussian releases V + noise (tree nodes or factorisation steps; V is (m, P) per
    dataset), the noise from the mechanism's own sampler on either backend; the statistic
    ⟨obs − V′, V − V′⟩ in the rescaled weights is the exact privacy loss."""
    m = V0.shape[0]
    w = _rescaled_weights(smp.p)
    diff = V0 - V1
    g = smp.grid_exponent(32)
    streams = SecureBatches(seed, name)

    def sampler(which, k, rng):
        if backend == "fast":
            Z = smp.sample_many(rng, k * m)
        else:
            s = streams.next()
            Z = np.array([smp.sample_units(s, g) for _ in range(k * m)]) * 2.0**-g
        obs = Z.reshape(k, m, -1) + (V0 if which == 0 else V1)
        return ((obs - V1) * diff * w).sum(axis=(1, 2))

    return run_audit(sampler, epsilon, delta, n, seed, f"{name} {backend}")


def _audit_tree(backend, multiplier, n, d=2, n_cap=2):
    """The padded tree's m node releases containing row 1 (the level-ℓ node at s = 2^ℓ covers
    rows 1…2^ℓ), worst-case pair of experiments.audits.gram_pair, through DP-LinUCB's clipping;
    the node noise from the tree's own sampler and calibration."""
    X, y0, y1 = gram_pair(d, n_rows=n_cap)
    pol = DPLinUCB(
        d=d,
        epsilon=1.0,
        delta=1e-2,
        n_cap=n_cap,
        seed=0,
        noise_scale_multiplier=multiplier,
        noise_backend=backend,
    )
    smp = pol._state()._agg.aggregator.sampler
    pk = packing(d + 1)
    sums = []
    for y in (y0, y1):
        rows, _, _ = prepare_rows(X, y, pol.L, pol.B_tilde)
        sums.append(
            np.array(
                [pk.outer_sum(rows[: 1 << ell]) for ell in range(pol.calibration_constants().m)]
            )
        )
    return _releases_audit(backend, smp, *sums, f"tree ×{multiplier:g}", n)


@pytest.mark.parametrize("backend", ["fast", "secure"])
def test_tree_audit_passes_and_halved_noise_is_caught_on_both_backends(backend):
    check_audit_and_mutant(lambda m: _audit_tree(backend, m, n=10_000), caught_by=1.2)


def test_secure_calibration_is_renyi_certified_and_the_accountant_says_so():
    pol = _secure(delta=1e-6)
    cal = pol.calibration_constants()
    (comp,) = cal.accounting
    assert comp["type"] == "discrete_gaussian"
    rho = comp["count"] * comp["sensitivity"] ** 2 / (2 * comp["sigma"] ** 2)
    assert delta_from_rho_cks(rho, 1.0) <= 1e-6 < delta_from_rho_cks(rho * 1.01, 1.0)
    fast = DPLinUCB(d=3, epsilon=1.0, delta=1e-6, n_cap=256, batch_size=8, noise_backend="fast")
    assert cal.noise_law["sigma"] > fast.calibration_constants().noise_law["sigma"]
    recs = _drive(pol, 16)
    sp = Accountant(recs).spend(pol.bandit_id, 1e-6)
    assert sp.rdp_only and sp.epsilon_at_delta is None  # no continuous PLD for it
    zc = next(c for c in sp.candidates() if c["accountant"] == "zcdp")
    assert zc["epsilon"] <= 1.0 + 1e-8 and zc["delta"] == 1e-6


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(noise="wishart"), "wishart has no secure backend"),
        (dict(calibration="paper"), "continuous Gaussian noise only"),
    ],
)
def test_configurations_without_a_secure_construction_are_one_line_errors(kw, match):
    with pytest.raises(ValueError, match=match) as err:
        _secure(**kw).refit()
    assert "\n" not in str(err.value)


def test_a_fast_snapshot_cannot_resume_a_tree_epoch_on_the_secure_backend():
    fast = DPLinUCB(
        d=3, epsilon=1.0, delta=1e-6, n_cap=256, batch_size=8, seed=11, noise_backend="fast"
    )
    _drive(fast, 16)
    with pytest.raises(ValueError, match="cannot switch to the secure backend"):
        _secure().load_state_dict(fast.state_dict())


def _audit_factor(impl, backend, multiplier, n, steps=2):
    """√Toeplitz / BLT step releases with row 1 differing (the first, longest column of C̃).

    Secure: the integer steps V + Z with V = rint(C̃x/γ) from the production encoder (the exact
    data part, computed once per dataset) and Z from the production sampler; fast: C̃x + z. The
    releases B·(γY) are post-processing of the steps."""
    X, y0, y1 = np.array([[10.0]]), np.array([10.0]), np.array([-10.0])  # gram_pair at d = 1
    pol = DPLinUCB(
        d=1,
        epsilon=1.0,
        delta=1e-2,
        n_cap=steps,
        n_steps=steps,
        seed=0,
        tree_impl=impl,
        noise_scale_multiplier=multiplier,
        noise_backend=backend,
    )
    agg = pol._state()._agg.aggregator
    smp = agg.sampler
    coeffs = agg._encoder()._state().coeffs  # C̃'s float coefficients (both backends)
    g = smp.grid_exponent(32)
    steps_data = []
    for y in (y0, y1):
        rows, _, _ = prepare_rows(X, y, pol.L, pol.B_tilde)
        x = packing(2).outer_sum(rows)
        if backend == "secure":
            enc = ExactToeplitzSteps(coeffs, g)
            units = (x * 2.0**32).astype(np.int64)
            V = [enc.push(units)] + [enc.push(np.zeros_like(units)) for _ in range(steps - 1)]
            steps_data.append(np.array(V, dtype=np.float64) * 2.0**-g)
        else:
            steps_data.append(coeffs[:steps, None] * x[None, :])
    return _releases_audit(backend, smp, *steps_data, f"{impl} ×{multiplier:g}", n, seed=6)


@pytest.mark.parametrize("backend", ["fast", "secure"])
@pytest.mark.parametrize("impl", ["sqrt_toeplitz", "blt"])
def test_factorisation_audit_passes_and_halved_noise_is_caught_on_both_backends(impl, backend):
    check_audit_and_mutant(lambda m: _audit_factor(impl, backend, m, n=8_000))


@pytest.mark.parametrize("impl", ["sqrt_toeplitz", "blt"])
def test_secure_factorisations_are_reproducible_unbiased_and_restorable(impl):
    def run(seed=2, mult=1.0):
        pol = DPLinUCB(
            d=2,
            epsilon=1.0,
            delta=1e-6,
            n_cap=64,
            batch_size=8,
            seed=seed,
            tree_impl=impl,
            noise_backend="secure",
            noise_scale_multiplier=mult,
        )
        _drive(pol, 40)
        return pol

    a, b = run(), run()
    Ra = a._agg.release()
    assert np.array_equal(Ra, b._agg.release())
    c = DPLinUCB(**a._get_params()).load_state_dict(a.state_dict())
    assert np.array_equal(c._agg.release(), Ra)
    assert not np.array_equal(run(seed=3)._agg.release(), Ra)
    # with negligible noise the release is the exact prefix (B·C̃ ≈ A; rounding ≤ γ/2 per step)
    tiny = run(mult=1e-9)
    agg = tiny._agg.aggregator
    assert np.abs(tiny._agg.release() - agg.exact_sum()).max() < 1e-6
    comp = a.calibration_constants().accounting[0]
    assert comp["type"] == "discrete_gaussian" and comp["rounding_margin"] > 0
    if impl == "sqrt_toeplitz":  # the released steps γ·Y_j lie on the grid
        agg = a._agg.aggregator
        units = agg._Z[: agg.steps] * 2.0 ** agg._encoder().g
        assert np.array_equal(units, np.rint(units))


@pytest.mark.parametrize("impl", ["sqrt_toeplitz", "blt"])
def test_secure_factorisation_epoch_records_reach_the_ledger(impl, tmp_path):
    # the secure calibration once stored the step coefficients in GramCalibration.c (the
    # Wishart shift constant): the epoch record then held an array and the ledger refused it
    from streaming_dpbandit.privacy.ledger import Ledger

    pol = _secure(d=2, n_cap=64, tree_impl=impl)
    assert pol.calibration_constants().c is None
    recs = _drive(pol, 16)
    assert recs
    with Ledger(tmp_path / "ledger.jsonl") as led:
        for rec in recs:
            led.append(rec)
        assert len(led) == len(recs)
