"""Helpers of the slate service tests: slate bandit settings and recorded slate streams."""

from __future__ import annotations

from streaming_dpbandit.envs import MatroidSyntheticEnv
from streaming_dpbandit.envs.matroid_env import MatroidEnvironment
from streaming_dpbandit.matroids import PartitionMatroid
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.slates.sources import SlateSimulatedSource
from streaming_dpbandit.stream.transport import InProcessTransport

from .stream_helpers import BANDIT, settings

SYNTHETIC = MatroidSyntheticEnv().matroid.describe()
#: 40 items in 4 categories, capacities 2, 1, 1, 1 (K = 5): :class:`PartitionEnv`'s matroid
PARTITION40 = {
    "type": "partition",
    "categories": [i % 4 for i in range(40)],
    "capacities": [2, 1, 1, 1],
}


class PartitionEnv(MatroidEnvironment):
    """40 items in 4 categories with capacities 2, 1, 1, 1 (K = 5); Bernoulli rewards."""

    name = "test-partition"

    def __init__(self):
        import numpy as np

        self.matroid = PartitionMatroid(np.arange(40) % 4, [2, 1, 1, 1])
        self.means = np.linspace(0.05, 0.9, 40)

    def draw(self, rng, n):
        return (rng.random((n, self.n_items)) < self.means).astype(float)


def slate_bandit(policy: dict, lag: int = 600, window: float = 2.0) -> dict:
    return {
        "policy": policy,
        "feedback_window": window,
        "feedback_lag_rounds": lag,
        "seed": 7,
        "reward_bounds": [-5, 5],
    }


def record_slate_stream(path, events, env, bandit, seed=0, state_dir=None, p=0.85, items=None):
    """Run a slate source through a service once and record its input as JSONL."""
    src = SlateSimulatedSource(
        env,
        events,
        BANDIT,
        dt=0.01,
        delay_mean=0.3,
        feedback_probability=p,  # some items never get a reward: default fill at expiry
        seed=seed,
        topics=("dpbandit.contexts", "dpbandit.feedback"),
        item_ids=items,
    )
    st = settings(state_dir or path.parent / "record-state", bandit=bandit)
    svc = Service(st, InProcessTransport(RecordingSource(src, path)))
    svc.open()
    svc.run()
    return src.summary()


def slate_decision_value(event_id: str, bandit_id: str, round: int, items) -> dict:
    """The decisions-topic value of a non-private slate logger's decision (items ``sku-<i>``)."""
    return {
        "event_id": event_id,
        "bandit_id": bandit_id,
        "model_version": 0,
        "round": round,
        "calibration": "non-private",
        "policy": "random",
        "decided_at": float(round - 1),
        "slate": [{"item_id": f"sku-{e}", "item_index": int(e), "key": None} for e in items],
    }
