"""BLT continual release (issue 20 item 2): factorisation identities, sensitivity, error,
buffers, reproducibility from the key, snapshot/restore, calibration and the policy."""

import math

import numpy as np
import pytest

from streaming_dpbandit.policies import DPLinUCB
from streaming_dpbandit.privacy.blt import (
    BLTAggregator,
    blt_coefficients,
    blt_inverse,
    blt_max_error,
    blt_parameters,
    blt_sensitivity,
    counting_lower_bound,
    fit_blt,
)
from streaming_dpbandit.privacy.factorization import sqrt_toeplitz_norm
from streaming_dpbandit.privacy.gram_calibration import calibrate_gram_release
from streaming_dpbandit.privacy.matrix_noise import SymmetricGaussianNoise
from streaming_dpbandit.privacy.noise import NoiseSource
from streaming_dpbandit.privacy.tree import PaddedTree
from streaming_dpbandit.utils.serialization import dumps, loads


def toeplitz(c):
    n = len(c)
    return np.array([[c[i - j] if i >= j else 0.0 for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("T", [1 << 10, 10_000])
def test_inverse_sensitivity_and_error_match_dense_matrices(T):
    th, w = blt_parameters(T)
    n = 300
    C = toeplitz(blt_coefficients(th, w, n))
    Cinv = toeplitz(blt_coefficients(*blt_inverse(th, w), n))
    assert np.allclose(C @ Cinv, np.eye(n), atol=1e-10)
    # ‖C‖_{1→2} is the first column; its closed form matches the dense sum at every horizon
    c = blt_coefficients(th, w, T)
    assert blt_sensitivity(th, w, T) == pytest.approx(math.sqrt((c * c).sum()), rel=1e-12)
    assert blt_sensitivity(th, w, T) <= blt_sensitivity(th, w)  # the all-horizon bound
    assert np.linalg.norm(C, axis=0).max() == pytest.approx(np.linalg.norm(C[:, 0]), rel=1e-14)
    # max row norm of B = A·C⁻¹: closed form = dense (last row), for the full horizon too
    B = np.tril(np.ones((n, n))) @ Cinv
    assert np.linalg.norm(B, axis=1).max() == pytest.approx(blt_max_error(th, w, n), rel=1e-9)
    beta = np.cumsum(blt_coefficients(*blt_inverse(th, w), T))
    assert blt_max_error(th, w, T) == pytest.approx(np.sqrt((beta**2).sum()), rel=1e-9)


@pytest.mark.parametrize("T", [10_000, 1_000_000, (1 << 20) + 1])
def test_blt_error_is_within_2_percent_of_the_sqrt_factorisation_and_above_the_lower_bound(T):
    """Issue target 1.1×; measured ≤ 1.02× — also at the service's 2²⁰ + 1 steps, just past a
    tabulated horizon (picking the next larger table entry there gave 1.043×)."""
    th, w = blt_parameters(T)
    blt = blt_sensitivity(th, w) * blt_max_error(th, w, T)
    sqrt = sqrt_toeplitz_norm(T) ** 2
    assert counting_lower_bound(T) <= blt <= 1.02 * sqrt
    assert counting_lower_bound(T) <= sqrt


def test_table_is_what_the_fit_produces():
    """The shipped parameters are at least as good as a fresh fit (small horizons)."""
    for k in (4, 6):
        th, w = fit_blt(1 << k)
        t_th, t_w = blt_parameters(1 << k)
        fresh = blt_sensitivity(th, w) * blt_max_error(th, w, 1 << k)
        table = blt_sensitivity(t_th, t_w) * blt_max_error(t_th, t_w, 1 << k)
        assert table <= fresh * (1 + 1e-3)


def make_agg(T=40, seed=1, label=("b", "blt", 0)):
    th, w = blt_parameters(T)
    return BLTAggregator(
        3, T, th, w, SymmetricGaussianNoise(3, 1.0), NoiseSource(seed=seed), label, row_norm_sq=2.0
    )


def feed(agg, rng, steps):
    out = []
    for _ in range(steps):
        k = rng.integers(0, 3)
        agg.insert_many(rng.uniform(-0.5, 0.5, (k, 3)))
        out.append(agg.release())
    return np.array(out)


def test_releases_are_prefix_sums_plus_A_Cinv_z_from_the_key():
    agg = make_agg()
    R = feed(agg, np.random.default_rng(0), 25)
    Z = agg.replay_noise()
    steps = Z.shape[0]
    th, w = blt_parameters(40)
    B = np.tril(np.ones((steps, steps))) @ toeplitz(blt_coefficients(*blt_inverse(th, w), steps))
    noise = B @ Z  # the release noise at each new step (steps without new rows repeat it)
    assert np.allclose(agg.noise_sum(), noise[-1], atol=1e-12)
    assert np.allclose(R[-1] - agg.exact_sum(), noise[-1], atol=1e-12)
    assert agg.draws == {"node": steps, "pad": 0}
    # the same key gives the same releases; another key different ones
    assert np.array_equal(feed(make_agg(), np.random.default_rng(0), 25), R)
    assert not np.allclose(feed(make_agg(seed=2), np.random.default_rng(0), 25), R)


def test_snapshot_restore_continues_identically_and_never_redraws():
    rng = np.random.default_rng(3)
    full = make_agg()
    part = feed(full, rng, 10)
    snap = loads(dumps(full.state_dict()))
    tail_full = feed(full, np.random.default_rng(4), 12)
    restored = make_agg().load_state_dict(snap)
    assert np.array_equal(restored.release(), part[-1])  # no new rows: no new step, no draw
    assert restored.draws == snap["draws"]
    assert np.array_equal(feed(restored, np.random.default_rng(4), 12), tail_full)
    with pytest.raises(ValueError, match="buffer shape"):
        make_agg().load_state_dict({**snap, "S": snap["S"][:2]})


def test_memory_is_buffers_times_d_squared_whatever_the_horizon():
    small, large = make_agg(T=10), make_agg(T=10**9)
    feed(small, np.random.default_rng(0), 5)
    feed(large, np.random.default_rng(0), 5)
    P = 3 * 4 // 2
    assert small.nbytes == large.nbytes == 8 * P * (len(blt_parameters(10)[0]) + 2)


def test_aggregator_freezes_after_its_horizon():
    agg = make_agg(T=3)
    feed(agg, np.random.default_rng(0), 5)
    assert agg.steps == 3 and agg.full
    assert agg.insert_many(np.zeros((2, 3))) == 0


@pytest.mark.parametrize("T", [1 << 14, 1 << 20])
def test_calibration_certified_and_ledgered(T):
    from streaming_dpbandit.privacy.gaussian import gaussian_delta

    g = calibrate_gram_release(5, 1.0, 1e-6, T, tree_impl="blt")
    sq = calibrate_gram_release(5, 1.0, 1e-6, T, tree_impl="sqrt_toeplitz")
    tree = calibrate_gram_release(5, 1.0, 1e-6, T)
    th, w = g.per_node["theta"], g.per_node["omega"]
    sens = g.L_tilde**2 * blt_sensitivity(th, w)  # the all-horizon bound
    (acc,) = g.accounting
    assert acc["sensitivity"] == pytest.approx(sens) and acc["count"] == 1
    sigma = g.noise_law["sigma"]
    assert gaussian_delta(sigma, 1.0, sens) <= 1e-6 < gaussian_delta(0.99 * sigma, 1.0, sens)
    assert g.entry_std == pytest.approx(sigma * blt_max_error(th, w, T))
    assert g.entry_std <= 1.1 * sq.entry_std and g.entry_std < tree.entry_std / 2
    assert g.tree_impl == "blt" and g.noise_law["factorisation"] == "blt"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"noise": "wishart"}, "Gaussian-only"),
        ({"calibration": "paper"}, "certified and zcdp"),
        ({"horizon_mode": "doubling", "n0": 1024}, "fixed horizon"),
    ],
)
def test_invalid_blt_combinations_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        calibrate_gram_release(5, 1.0, 0.1, 1 << 16, tree_impl="blt", **kwargs)


