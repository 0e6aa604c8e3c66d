import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming_dpbandit.estimators.episodes import DoublingSchedule


def test_paper_schedule():
    sch = DoublingSchedule()
    for k in range(30):
        assert sch.start(k) == 2**k and sch.length(k) == 2**k and sch.end(k) == 2 ** (k + 1) - 1
    for k in range(1, 30):
        assert sch.fit_size(k) == 2 ** (k - 1)


@given(st.integers(1, 1000), st.integers(1, 10**12))
def test_episode_of_is_the_inverse_of_start(n0, t):
    sch = DoublingSchedule(first_len=n0)
    k = sch.episode_of(t)
    assert sch.start(k) <= t <= sch.end(k)
    assert sch.length(k) == (n0 if k == 0 else n0 * 2**k)


@given(st.integers(1, 50), st.integers(1, 400), st.integers(1, 5000))
def test_capped_schedule(n0, extra, t):
    cap = n0 + extra
    sch = DoublingSchedule(first_len=n0, max_len=cap)
    k = sch.episode_of(t)
    assert sch.start(k) <= t <= sch.end(k)
    assert sch.length(k) <= cap


def test_vectorised_matches_scalar_and_uses_integer_arithmetic():
    sch = DoublingSchedule(first_len=3)
    t = np.arange(1, 5000)
    assert sch.episode_of(t).tolist() == [sch.episode_of(int(x)) for x in t]
    big = DoublingSchedule()
    assert big.episode_of(2**52) == 52 and big.episode_of(2**52 - 1) == 51


@pytest.mark.parametrize(
    "kw", [dict(first_len=0), dict(first_len=2.5), dict(first_len=4, max_len=2)]
)
def test_invalid(kw):
    with pytest.raises(ValueError):
        DoublingSchedule(**kw).start(1)
