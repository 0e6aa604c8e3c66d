import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from streaming_dpbandit.privacy.clipping import clip_coordinates, clip_norm, clip_scalar

finite = st.floats(-1e6, 1e6)


@given(arrays(np.float64, (5, 7), elements=finite), st.floats(1e-3, 1e3))
def test_coordinate_clip_bounds_and_count(x, b):
    out, n = clip_coordinates(x, b)
    assert np.all(np.abs(out) <= b)
    assert n == int(np.count_nonzero(np.abs(x) > b))
    inside = np.abs(x) <= b
    np.testing.assert_array_equal(out[inside], x[inside])


@given(arrays(np.float64, 9, elements=finite), st.floats(1e-3, 1e3))
def test_scalar_clip_is_min_max(y, R):
    out, _ = clip_scalar(y, R)
    np.testing.assert_array_equal(out, np.minimum(R, np.maximum(-R, y)))


def test_scalar_clip_is_safe_at_zero():
    out, n = clip_scalar([0.0, -0.0], 1.0)
    assert out.tolist() == [0.0, 0.0] and n == 0


@given(
    arrays(np.float64, (4, 6), elements=finite),
    st.floats(1e-3, 1e3),
    st.sampled_from([1, 2, np.inf]),
)
def test_norm_clip(x, b, order):
    out, n = clip_norm(x, b, ord=order)
    norms = np.linalg.norm(out, ord=order, axis=1)
    assert np.all(norms <= b * (1 + 1e-12))
    small = np.linalg.norm(x, ord=order, axis=1) <= b
    np.testing.assert_allclose(out[small], x[small])
    assert n == int((~small).sum())


@pytest.mark.parametrize("fn", [clip_coordinates, clip_scalar, clip_norm])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_is_rejected_not_clipped(fn, bad):
    with pytest.raises(ValueError, match="NaN or infinite"):
        fn(np.array([[1.0, bad]]), 1.0)
