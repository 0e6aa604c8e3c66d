"""Matroid layer (DP-matroid spec §4, §12): axioms by property tests for every matroid type,
oracles against brute force, rank and loops, the greedy against enumeration of all bases,
+∞ first and uniform ties, float vs exact linear arithmetic."""

from itertools import chain, combinations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scipy import stats

from streaming_dpbandit.matroids import (
    GraphicMatroid,
    LinearMatroid,
    PartitionMatroid,
    UniformMatroid,
    all_bases,
    from_description,
    greedy_basis,
    greedy_many,
)

SYNTHETIC = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1], [2, 0, 0], [0, 0, 0]]


# -- strategies -------------------------------------------------------------------------------
@st.composite
def uniform_matroids(draw):
    L = draw(st.integers(1, 7))
    return UniformMatroid(L, draw(st.integers(1, L + 2)))


@st.composite
def partition_matroids(draw):
    L = draw(st.integers(1, 7))
    J = draw(st.integers(1, 4))
    cats = draw(st.lists(st.integers(0, J - 1), min_size=L, max_size=L))
    caps = draw(st.lists(st.integers(0, 3), min_size=J, max_size=J))
    assume(sum(min(c, cats.count(j)) for j, c in enumerate(caps)) > 0)
    return PartitionMatroid(cats, caps)


@st.composite
def graphic_matroids(draw):
    V = draw(st.integers(1, 5))
    edges = draw(
        st.lists(st.tuples(st.integers(0, V - 1), st.integers(0, V - 1)), min_size=1, max_size=7)
    )
    assume(any(u != v for u, v in edges))
    return GraphicMatroid(edges, n_vertices=V)


@st.composite
def linear_matroids(draw, exact=None):
    d = draw(st.integers(1, 4))
    L = draw(st.integers(1, 7))
    vecs = draw(
        st.lists(st.lists(st.integers(-2, 2), min_size=d, max_size=d), min_size=L, max_size=L)
    )
    assume(any(any(v) for v in vecs))
    return LinearMatroid(vecs, exact=draw(st.booleans()) if exact is None else exact)


ANY = st.one_of(uniform_matroids(), partition_matroids(), graphic_matroids(), linear_matroids())


# -- brute-force oracles ----------------------------------------------------------------------
def subsets(n):
    return chain.from_iterable(combinations(range(n), k) for k in range(n + 1))


def brute_independent(m, S) -> bool:
    S = list(S)
    if isinstance(m, UniformMatroid):
        return len(S) <= m.k
    if isinstance(m, PartitionMatroid):
        counts = np.bincount(m.categories[S], minlength=m.capacities.size) if S else 0
        return bool(np.all(counts <= m.capacities))
    if isinstance(m, GraphicMatroid):  # a forest has |V(S)| − |components| = |S| edges
        parent = list(range(m.n_vertices))

        def find(v):
            while parent[v] != v:
                v = parent[v]
            return v

        for e in S:
            u, v = m.edges[e]
            ru, rv = find(u), find(v)
            if ru == rv:
                return False
            parent[ru] = rv
        return True
    V = m.vectors[S]
    return len(S) == 0 or int(np.linalg.matrix_rank(V)) == len(S)


# -- axioms -----------------------------------------------------------------------------------
@given(ANY)
def test_matroid_axioms_hold(m):
    L = m.n_items
    indep = {S for S in subsets(L) if m.is_independent(S)}
    assert () in indep  # (I1) the empty set
    for S in indep:  # (I2) closed under subsets
        for x in S:
            assert tuple(e for e in S if e != x) in indep
    by_size = sorted(indep, key=len)
    for A in by_size:  # (I3) augmentation
        for B in by_size:
            if len(A) < len(B):
                assert any(tuple(sorted((*A, x))) in indep for x in set(B) - set(A)), (A, B)
    assert m.rank == max(len(S) for S in indep)
    assert m.loops == frozenset(e for e in range(L) if (e,) not in indep)


@given(ANY, st.randoms(use_true_random=False))
def test_oracle_and_builder_agree_with_brute_force(m, rnd):
    L = m.n_items
    for S in subsets(L):
        assert m.is_independent(S) == brute_independent(m, S), S
    order = list(range(L))
    rnd.shuffle(order)
    b, cur = m.builder(), []
    for e in order:
        ok = b.can_add(e)
        assert ok == brute_independent(m, [*cur, e])
        if ok:
            b.add(e)
            cur.append(e)
            assert b.size == len(cur)


@given(ANY)
def test_description_round_trip(m):
    m2 = from_description(m.describe())
    assert type(m2) is type(m) and m2.rank == m.rank and m2.loops == m.loops
    assert all(m2.is_independent(S) == m.is_independent(S) for S in subsets(min(m.n_items, 5)))