def test_policy_runs_restores_identically_and_ledgers_blt():
    from dpbandit_testing.dp_linucb_helpers import fixed_stream, make, run

    stream = fixed_stream(1500, seed=2)
    full, r_full = make(tree_impl="blt"), []
    run(full, stream, 1500, r_full)
    assert r_full[0].mechanism == "blt/GAUSS"
    assert r_full[0].params["per_node"]["buffers"] == 5
    first, r = make(tree_impl="blt"), []
    run(first, stream, 700, r)
    restored = make(tree_impl="blt").load_state_dict(loads(dumps(first.state_dict())))
    run(restored, stream, 1500, r)
    assert [x.content_digest() for x in r] == [x.content_digest() for x in r_full]
    assert dumps(restored.state_dict()) == dumps(full.state_dict())
    assert isinstance(full._agg.aggregator, BLTAggregator)
    assert DPLinUCB(d=2, epsilon=1.0, delta=0.1, n_cap=64, tree_impl="blt").n_steps is None


def test_blt_is_auto_on_the_fast_backend_and_snapshots_record_the_mechanism():
    from dpbandit_testing.dp_linucb_helpers import fixed_stream, run

    # the default (secure) backend's "auto" is the binary tree (exact BLT is O(steps) per step)
    assert DPLinUCB(d=4).resolved_tree_impl() == "binary"
    default = DPLinUCB(
        d=4, epsilon=1.0, delta=0.1, n_cap=1 << 14, batch_size=32, seed=11, noise_backend="fast"
    )
    assert default.tree_impl == "auto" and default.resolved_tree_impl() == "blt"
    for other in ({"noise": "wishart"}, {"calibration": "paper"}, {"horizon_mode": "doubling"}):
        assert DPLinUCB(d=4, **other).resolved_tree_impl() == "binary", other
    run(default, fixed_stream(200, seed=4), 200, [])
    state = default.state_dict()
    assert state["tree_impl"] == "blt" and state["params"]["tree_impl"] == "auto"
    assert isinstance(default._agg.aggregator, BLTAggregator)


