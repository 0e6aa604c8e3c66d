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
