"""The lock-step E1 engine computes what the reference path computes.

The reference path (``runner.run_repetition``) steps the product's policy objects one round at a
time. Handing those objects the lock-step engine's report noise (:class:`ReplicaNoise`, a
stand-in for their generator) must make both paths choose the same arm in every round, so the
per-round regret curves are identical, for every method, ε and profile of E1.
"""

import functools
import json
import subprocess
import sys

import numpy as np
import pytest

from streaming_dpbandit.envs.ldp_glb import LDPMultiParamEnv, LDPSingleParamEnv
from streaming_dpbandit.experiments import _ldp_kernels, ldp_lockstep, runner
from streaming_dpbandit.experiments.ldp_glb import cell_specs
from streaming_dpbandit.experiments.ldp_lockstep import ReplicaNoise, run_lockstep, supports

E1 = functools.partial(LDPSingleParamEnv, 2, 10)


def _cells(T):
    return {
        "E1 authors_code": cell_specs("E1", "authors_code", T),
        "E1 paper": cell_specs("E1", "paper", T, baselines=False),
    }


def _reference(cells, seeds, T, monkeypatch):
    """The reference path, with each policy drawing its report noise from ReplicaNoise."""
    build = runner.build_policy

    def with_replica_noise(spec, seed):
        pol = build(spec, seed)
        pol._state()
        pol._noise = ReplicaNoise(seed, pol.name)
        return pol

    monkeypatch.setattr(runner, "build_policy", with_replica_noise)
    grid = np.arange(1, T + 1)
    return {
        (cell, rep): runner.run_repetition(E1(rep), specs, rep, 0, grid)
        for cell, specs in cells.items()
        for rep in range(seeds)
    }


def test_lockstep_chooses_the_reference_arm_in_every_round(monkeypatch):
    T, seeds = 3000, 2
    cells = _cells(T)
    fast = run_lockstep(E1, cells, seeds, 0, np.arange(1, T + 1))
    ref = _reference(cells, seeds, T, monkeypatch)
    compared = 0
    for (cell, rep), out in ref.items():
        for spec in cells[cell]:
            a = out[spec.key]["curve"]
            b = fast[cell].curves[spec.key][rep]
            # cumulative regret after every round: equal ⇔ the same arm in every round
            diff = np.flatnonzero(a != b)
            assert diff.size == 0, f"{cell} {spec.key} seed {rep}: first differs at t={diff[0] + 1}"
            assert out[spec.key]["final"] == fast[cell].finals[spec.key][rep]
            compared += 1
    assert compared == 2 * 12  # 2 seeds × (4 methods × 2 ε authors + 2 methods × 2 ε paper)
    # repetition 0's counters and release records are the reference path's
    out0 = ref[("E1 paper", 0)]
    for spec in cells["E1 paper"]:
        assert fast["E1 paper"].counters[spec.key] == out0[spec.key]["counters"]

        def untimed(recs):  # the wall-clock time of a record differs, of course
            return [{k: v for k, v in r.items() if k != "time"} for r in recs]

        got = untimed(r.to_dict() for r in fast["E1 paper"].records[spec.key])
        assert got == untimed(out0[spec.key]["records"]) and len(got) == 1


def test_the_regret_is_not_trivially_equal():
    """The comparison above can fail: methods, ε and seeds give different curves."""
    T = 500
    fast = run_lockstep(E1, _cells(T), 2, 0, np.arange(1, T + 1))
    res = fast["E1 authors_code"]
    finals = {k: tuple(v) for k, v in res.finals.items()}
    assert len(set(finals.values())) == len(finals)  # every method × ε differs
    assert all(a != b for a, b in finals.values())  # and every seed
    assert all(f > 0 for v in finals.values() for f in v)


