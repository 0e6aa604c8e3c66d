"""The model broadcast over Kafka: its settings, a paced client that answers decisions, a
partition reader (``tests/stream/scaling/test_broadcast_kafka.py``, bench/bench_broadcast.py)."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.sim.sources import stamp

from .stream_helpers import BANDIT, D, K, bandit_config
from .user_level_helpers import user_for

EVENTS = 6000
RATE = 600.0  # contexts per second (wall clock)
PARTITIONS = 3
REFRESH_MS = 100
POLL_MS = 50
# episodes of 150·2^k rounds: releases at arrival counts 250, 550, 1150, 2350, 4750
LAST_RELEASE_AT = 4750
POLICY = {"first_episode_len": 150, "swap_delay": 100}


def settings_for(
    role: str,
    topics: dict,
    bootstrap: str,
    state_dir,
    replica=None,
    user_level=None,
    client: str = "kafka-python",
) -> ServiceSettings:
    """A role's settings; ``user_level``: the bandit's user-level section (optional);
    ``client``: ``kafka.client``."""
    bandit = bandit_config(**POLICY) | ({"user_level": user_level} if user_level else {})
    return ServiceSettings.model_validate(
        {
            "mode": "service",
            "kafka": {
                "bootstrap_servers": bootstrap,
                "client": client,
                "group_id": f"{topics['contexts']}.g",
                "topics": {k: v for k, v in topics.items() if k != "models"},
                "create_topics": False,
                "max_poll_records": 500,
                "poll_timeout_ms": POLL_MS,
            },
            "bandits": {BANDIT: bandit},
            "broadcast": {
                "role": role,
                "models_topic": topics["models"],
                "replica_id": replica,
                "model_refresh_ms": REFRESH_MS,
                "commit_interval_s": 0.5,
            },
            "snapshots": {"directory": str(state_dir), "interval_s": 1.0},
            "metrics": {"enabled": False},
            "progress": False,
            "idle_timeout_s": 3600,
        }
    )


def read_partition(bootstrap: str, topic: str) -> list:
    """Every record of a topic, partition by partition, in offset order."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    ends = c.end_offsets(parts)
    out = {p.partition: [] for p in parts}
    while any(c.position(p) < ends[p] for p in parts):
        for tp, msgs in c.poll(timeout_ms=500).items():
            out[tp.partition].extend(msgs)
    c.close()
    return [m for p in sorted(out) for m in out[p]]


class Client:
    """Produces paced contexts (keyed by event id) and answers each decision with feedback;
    ``users``: context i carries the user id ``user_for(i)`` (user-level tests)."""

    def __init__(
        self,
        bootstrap: str,
        topics: dict,
        events: int = EVENTS,
        rate: float = RATE,
        users: bool = False,
    ):
        self.users = users
        self.bootstrap = bootstrap
        self.topics = topics
        self.events = events
        self.rate = rate
        self.env = FliphatPaperEnv(d=D, K=K, s_star=3)
        self.t0 = 1_700_000_000.0
        self.answered = 0
        self.stop = threading.Event()

    def produce_contexts(self, lo: int = 0, hi: int | None = None) -> None:
        """Contexts e{lo} … e{hi-1}, paced at `rate` (the same contexts however it is split)."""
        hi = self.events if hi is None else hi
        rng = np.random.default_rng(1)
        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        X = self.env.contexts(rng, self.events)
        start = time.monotonic()
        for i in range(lo, hi):
            ahead = start + (i - lo) / self.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
            ctx = {
                "event_id": f"e{i}",
                "bandit_id": BANDIT,
                "event_time": self.t0 + i / self.rate,
                "arms": [{"arm_id": f"a{k}", "features": X[i, k].tolist()} for k in range(K)],
            }
            if self.users:
                ctx["user_id"] = user_for(i)
            p.send(  # stamped with its event time (CreateTime): the stream clock of the run
                self.topics["contexts"],
                key=f"e{i}".encode(),
                value=json.dumps(ctx).encode(),
                timestamp_ms=stamp(ctx["event_time"]),
            )
        p.flush()
        p.close()

    def answer(self) -> None:
        """Read decisions; send each one's reward (event time + 0.05 s) keyed by the bandit."""
        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        # manual assignment, no consumer group: a group join can hit kafka-python's re-join
        # stall (docs/operations.md), which would starve the test of answers, not the service
        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        parts = [TopicPartition(self.topics["decisions"], q) for q in range(PARTITIONS)]
        c.assign(parts)
        c.seek_to_beginning(*parts)
        last = self.t0
        while not self.stop.is_set():
            for msgs in c.poll(timeout_ms=100).values():
                for m in msgs:
                    dec = json.loads(m.value)
                    x = np.asarray(dec["features"])[None, None, :]
                    i = int(dec["event_id"][1:])
                    noise = np.random.default_rng([2, i]).normal(0.0, 0.1)
                    reward = float(self.env.mean_rewards(x)[0, 0] + noise)
                    last = max(last, dec["event_time"] + 0.05)
                    fb = {
                        "event_id": dec["event_id"],
                        "bandit_id": BANDIT,
                        "reward": reward,
                        "event_time": dec["event_time"] + 0.05,
                    }
                    p.send(
                        self.topics["feedback"],
                        key=BANDIT.encode(),
                        value=json.dumps(fb).encode(),
                        timestamp_ms=stamp(fb["event_time"]),
                    )
                    self.answered += 1
        # a final heartbeat expires whatever is still pending (same in the recomputation)
        wm = {"type": "watermark", "bandit_id": BANDIT, "event_time": last + 100.0}
        self.final_clock = wm["event_time"]  # the learner's feedback clock once it read it
        p.send(
            self.topics["feedback"],
            key=BANDIT.encode(),
            value=json.dumps(wm).encode(),
            timestamp_ms=stamp(wm["event_time"]),
        )
        p.flush()
        p.close()
        c.close()
