"""The secure noise backend on PrivateLASSO's Gram releases (issue 22 §1).

Block Gram, episodic snapshot and tree nodes: exact discrete Gaussian noise added to the exact
integer Gram in units of a grid dividing 2⁻³² (docs/privacy/secure-noise.md, "Gram releases").
"""

import numpy as np
import pytest

from dpbandit_testing.secure_audit_helpers import (
    SecureBatches,
    check_audit_and_mutant,
    run_audit,
)
from streaming_dpbandit.envs import MarginEnv
from streaming_dpbandit.policies import PrivateLASSO, PrivateLASSOPaper
from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.gram import (
    secure_grid_exponent,
    secure_sym_gauss_release,
    sym_gauss,
    u_vector,
)
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.zcdp import epsilon_from_rho_cks


def test_secure_gram_release_is_on_the_grid_and_symmetric():
    V = np.array([[3 * 2**32 + 5, 7], [7, 2**31]], dtype=object)
    for sigma in (0.01, 3.0, 500.0):
        G = secure_sym_gauss_release(V, sigma, NoiseSource(1, backend="secure").generator("g"))
        g = secure_grid_exponent(sigma)
        assert g >= 32 and np.array_equal(G, G.T)
        units = G * 2.0**g
        assert np.array_equal(units, np.rint(units))


def _audit_gram(backend, multiplier, n=12_000, delta=1e-2, seed=3):
    """Worst-case pair ΔV = vvᵀ − wwᵀ with ‖u(ΔV)‖ = σ (ρ = ½); the statistic ⟨u(G − V₁),
    u(ΔV)⟩ is the exact privacy loss (SymGauss is isotropic in u-coordinates). Claim: the CKS
    conversion of ρ = ½ at δ."""
    V0 = np.round(np.outer([1.0, 1.0], [1.0, 1.0]) * 2**32).astype(object)
    V1 = np.round(np.outer([1.0, -1.0], [1.0, -1.0]) * 2**32).astype(object)
    V1f = np.array(V1, dtype=np.float64) / 2**32
    du = u_vector(np.array(V0 - V1, dtype=np.float64) / 2**32)
    sigma = float(np.linalg.norm(du)) * multiplier
    streams = SecureBatches(seed, "gram")

    def sampler(which, k, rng):
        V = V0 if which == 0 else V1
        if backend == "fast":
            G = np.array(V, dtype=np.float64) / 2**32 + sym_gauss(2, sigma, rng, size=k)
        else:
            g = streams.next()  # one stream per batch of k releases
            G = np.array([secure_sym_gauss_release(V, sigma, g) for _ in range(k)])
        return u_vector(G - V1f) @ du

    eps = epsilon_from_rho_cks(0.5, delta)
    return run_audit(sampler, eps, delta, n, seed, f"symgauss gram {backend} ×{multiplier:g}")


@pytest.mark.parametrize("backend", ["fast", "secure"])
def test_gram_release_audit_passes_and_halved_noise_is_caught(backend):
    check_audit_and_mutant(lambda m: _audit_gram(backend, m), caught_by=1.2)


def _run(mode, seed=1, T=2**10, d=20, backend="secure", pol=None, t_stop=None):
    env = MarginEnv(d=d)
    if pol is None:
        pol = PrivateLASSO(
            d=d,
            s0=3,
            horizon=T,
            epsilon=256.0,
            delta=1e-8,
            mode=mode,
            **env.public_bounds(),
            seed=seed,
            noise_backend=backend,
        )
    rng = np.random.default_rng(1)
    records = []
    stop = T if t_stop is None else t_stop
    while pol.t < stop:
        if pol.refit_due():
            records += pol.refit()
        n = min(pol.max_decide_batch(), stop - pol.t)
        X = env.contexts(rng, n)
        dec = pol.decide(X)
        x = X[np.arange(n), dec.arms]
        records += pol.learn(x, env.mean_rewards(X)[np.arange(n), dec.arms], dec.rounds) or []
    return pol, records


@pytest.mark.parametrize("mode", ["forgetful", "episodic"])
def test_private_lasso_on_the_secure_backend_is_reproducible_and_says_so(mode):
    a, recs = _run(mode)
    b, _ = _run(mode)
    assert np.array_equal(a._theta, b._theta)
    assert recs and {r.noise_backend for r in recs} == {"secure"}
    comps = [c for r in recs for c in r.accounting if c["type"] == "zcdp"]
    assert all(c.get("renyi_only") and not c.get("gaussian") for c in comps)
    svt = [c for r in recs for c in r.accounting if c.get("mechanism") == "svt"]
    assert svt and all(c["type"] == "pure" for c in svt)  # the SVT as what it is: pure ε
    sp = Accountant(recs).spend(a.bandit_id, 1e-8)
    # a discrete Gaussian release leaves no PLD; SVT-only ledgers are pure ε (PLD is valid)
    assert sp.rdp_only == bool(comps)
    if comps:
        assert sp.epsilon_at_delta is None
        assert sp.of_record()["accountant"] in ("zcdp", "basic")
    assert "Noise: secure backend" in a.privacy.text()
    if mode == "episodic" and a._G_hist is not None:
        units = a._G_hist * 2.0**32
        assert np.array_equal(units, np.rint(units))


def test_episodic_snapshot_restores_the_tree_without_redrawing():
    a, _ = _run("episodic", t_stop=700)
    snap = a.state_dict()
    b = PrivateLASSO(**{**a._get_params()}).load_state_dict(snap)
    if a._tree is not None:
        assert np.array_equal(a._tree.prefix(), b._tree.prefix())
    a2, _ = _run("episodic", pol=a)
    b2, _ = _run("episodic", pol=b)
    assert np.array_equal(a2._theta, b2._theta)


def test_the_paper_variant_refuses_the_secure_backend_in_one_line():
    env = MarginEnv(d=20)
    pol = PrivateLASSOPaper(
        d=20,
        s0=2,
        horizon=1024,
        epsilon=1.0,
        delta=1e-6,
        calibration="paper",
        allow_invalid_privacy=True,
        noise_backend="secure",
        **env.public_bounds(),
    )
    with pytest.raises(ValueError, match="fast noise backend only") as err:
        pol.refit()
    assert "\n" not in str(err.value)
