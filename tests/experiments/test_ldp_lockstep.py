"""The lock-step E1 engine computes what the reference path computes.

The reference path (``runner.run_repetition``) steps the product's policy objects one round at a
time. Handing those objects the lock-step engine's report noise (:class:`ReplicaNoise`, a
stand-in for their generator) must make both paths choose the same arm in every round, so the
per-round regret curves are identical, for every method, ε and profile of E1.
"""

import functools

import numpy as np
import pytest

from streaming_dpbandit.envs.ldp_glb import LDPMultiParamEnv, LDPSingleParamEnv
from streaming_dpbandit.experiments import runner
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


def test_lockstep_splits_seeds_across_processes_without_changing_results():
    T, seeds = 1500, 3
    grid = np.arange(100, T + 1, 100)
    one = run_lockstep(E1, _cells(T), seeds, 5, grid, jobs=1)
    two = run_lockstep(E1, _cells(T), seeds, 5, grid, jobs=2)
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
