"""The slate runner's batched path (a quiet stretch per decide/learn call for the private
policies) gives exactly the round-by-round protocol's curves, slates and counters."""

from __future__ import annotations

import numpy as np
import pytest

from streaming_dpbandit.envs.dp_matroid import MatroidSyntheticEnv
from streaming_dpbandit.envs.matroid_env import MatroidEnvironment
from streaming_dpbandit.experiments.matroid_runner import (
    MatroidRunSpec,
    log_grid,
    run_matroid_repetition,
)
from streaming_dpbandit.matroids import UniformMatroid
from streaming_dpbandit.policies import DPTSMAT, DPUCBMAT


class _UniformEnv(MatroidEnvironment):
    """20 Bernoulli items, slates of 4 (the uniform matroid's vectorised greedy path)."""

    name = "uniform-test"

    def __init__(self):
        self.matroid = UniformMatroid(20, 4)
        self.means = np.linspace(0.05, 0.9, 20)

    def draw(self, rng, n):
        return (rng.random((n, 20)) < self.means).astype(np.float64)


def _specs(T: int) -> list[MatroidRunSpec]:
    specs = [MatroidRunSpec("omm", "omm", {}, T, None, "baseline")]
    for eps in (0.5, 5.0):
        for algo in ("dpucb-mat", "dpts-mat"):
            specs.append(MatroidRunSpec(f"{algo} {eps}", algo, {"epsilon": eps}, T, eps))
    # a shorter run and a non-default update_every: both irrelevant to the equality
    specs.append(MatroidRunSpec("short", "dpts-mat", {"epsilon": 2.0, "update_every": 7}, 900))
    return specs


@pytest.mark.parametrize("env", [MatroidSyntheticEnv(), _UniformEnv()], ids=["linear", "uniform"])
def test_batched_path_equals_round_by_round(env):
    T = 2500
    specs, grid = _specs(T), log_grid(T)
    fast = run_matroid_repetition(env, specs, 3, 11, grid, batched=True)
    slow = run_matroid_repetition(env, specs, 3, 11, grid, batched=False)
    for s in specs:
        a, b = fast[s.key], slow[s.key]
        assert np.array_equal(a["regret"], b["regret"]), s.key
        assert np.array_equal(a["ret"], b["ret"]), s.key
        for what in ("covered_first_L", "distinct_first_L", "stuck", "final_slate", "counters"):
            assert a[what] == b[what], (s.key, what)
    # the private runs released batches and learned (the comparison is not vacuous)
    assert fast["dpucb-mat 5.0"]["counters"]["rows_learned"] == T
    assert fast["dpts-mat 0.5"]["regret"][-1] > fast["dpts-mat 5.0"]["regret"][-1] > 0


def test_quiet_rounds_stops_at_the_first_completed_batch():
    pol = DPUCBMAT({"type": "uniform", "n_items": 5, "k": 2}, epsilon=1.0, seed=0)
    before = pol.t
    slates = pol.preview_slates(6).slates
    assert pol.t == before  # a preview changes nothing
    # nothing played yet: every item's first batch (size 1) completes at its first reward
    assert pol.quiet_rounds(slates) == 1
    dec = pol.decide_slates(1)
    assert np.array_equal(dec.slates, slates[:1])  # the preview's slate is the decision's
    pol.learn(dec.slates, np.ones((1, 2)), dec.rounds)
    assert pol.refit()  # the size-1 batches of the two served items are released
    s0 = dec.slates[0]
    unplayed = np.setdiff1d(np.arange(5), s0)[:2]
    # the served items' size-2 batches complete at their second reward from now
    assert pol.quiet_rounds(np.array([s0, s0[::-1], s0])) == 2
    # an unplayed item's size-1 batch completes at its first reward
    assert pol.quiet_rounds(np.array([s0, unplayed, s0])) == 2
    assert pol.quiet_rounds(np.array([unplayed, s0])) == 1
    assert pol.quiet_rounds(np.array([s0])) == 1  # no completion: the whole stretch
    pol2 = DPTSMAT({"type": "uniform", "n_items": 5, "k": 2}, epsilon=1.0, seed=0)
    assert pol2.quiet_rounds(np.empty((0, 2), dtype=np.int64)) == 0
