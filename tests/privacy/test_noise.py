import numpy as np
import pytest

from streaming_dpbandit.privacy.noise import NoiseSource


def test_streams_are_deterministic_per_label_and_distinct_across_labels():
    a = NoiseSource(seed=7)
    b = NoiseSource(seed=7)
    x1 = a.generator("fit", 1).laplace(size=50)
    assert np.array_equal(x1, b.generator("fit", 1).laplace(size=50))
    x2 = a.generator("fit", 2).laplace(size=50)
    x3 = a.generator("fit", 1, "iter", 0).laplace(size=50)
    assert not np.array_equal(x1, x2) and not np.array_equal(x1, x3)


def test_a_stream_cannot_be_issued_twice():
    src = NoiseSource(seed=1)
    src.generator("b", "fit", 3)
    with pytest.raises(RuntimeError, match="already issued"):
        src.generator("b", "fit", 3)


def test_default_key_comes_from_os_entropy():
    a, b = NoiseSource(), NoiseSource()
    assert not np.array_equal(a.generator("x").normal(size=8), b.generator("x").normal(size=8))


def test_key_never_in_repr_and_state_round_trip():
    src = NoiseSource(seed=123456789)
    assert "123456789" not in repr(src) and "secret" in repr(src)
    src.generator("used")
    state = src.state_dict()
    clone = NoiseSource().load_state_dict(state)
    with pytest.raises(RuntimeError):
        clone.generator("used")  # the issued set survives a restore
    assert np.array_equal(
        clone.generator("fresh").normal(size=4),
        NoiseSource(seed=123456789).generator("fresh").normal(size=4),
    )


@pytest.mark.parametrize("label", [-1, 1.5, True, None])
def test_bad_labels(label):
    with pytest.raises((TypeError, ValueError)):
        NoiseSource(seed=1).generator(label)


def test_label_encoding_is_injective_across_types_and_splits():
    """("ab",) vs ("a", "b"), 1 vs "1", 256 vs (1, 0): distinct label tuples, distinct streams."""
    src = NoiseSource(seed=5)
    cases = [("ab",), ("a", "b"), (1,), ("1",), (256,), (1, 0), (0,), ("",), ("", "")]
    draws = [src.generator(*c).integers(0, 2**63, size=4).tolist() for c in cases]
    assert len({tuple(x) for x in draws}) == len(cases)


def test_streams_are_independent_and_standard_normal():
    """Per-label streams are keyed-hash seeded: the first draws of 4,000 consecutive labels are
    i.i.d. N(0, 1) (mean, variance and lag-1 correlation within 4 standard errors)."""
    src = NoiseSource(seed=11)
    z = np.array([src.generator("node", i, track=False).standard_normal() for i in range(4000)])
    se = 1 / np.sqrt(z.size)
    assert abs(z.mean()) < 4 * se
    assert abs(z.var() - 1.0) < 4 * np.sqrt(2.0) * se
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 4 * se


def test_keyed_seed_extends_for_bit_generators_that_want_more_words():
    from streaming_dpbandit.privacy.noise import _KeyedSeed

    seed = _KeyedSeed(b"k" * 16, b"labels")
    w8 = seed.generate_state(8, np.uint64)  # 64 bytes: two hash blocks
    w4 = seed.generate_state(4, np.uint64)
    assert w8.dtype == np.uint64 and w8.shape == (8,)
    assert np.array_equal(w8[:4], w4) and len(set(w8.tolist())) == 8
    assert np.array_equal(seed.generate_state(2, np.uint32), w4[:1].view(np.uint32))
    with pytest.raises(ValueError):
        seed.generate_state(2, np.float64)
    # any numpy bit generator accepts it
    for bg in (np.random.PCG64, np.random.SFC64, np.random.Philox, np.random.MT19937):
        assert np.isfinite(np.random.Generator(bg(seed)).standard_normal())


def test_different_master_keys_give_different_streams():
    a = NoiseSource(seed=1).generator("x").standard_normal(4)
    b = NoiseSource(seed=2).generator("x").standard_normal(4)
    c = NoiseSource(seed=2**200).generator("x").standard_normal(4)  # keys over 64 bytes hash
    assert not np.array_equal(a, b) and not np.array_equal(b, c)
