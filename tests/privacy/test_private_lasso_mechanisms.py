"""PrivateLASSO-R mechanisms (spec §11.1–§11.7): goldens, sensitivities, SVT, Gram, tree, TRS, prox.

Tolerances follow from the Monte-Carlo variance (z = 4 unless stated), never from the outputs.

Spec: docs/specs/privatelasso.md.
"""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from streaming_dpbandit.estimators.elastic_net import CertifiedElasticNet, prox_l1_l2ball
from streaming_dpbandit.estimators.rowstore import RowStore, quantize_toward_zero
from streaming_dpbandit.estimators.trs import trs
from streaming_dpbandit.policies.private_lasso import clip_rows
from streaming_dpbandit.privacy.gram import gram_bound, sym_gauss, u_distance, u_vector
from streaming_dpbandit.privacy.svt import (
    SparseVector,
    pass_probability,
    svt_margin,
    svt_rho,
    svt_sigma,
)
from streaming_dpbandit.privacy.tree_aggregator import TreeAggregator
from streaming_dpbandit.privacy.zcdp import epsilon_from_rho, rho_from_epsilon_delta

Z = 4.0


# -- §11.1 clipping and zCDP goldens ------------------------------------------------------------
def test_clip_bounds_hold_after_clip_and_rounding():
    rng = np.random.default_rng(0)
    X = rng.standard_cauchy(size=(2000, 30)) * 3
    Xc, n_coord, n_rows = clip_rows(X, 1.0, 2.5)
    Xq = quantize_toward_zero(Xc)
    assert np.abs(Xq).max() <= 1.0 and np.linalg.norm(Xq, axis=1).max() <= 2.5
    assert n_coord == np.count_nonzero(np.abs(X) > 1.0) and n_rows > 0
    y = quantize_toward_zero(np.clip(rng.standard_cauchy(2000), -2.0, 2.0))
    assert np.abs(y).max() <= 2.0


def test_zcdp_golden_values():
    assert rho_from_epsilon_delta(1.0, 1e-6) == pytest.approx(0.017469, abs=5e-7)
    assert rho_from_epsilon_delta(8.0, 1e-7) == pytest.approx(0.80332, abs=5e-6)
    assert epsilon_from_rho(0.5, 1e-6) == pytest.approx(5.7565, abs=5e-5)
    for eps, dl in [(0.1, 1e-9), (3.0, 1e-5), (32.0, 1e-8)]:
        assert epsilon_from_rho(rho_from_epsilon_delta(eps, dl), dl) == pytest.approx(
            eps, rel=1e-12
        )


# -- §11.2 prox ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_prox_equals_a_generic_constrained_solver(seed):
    rng = np.random.default_rng(seed)
    d = 5
    v = rng.normal(size=d) * 2
    t, C = rng.uniform(0.05, 1.0), rng.uniform(0.3, 3.0)

    def obj(x):
        return 0.5 * np.sum((x - v) ** 2) + t * np.abs(x).sum()

    # x = u − w with u, w ≥ 0 makes the objective smooth; ‖u − w‖² ≤ C² is the ball
    def f(z):
        return 0.5 * np.sum((z[:d] - z[d:] - v) ** 2) + t * z.sum()

    res = optimize.minimize(
        f,
        np.zeros(2 * d),
        method="SLSQP",
        bounds=[(0, None)] * (2 * d),
        constraints=[{"type": "ineq", "fun": lambda z: C**2 - np.sum((z[:d] - z[d:]) ** 2)}],
        options={"ftol": 1e-14, "maxiter": 500},
    )
    ours = prox_l1_l2ball(v, t, C)
    generic = res.x[:d] - res.x[d:]
    generic *= min(1.0, C / np.linalg.norm(generic))  # SLSQP is feasible only to ~1e-8
    assert np.linalg.norm(ours) <= C * (1 + 1e-12)
    assert obj(ours) <= obj(generic) + 1e-7


# -- §11.3 elastic-net certificate ---------------------------------------------------------------
def _random_blocks(rng, P, n, d, b_x, B_x, C_r):
    """Neighbouring blocks: records at clip corners, r = ±C_r, absences; slot 0 differs."""
    Zb = np.zeros((P, n, d))
    yb = np.zeros((P, n))
    for p in range(P):
        kind = p % 4
        m = rng.integers(0, n) if kind else 0  # kind 0: every other slot absent
        X = rng.choice([-b_x, b_x, 0.0], size=(m, d)) * (rng.random((m, d)) < 0.5)
        X, _, _ = clip_rows(X, b_x, B_x)
        Zb[p, 1 : 1 + m] = X[: n - 1]
        yb[p, 1 : 1 + m] = rng.choice([-C_r, C_r], size=m)[: n - 1]
    Zp, yp = Zb.copy(), yb.copy()
    for p in range(P):
        for arr_Z, arr_y in ((Zb, yb), (Zp, yp)):
            if rng.random() < 0.2:
                continue  # this side's differing slot is absent
            x = rng.choice([-b_x, b_x], size=d) * (rng.random(d) < 0.6)
            x, _, _ = clip_rows(x[None], b_x, B_x)
            arr_Z[p, 0] = x[0]
            arr_y[p, 0] = rng.choice([-C_r, C_r])
    return Zb, yb, Zp, yp