@pytest.mark.parametrize(
    "kernels",
    [
        False,
        pytest.param(True, marks=pytest.mark.skipif(not _ldp_kernels.AVAILABLE, reason="numba")),
    ],
)
def test_lockstep_splits_seeds_across_processes_without_changing_results(kernels):
    """Two processes: the numpy path splits the methods, the compiled path the seeds."""
    T, seeds = 1500, 3
    grid = np.arange(100, T + 1, 100)
    one = run_lockstep(E1, _cells(T), seeds, 5, grid, jobs=1, kernels=kernels)
    two = run_lockstep(E1, _cells(T), seeds, 5, grid, jobs=2, kernels=kernels)
    for cell in one:
        for key in one[cell].finals:
            assert np.array_equal(one[cell].curves[key], two[cell].curves[key])
            assert np.array_equal(one[cell].finals[key], two[cell].finals[key])


def test_lockstep_refuses_what_it_does_not_implement():
    e2 = LDPMultiParamEnv(20, 3, "sphere", 0.05)
    assert supports(E1(0), cell_specs("E1", "paper", 100))
    assert not supports(e2, cell_specs("E2", "paper", 100))
    assert not supports(LDPSingleParamEnv(2, 10, 0, rewards="bernoulli"), _cells(100)["E1 paper"])
    with pytest.raises(ValueError, match="E1's single-parameter"):
        run_lockstep(
            functools.partial(LDPMultiParamEnv, 20, 3, "sphere", 0.05),
            {"E2 paper": cell_specs("E2", "paper", 100)},
            1,
            0,
            np.arange(1, 101),
        )


def test_replica_noise_streams_are_separate_and_seeded():
    a, b = ReplicaNoise(3, "ldp-glb"), ReplicaNoise(3, "ldp-glb")
    a.random((5, 2))  # uniforms do not shift the normals
    assert np.array_equal(a.standard_normal(4), b.standard_normal(4))
    assert np.array_equal(a.normal(0.0, 2.0, 3), 2.0 * b.standard_normal(3))
    c = ReplicaNoise(4, "ldp-glb")
    assert not np.array_equal(c.standard_normal(4), ReplicaNoise(3, "ldp-glb").standard_normal(4))


# -- the compiled kernels (experiments/_ldp_kernels.py) ------------------------------------------
needs_numba = pytest.mark.skipif(not _ldp_kernels.AVAILABLE, reason="numba is not installed")


def _results(out):
    """Everything a lock-step run returns, per cell and spec, minus the wall-clock times."""
    return {
        (cell, key): (
            res.curves[key],
            res.finals[key],
            res.counters[key],
            [{k: v for k, v in r.to_dict().items() if k != "time"} for r in res.records[key]],
        )
        for cell, res in out.items()
        for key in res.curves
    }


def _assert_identical(a, b):
    assert a.keys() == b.keys() and len(a) == 12
    for k in a:
        (ca, fa, na, ra), (cb, fb, nb, rb) = a[k], b[k]
        diff = np.argwhere(ca != cb)
        assert diff.size == 0, f"{k}: first differs at (seed, t) = {tuple(diff[0])}"
        assert np.array_equal(fa, fb) and na == nb and ra == rb, k


def _counting_chunks(monkeypatch):
    """Count the chunks that the compiled kernels ran (True) or left to numpy (False)."""
    seen = []
    run = ldp_lockstep._run_kernels

    def counted(*args):
        ok = run(*args)
        seen.append(ok)
        return ok

    monkeypatch.setattr(ldp_lockstep, "_run_kernels", counted)
    return seen


def _capturing_groups(monkeypatch):
    """Collect the method groups (replica arrays) of every run, in construction order."""
    made = []
    for cls in ldp_lockstep._GROUPS.values():

        def capture(self, *args, _init=cls.__init__):
            _init(self, *args)
            made.append(self)

        monkeypatch.setattr(cls, "__init__", capture)
    return made