# -- construction -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: UniformMatroid(5, 0), "k must be >= 1"),
        (lambda: PartitionMatroid([0, 0, 1], [0, 0]), "rank K = 0"),
        (lambda: PartitionMatroid([0, 2], [1, 1]), "category"),
        (lambda: PartitionMatroid([0, 1], [1, -1]), "capacities"),
        (lambda: GraphicMatroid([(0, 0), (1, 1)]), "rank K = 0"),
        (lambda: GraphicMatroid([(0, 1)], n_vertices=1), "n_vertices"),
        (lambda: LinearMatroid([[0.0, 0.0]]), "rank K = 0"),
        (lambda: LinearMatroid([[1.0, np.nan]]), "finite"),
        (lambda: UniformMatroid(5, 2, expected_rank=3), "not the expected 3"),
        (lambda: from_description({"type": "hexagonal"}), "unknown matroid type"),
    ],
)
def test_invalid_descriptions_are_rejected(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_partition_rank_counts_small_categories():
    m = PartitionMatroid([0, 1, 1, 1, 2], [3, 2, 0])
    assert m.rank == 1 + 2 and m.loops == {4}  # min(3, 1) + min(2, 3), not 3 + 2


def test_graphic_rank_is_vertices_minus_components():
    m = GraphicMatroid([(0, 1), (1, 2), (0, 2), (3, 4), (5, 5)], n_vertices=7)
    assert m.rank == 7 - 4 and m.loops == {4}  # components {0,1,2}, {3,4}, {5}, {6}


def test_linear_field_is_the_reals_not_gf2():
    m = LinearMatroid([[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    assert m.rank == 3 and m.is_independent([0, 1, 2])  # determinant 2, dependent over GF(2)
    assert LinearMatroid([[1, 1, 0], [0, 1, 1], [1, 0, 1]], exact=True).is_independent([0, 1, 2])


def test_synthetic_instance_facts():
    """Spec §11.6: K = 3, L = 7, e7 is a loop, e6 ∥ e1, 13 bases (float and exact agree)."""
    for exact in (False, True):
        m = LinearMatroid(SYNTHETIC, exact=exact)
        assert (m.n_items, m.rank, m.loops) == (7, 3, frozenset({6}))
        assert not m.is_independent([0, 5])
        assert len(all_bases(m)) == 13
    f, x = LinearMatroid(SYNTHETIC), LinearMatroid(SYNTHETIC, exact=True)
    assert all(f.is_independent(S) == x.is_independent(S) for S in subsets(7))


@given(st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**32 - 1))
def test_float_and_exact_linear_agree_on_random_01_instances(d, L, seed):
    V = np.random.default_rng(seed).integers(0, 2, size=(L, d))
    assume(V.any())
    f, x = LinearMatroid(V), LinearMatroid(V, exact=True)
    assert f.rank == x.rank and f.loops == x.loops
    for S in subsets(L):
        assert f.is_independent(S) == x.is_independent(S), S


def test_float_linear_is_robust_to_scale_and_near_dependence():
    rng = np.random.default_rng(3)
    U = rng.normal(size=(6, 40))
    V = np.vstack([U, 1e-7 * (U[0] + U[1]), 1e6 * U[2] - 1e6 * U[3]])  # two dependent rows
    m = LinearMatroid(V)
    assert m.rank == 6 and not m.is_independent([0, 1, 6]) and not m.is_independent([2, 3, 7])
    assert m.is_independent([0, 6]) and m.is_independent([2, 7])


# -- the greedy -------------------------------------------------------------------------------
KEY_VALUES = st.sampled_from([-2.0, -0.5, 0.0, 0.25, 0.25, 1.0, 3.0, np.inf])


def best_value(m, key):
    """Max over bases of (number of +∞ keys, sum of finite keys): +∞ items go first."""
    best = None
    for B in all_bases(m):
        k = key[list(B)]
        v = (int(np.isinf(k).sum()), float(k[np.isfinite(k)].sum()))
        best = v if best is None or v > best else best
    return best


@given(ANY, st.data())
def test_greedy_returns_a_maximum_key_basis(m, data):
    key = np.array(data.draw(st.lists(KEY_VALUES, min_size=m.n_items, max_size=m.n_items)))
    seed = data.draw(st.integers(0, 2**32 - 1))
    A = greedy_basis(m, key, np.random.default_rng(seed))
    assert m.is_basis(A)
    k = key[A]
    assert np.all(k[:-1] >= k[1:])  # acceptance order is by key, descending
    got = (int(np.isinf(k).sum()), float(k[np.isfinite(k)].sum()))
    want = best_value(m, key)
    assert got[0] == want[0] and got[1] == pytest.approx(want[1], abs=1e-12)
    batch = greedy_many(m, np.vstack([key, key]), lambda r: np.random.default_rng([seed, r]))
    for row in batch:
        kk = key[row]
        assert m.is_basis(row) and np.all(kk[:-1] >= kk[1:])
        assert (int(np.isinf(kk).sum()), pytest.approx(float(kk[np.isfinite(kk)].sum()))) == (
            want[0],
            want[1],
        )


@pytest.mark.parametrize(
    "m",
    [
        UniformMatroid(50, 7),
        UniformMatroid(400, 7),  # above _TWO_KTH_MAX_L: the other selection path
        UniformMatroid(9, 9),
        PartitionMatroid(np.arange(60) % 6, [2, 1, 0, 3, 1, 5]),
        PartitionMatroid(np.r_[np.zeros(3, int), np.ones(20, int), 2 * np.ones(7, int)], [5, 2, 1]),
        PartitionMatroid(np.arange(40) // 10, [1, 1, 1, 1]),
        PartitionMatroid(np.arange(60) % 6, [1] * 6),
        PartitionMatroid(np.r_[np.zeros(3, int), np.ones(20, int), 2 * np.ones(7, int)], [1, 1, 1]),
        PartitionMatroid(np.arange(12) // 4, [2, 0, 1]),
    ],
    ids=[
        "uniform",
        "uniform-large",
        "uniform-full",
        "partition",
        "partition-uneven",
        "partition-contiguous",
        "partition-one-each",
        "partition-one-each-uneven",
        "partition-with-loops",
    ],
)
def test_fast_paths_equal_the_reference_scan(m):
    """Untied rows: the vectorised path returns the reference's slate; tied rows go to it."""
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(300, m.n_items))
    keys[:100, rng.integers(0, m.n_items, 100)] = np.inf  # +∞ keys (never played)
    keys[100:150] = np.round(keys[100:150])  # many ties
    keys[150:160, rng.integers(0, m.n_items, 10)] = -np.inf
    slates, slow = m.greedy_fast(keys)
    assert slow[100:150].any() and not slow[200:].any()
    for r in np.flatnonzero(~slow):
        ref = greedy_basis(m, keys[r], np.random.default_rng(r))
        assert slates[r].tolist() == ref.tolist()
    batch = greedy_many(m, keys, lambda r: np.random.default_rng(r))
    for r in range(300):
        ref = greedy_basis(m, keys[r], np.random.default_rng(r))
        assert batch[r].tolist() == ref.tolist()
    # with_keys: the same slates, and each slate's keys in slate order (tied rows included);
    # fresh_order (the argsort path for Thompson keys) changes the method, never the slates
    for fresh in (False, True):
        again, served = greedy_many(
            m, keys, lambda r: np.random.default_rng(r), with_keys=True, fresh_order=fresh
        )
        assert np.array_equal(again, batch)
        assert np.array_equal(served, np.take_along_axis(keys, batch, axis=1))
        slates_f, slow_f, _ = m.greedy_fast_sorted(keys, fresh_order=fresh)
        assert np.array_equal(slow_f, slow)
        assert np.array_equal(slates_f[~slow], slates[~slow])


@pytest.mark.parametrize(
    "m",
    [
        UniformMatroid(4, 2),
        LinearMatroid(SYNTHETIC),
        PartitionMatroid(np.arange(6) % 3, [1, 1, 1]),  # the capacity-1 fast path
        PartitionMatroid(np.arange(6) % 2, [2, 1]),
    ],
)
def test_nan_key_raises(m):
    key = np.zeros(m.n_items)
    key[1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        greedy_basis(m, key, np.random.default_rng(0))
    with pytest.raises(ValueError, match="NaN"):
        greedy_many(m, key[None, :], lambda r: np.random.default_rng(r))
    with pytest.raises(ValueError, match="NaN"):
        greedy_many(m, key[None, :], lambda r: np.random.default_rng(r), fresh_order=True)


def test_infinite_keys_rank_first_and_ties_are_uniform():
    """+∞ before every finite key; ties uniform (χ² on a fixed seed)."""
    m = UniformMatroid(5, 2)
    key = np.array([np.inf, 5.0, np.inf, np.inf, 100.0])
    rng = np.random.default_rng(11)
    counts = np.zeros(5)
    for _ in range(3000):
        A = greedy_basis(m, key, rng)
        assert np.isinf(key[A]).all()
        counts[A] += 1
    assert counts[1] == counts[4] == 0
    assert stats.chisquare(counts[[0, 2, 3]]).pvalue > 1e-3
    # finite ties on a linear matroid: e1 and e6 are parallel, equal keys → each half the time
    lin = LinearMatroid(SYNTHETIC)
    key = np.array([1.0, 0.9, 0.8, 0.0, 0.0, 1.0, 5.0])
    first = [int(greedy_basis(lin, key, rng)[0]) for _ in range(2000)]
    assert stats.binomtest(first.count(0), 2000, 0.5).pvalue > 1e-3
    assert set(first) == {0, 5}