def test_solver_is_within_gamma_delta0_of_the_minimiser():
    rng = np.random.default_rng(1)
    en = CertifiedElasticNet(ridge=1.0, theta_bound=1.0, clip_l2=1.5, reward_bound=1.0, slack=0.05)
    N, d = 48, 6
    Zb, yb, _, _ = _random_blocks(rng, 200, N, d, 1.0, 1.5, 1.0)
    lam = 0.02
    approx = en.fit_batch(Zb, yb, N, lam)
    ref = en.fit_batch(Zb, yb, N, lam, iterations=10 * en.iterations(N))
    err = np.linalg.norm(approx - ref, axis=1).max()
    assert err <= en.slack * en.sensitivity0(N)


def test_certified_sensitivity_over_adversarial_neighbour_pairs():
    """10⁴ neighbouring pairs: max ‖θ̃(B) − θ̃(B′)‖₂ / Δ ≤ 1 (the ratio is reported)."""
    rng = np.random.default_rng(2)
    worst = 0.0
    for b_x, B_x, C_r, N, d in [
        (1.0, 1.0, 1.0, 32, 4),
        (1.0, 2.0, 2.0, 64, 6),
        (0.5, 1.0, 3.0, 16, 3),
    ]:
        en = CertifiedElasticNet(ridge=1.0, theta_bound=1.0, clip_l2=B_x, reward_bound=C_r)
        for lam in (0.0, 0.01):
            Zb, yb, Zp, yp = _random_blocks(rng, 10_000 // 6 + 1, N, d, b_x, B_x, C_r)
            a = en.fit_batch(Zb, yb, N, lam)
            b = en.fit_batch(Zp, yp, N, lam)
            ratio = float(np.max(np.linalg.norm(a - b, axis=1)) / en.sensitivity(N))
            worst = max(worst, ratio)
    print(f"max ‖θ̃(B) − θ̃(B′)‖/Δ over 10⁴ pairs: {worst:.3f}")
    assert worst <= 1.0
    assert worst > 0.1  # the pairs are adversarial enough to exercise the bound


def test_sparse_and_batched_solvers_agree():
    from scipy import sparse

    rng = np.random.default_rng(3)
    en = CertifiedElasticNet(ridge=1.0, theta_bound=1.0, clip_l2=2.0, reward_bound=1.0)
    Zb, yb, _, _ = _random_blocks(rng, 3, 40, 5, 1.0, 2.0, 1.0)
    batch = en.fit_batch(Zb, yb, 40, 0.01)
    for p in range(3):
        one = en.fit(sparse.csr_matrix(Zb[p]), yb[p], 40, 0.01).theta
        np.testing.assert_allclose(one, batch[p], rtol=1e-10, atol=1e-13)


# -- §11.4 Gram sensitivity and SymGauss
def test_gram_sensitivity_bound_over_random_and_extreme_records():
    rng = np.random.default_rng(4)
    b_x, c, C_r = 1.0, 4, 2.0
    L2 = gram_bound(b_x, c, C_r)
    worst = 0.0
    for _ in range(20_000):
        v, w = (
            np.r_[
                rng.choice([-b_x, 0.0, b_x], size=c) * (rng.random(c) < 0.8), rng.uniform(-C_r, C_r)
            ]
            for _ in range(2)
        )
        if rng.random() < 0.1:
            w = np.zeros(c + 1)  # an absent slot
        worst = max(worst, u_distance(v, w) / L2)
    # the extreme, orthogonal pair attains the bound
    v = np.r_[np.ones(c) * b_x, C_r]
    w = np.r_[np.r_[np.ones(c // 2), -np.ones(c // 2)] * b_x, 0.0]
    w[-1] = 0.0
    assert worst <= 1.0 + 1e-12
    assert u_distance(np.r_[1.0, 1.0, 2**0.5], np.r_[-1.0, -1.0, 2**0.5]) == pytest.approx(4.0)
    assert u_distance(v, np.zeros(c + 1)) == pytest.approx(L2 / math.sqrt(2))


def test_sym_gauss_variances_chi_square():
    sigma, p, n = 1.7, 4, 20_000
    Zs = sym_gauss(p, sigma, np.random.default_rng(5), size=n)
    assert np.array_equal(Zs, np.swapaxes(Zs, 1, 2))
    off = Zs[:, 0, 1]
    diag = Zs[:, 2, 2]
    # (n−1)s²/σ_true² ~ χ²_{n−1}: two-sided 1e-4 test of each variance
    for x, var in ((off, sigma**2), (diag, 2 * sigma**2)):
        stat = (n - 1) * x.var(ddof=1) / var
        assert stats.chi2.ppf(5e-5, n - 1) < stat < stats.chi2.ppf(1 - 5e-5, n - 1)
    # and the u-coordinates are isotropic N(0, σ²)
    u = u_vector(Zs)
    stat = (n - 1) * u.var(axis=0, ddof=1) / sigma**2
    assert np.all((stat > stats.chi2.ppf(1e-5, n - 1)) & (stat < stats.chi2.ppf(1 - 1e-5, n - 1)))


# -- §11.5 SVT ------------------------------------------------------------------------------------
def test_svt_calibration_goldens():
    assert svt_sigma(4.973e-4, 10, 0.011285) == pytest.approx(0.02094, abs=5e-6)
    assert svt_margin(0.02094, 10_000, 10, 5) == pytest.approx(0.3183, abs=5e-5)
    assert svt_rho(1.0, svt_sigma(1.0, 7, 0.3), 7) == pytest.approx(0.3)


@pytest.mark.parametrize("a_over_sigma", [0.0, 1.0, 3.0, 2 * math.log(2000)])
def test_svt_null_pass_rate_matches_the_formula(a_over_sigma):
    sigma, n = 0.5, 200_000
    svt = SparseVector(tau=a_over_sigma * sigma, sigma=sigma, cap=1)
    pos, _ = svt.run_many(np.zeros((n, 1)), np.random.default_rng(6))
    rate = float(np.mean(pos[:, 0] == 0))
    p = float(pass_probability(a_over_sigma * sigma, sigma))
    assert abs(rate - p) <= Z * math.sqrt(p * (1 - p) / n) + 1e-12


def test_svt_transcript_semantics_and_vectorised_equivalence():
    q = np.array([0.0, 9.0, 0.0, 9.0, 9.0, 0.0])
    svt = SparseVector(tau=5.0, sigma=1e-4, cap=2)
    res = svt.run(q, np.random.default_rng(0))
    assert res.selected.tolist() == [1, 3] and res.halted_at == 4 and res.cap_hit
    order = np.array([5, 4, 3, 2, 1, 0])
    res = svt.run(q, np.random.default_rng(0), order=order)
    assert res.selected.tolist() == [4, 3] and res.halted_at == 3
    # one call of run() draws exactly what row 0 of run_many() draws
    Q = np.random.default_rng(1).normal(size=(1, 50))
    svt = SparseVector(tau=0.5, sigma=0.3, cap=3)
    pos, h = svt.run_many(Q, np.random.default_rng(7))
    one = svt.run(Q[0], np.random.default_rng(7))
    assert one.selected.tolist() == pos[0][pos[0] >= 0].tolist() and one.halted_at == h[0]


def test_svt_threshold_noise_is_redrawn_after_a_pass():
    """Two queries at the threshold: with τ̂ redrawn after the first ⊤ the two comparisons are
    independent, P(both ⊤) = 1/4; a threshold kept across the ⊤ would give E[P(⊤ | τ̂)²] > 1/4."""
    n = 200_000
    pos, _ = SparseVector(0.0, 1.0, 3).run_many(np.zeros((n, 2)), np.random.default_rng(8))
    both = float(np.mean((pos[:, 0] == 0) & (pos[:, 1] == 1)))
    assert abs(both - 0.25) <= Z * math.sqrt(0.25 * 0.75 / n)
    # the kept-threshold alternative, for scale: E[(1 − F_{2σ}(τ̂))²] with τ̂ ~ Lap(1)
    t = np.random.default_rng(9).laplace(size=n)
    p = np.where(t < 0, 1 - 0.5 * np.exp(t / 2), 0.5 * np.exp(-t / 2))
    assert float(np.mean(p**2)) > 0.25 + 10 * Z * math.sqrt(0.25 * 0.75 / n)


# -- §11.6 TRS
@pytest.mark.parametrize("seed", range(8))
def test_trs_matches_a_generic_solver(seed):
    rng = np.random.default_rng(seed)
    p = 4
    M = rng.normal(size=(p, p))
    A = M @ M.T - (seed % 3) * np.eye(p)  # PSD, or indefinite
    b = rng.normal(size=p) * (0.2 if seed % 2 else 3.0)
    C = 1.0

    def f(x):
        return x @ A @ x - 2 * b @ x

    ours = trs(A, b, C)
    best = min(
        (
            optimize.minimize(
                f,
                x0,
                method="SLSQP",
                constraints=[{"type": "ineq", "fun": lambda x: C**2 - x @ x}],
                options={"ftol": 1e-14, "maxiter": 500},
            ).x
            for x0 in rng.normal(size=(10, p)) * 0.5
        ),
        key=f,
    )
    assert np.linalg.norm(ours) <= C * (1 + 1e-9)
    assert f(ours) <= f(best) + 1e-7
    interior = np.linalg.eigvalsh(A)[0] > 0 and np.linalg.norm(np.linalg.solve(A, b)) < C
    if interior:
        np.testing.assert_allclose(ours, np.linalg.solve(A, b), atol=1e-10)
    else:
        assert np.linalg.norm(ours) == pytest.approx(C, rel=1e-8)


def test_trs_hard_case():
    A = np.diag([-1.0, 2.0])
    b = np.array([0.0, 1.0])  # no weight on the bottom eigenvector
    x = trs(A, b, 2.0)
    assert np.linalg.norm(x) == pytest.approx(2.0)
    assert x[1] == pytest.approx(1.0 / 3.0)  # (A + νI)x = b with ν = 1


# -- §11.7 tree
def test_tree_nodes_membership_prefix_and_restore():
    rng = np.random.default_rng(9)
    noises = {}

    def node_noise(j):
        noises[j] = np.random.default_rng(1000 + j).normal(size=(2, 2))
        return noises[j]

    tree = TreeAggregator((2, 2), node_noise)
    leaves = rng.integers(-5, 5, size=(64, 2, 2)).astype(np.float64)
    membership = np.zeros(65, dtype=int)
    snapshot = None
    for j in range(1, 65):
        tree.insert(leaves[j - 1])
        assert tree.live_nodes == bin(j).count("1")
        # the nodes making prefix(j): (j − 2^i, j] for every set bit, peeled from the top
        nodes, lo = [], 0
        for i in reversed(range(7)):
            if j >> i & 1:
                nodes.append((lo, lo + (1 << i)))
                lo += 1 << i
        exact = leaves[:j].sum(axis=0)
        noise = sum(noises[hi] for _, hi in nodes)
        np.testing.assert_allclose(tree.prefix(), exact + noise, atol=1e-9)
        np.testing.assert_allclose(tree.exact_prefix(), exact)
        if j == 37:
            snapshot = tree.state_dict()
    for j in range(1, 65):  # every node ever closed: (j − lowbit(j), j]
        lo = j - (j & -j)
        membership[lo + 1 : j + 1] += 1
    assert membership[1:].max() <= 6 + 1  # 2^6 leaves: at most ℓ + 1 nodes per leaf
    restored = TreeAggregator((2, 2), node_noise).load_state_dict(snapshot)
    again = TreeAggregator((2, 2), node_noise)
    for j in range(1, 38):
        again.insert(leaves[j - 1])
    for j in range(38, 65):
        restored.insert(leaves[j - 1])
        again.insert(leaves[j - 1])
        assert np.array_equal(restored.prefix(), again.prefix())


# -- row store exactness
def test_row_store_is_order_independent_and_exact():
    rng = np.random.default_rng(10)
    X = quantize_toward_zero(rng.uniform(-1, 1, size=(300, 12)) * (rng.random((300, 12)) < 0.3))
    y = quantize_toward_zero(rng.uniform(-2, 2, size=300))
    slots = np.arange(1, 301)
    a, b = RowStore(12, (1, 300)), RowStore(12, (1, 300))
    a.add(slots, X, y)
    perm = rng.permutation(300)
    for chunk in np.array_split(perm, 7):
        b.add(slots[chunk], X[chunk], y[chunk])
    S = np.array([0, 3, 7])
    assert np.array_equal(a.support_gram(S), b.support_gram(S))
    Va = a.units_to_float(a.support_gram(S))
    W = np.c_[X[:, S], y]
    np.testing.assert_allclose(Va, W.T @ W, rtol=1e-12)
    assert b.add(np.array([5]), X[:1], y[:1]) == 1  # duplicate slot refused
    with pytest.raises(ValueError, match="outside"):
        b.add(np.array([301]), X[:1], y[:1])
