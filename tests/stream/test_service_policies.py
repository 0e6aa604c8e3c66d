"""Every registered policy plugs into the service loop deterministically: the same recorded
stream gives the same learned state and ledger whatever the batching, and after crashes."""

import random

import pytest

from dpbandit_testing.stream_helpers import (
    any_policy_config,
    ledger_digests,
    record_stream,
    run_file,
)

POLICIES = {
    "fliphat": (
        {
            "policy": "fliphat",
            "s": 4,
            "epsilon": 5.0,
            "delta": 1e-4,
            "b_max": 3.5,
            "first_episode_len": 128,
            "swap_delay": 120,
        },
        0,
    ),
    "dp-linucb": (
        {"policy": "dp-linucb", "epsilon": 2.0, "delta": 0.1, "n_cap": 4096, "batch_size": 64},
        100,
    ),
    # the policy's default continual release (config.py still names the tree explicitly)
    "dp-linucb-blt": (
        {
            "policy": "dp-linucb",
            "epsilon": 2.0,
            "delta": 0.1,
            "n_cap": 4096,
            "batch_size": 64,
            "tree_impl": "blt",
        },
        100,
    ),
    "linucb": ({"policy": "linucb", "batch_size": 32}, 100),
    "linucb-disjoint": ({"policy": "linucb-disjoint", "n_arms": 3, "batch_size": 32}, 100),
    "greedy": ({"policy": "greedy", "batch_size": 16}, 100),
    "lasso-bandit": ({"policy": "lasso-bandit", "refit_every": 200}, 150),
    "random": ({"policy": "random"}, 0),
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_policy_is_deterministic_in_the_service(name, tmp_path):
    policy, lag = POLICIES[name]
    bandit = any_policy_config(policy, lag=lag)
    path = tmp_path / "stream.jsonl"
    record_stream(path, 1500, seed=1, state_dir=tmp_path / "rec", bandit=bandit)
    ref, _, summary = run_file(tmp_path / "a", path, max_batch=500, bandits={"shop": bandit})
    assert summary["bandits"]["shop"]["rounds"] == 1500
    other, _, _ = run_file(tmp_path / "b", path, max_batch=9, bandits={"shop": bandit})
    assert other.state_bytes() == ref.state_bytes()
    assert ledger_digests(tmp_path / "b") == ledger_digests(tmp_path / "a")
    # a few abrupt crashes
    rng = random.Random(5)
    crashes, out = 0, None
    over = {"snapshots": {"directory": str(tmp_path / "c"), "interval_s": 0.01}}
    while out is None:
        crash = rng.randint(1, 5) if crashes < 5 else None
        svc, _, out = run_file(
            tmp_path / "c",
            path,
            max_batch=rng.choice([20, 60]),
            crash_after=crash,
            bandits={"shop": bandit},
            **over,
        )
        crashes += crash is not None
    assert svc.state_bytes() == ref.state_bytes()
    assert ledger_digests(tmp_path / "c") == ledger_digests(tmp_path / "a")
