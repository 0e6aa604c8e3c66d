"""A recorded slate stream whose contexts carry user ids, and the user-level slate bandit it
feeds (``tests/stream/test_slates_user_level.py``,
``tests/stream/kafka/test_slates_user_level_kafka.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.slates.sources import SlateSimulatedSource
from streaming_dpbandit.stream.transport import InProcessTransport

from .slate_helpers import PARTITION40, PartitionEnv, slate_bandit
from .stream_helpers import BANDIT, settings

K_USER = 2
N_USERS = 60
LAG = 48
ITEMS = [f"sku-{i:02d}" for i in range(40)]
POLICY = {
    "policy": "dpucb-mat",
    "matroid": PARTITION40,
    "epsilon": 1.0,
    "update_every": 16,
    "items": ITEMS,
}


def shopper(i: int) -> str:
    return f"shopper-{i:03d}@example.org"


def raw_shoppers_in(blob: str) -> list[str]:
    return [u for u in map(shopper, range(N_USERS)) if u in blob]


def user_slate_bandit(**bound) -> dict:
    return {
        **slate_bandit(POLICY, lag=LAG),
        "user_level": {"max_contributions_per_user": K_USER, **bound},
    }


class UserSlateSource(SlateSimulatedSource):
    """Slate requests from Zipf-popular returning users (each context carries a ``user_id``)."""

    def __init__(self, *args, users: np.ndarray, **kwargs):
        super().__init__(*args, **kwargs)
        self.users = users

    def _send(self, emit, topic, value):
        if topic == self.topics[0]:
            i = int(value["event_id"].rsplit("-", 1)[1])
            value = {**value, "user_id": shopper(int(self.users[i]))}
        super()._send(emit, topic, value)


def write_user_slate_stream(d: Path, events: int = 400) -> Path:
    """A slate stream (``events`` requests, per-item feedback) recorded from the user-level
    bandit, its users Zipf-popular (many exceed k)."""
    w = 1.0 / np.arange(1, N_USERS + 1)
    users = np.random.default_rng(4).choice(N_USERS, size=events, p=w / w.sum())
    path = d / "users.jsonl"
    src = UserSlateSource(
        PartitionEnv(),
        events,
        BANDIT,
        dt=0.01,
        delay_mean=0.3,
        feedback_probability=0.85,
        seed=3,
        topics=("dpbandit.contexts", "dpbandit.feedback"),
        item_ids=ITEMS,
        users=users,
    )
    st = settings(d / "record", bandit=user_slate_bandit())
    svc = Service(st, InProcessTransport(RecordingSource(src, path)))
    svc.open()
    svc.run()
    return path