def test_a_snapshot_of_the_old_default_tree_restores_as_the_tree():
    """A snapshot written when the binary tree was the default (no top-level ``tree_impl``;
    its parameters say ``binary``) restores into a default-configured policy as the tree and
    continues exactly as the uninterrupted tree run."""
    from dpbandit_testing.dp_linucb_helpers import fixed_stream, make, run

    stream = fixed_stream(1200, seed=5)
    full, r_full = make(tree_impl="binary"), []
    run(full, stream, 1200, r_full)
    first, r = make(tree_impl="binary"), []
    run(first, stream, 500, r)
    old = loads(dumps(first.state_dict()))
    del old["tree_impl"]  # the format before the "auto" default
    restored = make(tree_impl="auto").load_state_dict(old)
    assert restored.resolved_tree_impl() == "binary"
    run(restored, stream, 1200, r)
    assert [x.content_digest() for x in r] == [x.content_digest() for x in r_full]
    assert isinstance(restored._agg.aggregator, PaddedTree)
    # a policy configured explicitly with another mechanism refuses the snapshot
    with pytest.raises(ValueError, match="tree_impl='binary'"):
        make(tree_impl="blt").load_state_dict(old)
    # and a BLT snapshot never restores into a tree
    blt = make(tree_impl="auto")
    run(blt, stream, 300, [])
    with pytest.raises(ValueError, match="tree_impl='blt'"):
        make(tree_impl="binary").load_state_dict(loads(dumps(blt.state_dict())))
