"""The PLD ε of a ledger whose slices need no convolution is computed without dp-accounting
(``accountant._epsilon_without_convolution``): it must be dp-accounting's value to the last
bit, of the same type, or None (then the library is asked)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming_dpbandit.privacy.accountant import Accountant, _epsilon_without_convolution
from streaming_dpbandit.privacy.ledger import ReleaseRecord

EPSILONS = st.one_of(
    st.floats(1e-4, 30.0),
    st.sampled_from([0.001, 0.05, 0.1, 0.37, 0.5, 1, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0]),
    st.integers(1, 300).map(lambda k: k * 0.05),
)
DELTAS = st.one_of(
    st.floats(1e-12, 0.5),
    st.sampled_from([1e-6, 1e-5, 0.01, 0.1]),
    st.floats(-12, -0.3).map(lambda x: 10.0**x),
)


def record(k: int, components: list[dict]) -> ReleaseRecord:
    eps = sum(c.get("epsilon", 0.0) for c in components)
    delta = sum(c.get("delta", 0.0) for c in components)
    return ReleaseRecord(f"b/fit/{k}", "b", "n-iht+peeling", "certified", "certified-v1", True,
                         epsilon=eps, delta=delta, accounting=components,
                         data_slice=f"episode:{k}", composition="parallel")  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(EPSILONS, DELTAS, st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_one_eps_delta_component_gives_the_library_value_to_the_last_bit(
    eps, delta, zeros_before, zeros_after, split
):
    zero = [{"type": "zero"}]
    comps = [{"type": "eps_delta", "epsilon": eps, "delta": delta}]
    if split:  # the zero components in records of their own
        recs = [record(i, zero) for i in range(zeros_before)]
        recs += [record(9, comps)] + [record(10 + i, zero) for i in range(zeros_after)]
    else:
        recs = [record(1, zero * zeros_before + comps + zero * zeros_after)]
    fast = _epsilon_without_convolution(recs, delta)
    assert fast is not None  # (the case the shortcut exists for)
    lib = Accountant._pld(recs).get_epsilon_for_delta(delta)
    assert type(fast) is type(lib) and fast == lib


@settings(max_examples=100, deadline=None)
@given(EPSILONS, DELTAS, st.floats(1e-9, 0.5), st.integers(0, 2))
def test_anything_else_is_left_to_the_library(eps, delta, target, zeros):
    one = {"type": "eps_delta", "epsilon": eps, "delta": delta}
    cases = [
        [one, one],  # a composition
        [{**one, "count": 2}],
        [{"type": "laplace", "sensitivity": 1.0, "scale": 1.0 / eps}],
        [{"type": "pure", "epsilon": eps}],
    ]
    if target != delta:
        cases.append([one])  # another δ: the library's search
    for comps in cases:
        recs = [record(1, [{"type": "zero"}] * zeros + comps)]
        assert _epsilon_without_convolution(recs, target) is None


def test_no_component_is_the_identity():
    for recs in ([], [record(1, [{"type": "zero"}])], [record(1, [{"type": "zero"}] * 3)]):
        fast = _epsilon_without_convolution(recs, 0.01)
        lib = Accountant._pld(recs).get_epsilon_for_delta(0.01)
        assert fast == lib == 0 and type(fast) is type(lib)