@needs_numba
def test_compiled_kernels_are_bit_identical_to_the_numpy_path(monkeypatch):
    """Three chunks (T = 5,000), three seeds, every method, ε and profile of E1: the compiled
    path's regret after every round, counters and records equal the numpy path's, and so does
    every replica's final state (estimates, sums, inverses; equal arms alone would let
    rounding differences through)."""
    T, seeds = 5000, 3
    grid = np.arange(1, T + 1)
    seen = _counting_chunks(monkeypatch)
    groups = _capturing_groups(monkeypatch)
    fast = _results(run_lockstep(E1, _cells(T), seeds, 11, grid, kernels=True))
    assert seen == [True, True, True]  # the kernels, not the numpy path, ran every chunk
    slow = _results(run_lockstep(E1, _cells(T), seeds, 11, grid, kernels=False))
    assert seen == [True, True, True]
    _assert_identical(fast, slow)
    assert len(groups) == 8  # 4 method groups per run
    for a, b in zip(groups[:4], groups[4:]):
        assert type(a) is type(b) and len(a._STATE) >= 3
        for name in a._STATE:
            assert np.array_equal(getattr(a, name), getattr(b, name)), (type(a), name)
    # the index methods' constants (c_t, β_t), compiled from the product's code, over the
    # whole horizon of the spec's E1 (T = 10⁶): equal to the product's own evaluation
    index = [g for g in groups[:4] if isinstance(g, ldp_lockstep._IndexGroup)]
    assert len(index) == 2 and all(g._table is not None for g in index)
    assert all(g._table is None for g in groups[4:] if isinstance(g, ldp_lockstep._IndexGroup))
    for g in index:
        for key in g._keys:
            for t in (1, 4097, 10**6 - 500):
                want = np.array([g._pair(key, u) for u in range(t, t + 600)])
                assert np.array_equal(g._table(key, t, 600), want)
    # and the comparison can fail: another seed's run is not identical
    other = _results(run_lockstep(E1, _cells(T), seeds, 12, grid, kernels=True))
    with pytest.raises(AssertionError, match="first differs"):
        _assert_identical(fast, other)


@needs_numba
def test_a_chunk_the_kernels_leave_to_numpy_is_rerun_from_the_saved_state(monkeypatch):
    """When a kernel gives up half-way (here: LDP-OLS in the second chunk, after updating its
    state), that chunk is rerun on the numpy path from the state before it, for every group."""
    T, seeds = 5000, 2
    grid = np.arange(1, T + 1)
    calls = []
    kernel = ldp_lockstep._OLSGroup.kernel

    def gives_up_in_chunk_2(self, common, n):
        calls.append(n)
        code = kernel(self, common, n)
        return _ldp_kernels.BAIL if len(calls) == 2 else code

    monkeypatch.setattr(ldp_lockstep._OLSGroup, "kernel", gives_up_in_chunk_2)
    seen = _counting_chunks(monkeypatch)
    got = _results(run_lockstep(E1, _cells(T), seeds, 0, grid, kernels=True))
    assert seen == [True, False, True]
    want = _results(run_lockstep(E1, _cells(T), seeds, 0, grid, kernels=False))
    _assert_identical(got, want)


def test_without_numba_the_package_imports_and_runs_the_numpy_path():
    """numba is optional: hidden, the engine runs its numpy path with the same results."""
    T, seeds = 300, 2
    code = f"""
import sys
sys.modules["numba"] = None  # import numba raises ImportError
import functools, json
import numpy as np
import streaming_dpbandit.cli
from streaming_dpbandit.envs.ldp_glb import LDPSingleParamEnv
from streaming_dpbandit.experiments import _ldp_kernels
from streaming_dpbandit.experiments.ldp_glb import cell_specs
from streaming_dpbandit.experiments.ldp_lockstep import run_lockstep
assert not _ldp_kernels.AVAILABLE
try:
    run_lockstep(None, {{}}, 1, 0, np.arange(1, 2), kernels=True)
except ValueError as e:
    assert "needs numba" in str(e)
else:
    raise AssertionError("kernels=True without numba")
E1 = functools.partial(LDPSingleParamEnv, 2, 10)
cells = {{"E1 authors_code": cell_specs("E1", "authors_code", {T}),
         "E1 paper": cell_specs("E1", "paper", {T}, baselines=False)}}
out = run_lockstep(E1, cells, {seeds}, 0, np.arange(1, {T} + 1))
print(json.dumps({{c + "|" + k: r.curves[k].tolist() for c, r in out.items() for k in r.curves}}))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    want = run_lockstep(E1, _cells(T), seeds, 0, np.arange(1, T + 1), kernels=False)
    assert len(got) == 12
    for cell, res in want.items():
        for key, curve in res.curves.items():
            assert np.array_equal(np.array(got[cell + "|" + key]), curve), (cell, key)
