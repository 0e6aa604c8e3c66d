"""The streams of issue 31, item 1: one heartbeat from the future must not stop a bandit's
learning (``tests/stream/test_stream_clock.py`` and, through a broker,
``tests/stream/kafka/test_stream_clock_kafka.py``).

A FLIPHAT bandit with a 2 s feedback window; contexts 0.1 s apart, each rewarded 0.05 s later;
after event ``after`` one heartbeat whose event time is ``heartbeat`` (``1e300``, or an hour
ahead). Every record is stamped like a Kafka record of a producer that writes each message as
it happens (``timestamp``: its event time in ms), unless ``stamped`` is False.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .stream_helpers import BANDIT, D, K

__all__ = ["clock_stream", "count", "write_lines"]

#: when the streams happen: a recent past, so every record timestamp is behind the wall clock
T0 = 1_760_000_000.0


def clock_stream(
    n: int = 1200,
    *,
    start: int = 0,
    t0: float = T0,
    dt: float = 0.1,
    delay: float = 0.05,
    after: int | None = 100,
    heartbeat: float | str | None = None,
    stamped: bool = True,
    context_times: dict[int, float] | None = None,
    reward_times: dict[int, float] | None = None,
    seed: int = 0,
) -> list[dict]:
    """``FileSource`` lines of events ``start … start + n − 1``.

    ``heartbeat``: the heartbeat's event time (a number), ``"hour"`` for an hour after event
    ``after``, or None (no heartbeat). ``context_times``: events whose context (and reward) is
    stamped with another event time (``{i: 0.0}``: a context from 1970; its reward follows
    0.05 s after it), the record timestamp unchanged; ``reward_times``: the same for rewards.
    """
    rng = np.random.default_rng([seed, start])
    X = np.round(rng.normal(size=(n, K, D)), 6)
    rewards = np.round(rng.uniform(0, 1, n), 6)
    lines: list[dict] = []

    def line(topic: str, value: dict, at: float) -> dict:
        out = {"topic": topic, "value": json.dumps(value)}
        if stamped:
            out["timestamp"] = round(at * 1000)
        return out

    for j in range(n):
        i = start + j
        at = t0 + i * dt
        t = (context_times or {}).get(i, at)
        arms = [{"arm_id": f"arm-{k}", "features": X[j, k].tolist()} for k in range(K)]
        ctx = {"v": 1, "event_id": f"e{i}", "bandit_id": BANDIT, "event_time": t, "arms": arms}
        lines.append(line("contexts", ctx, at))
        fb = {
            "v": 1,
            "event_id": f"e{i}",
            "bandit_id": BANDIT,
            "reward": float(rewards[j]),
            "event_time": (reward_times or {}).get(i, t + delay),
        }
        lines.append(line("feedback", fb, at + delay))
        if heartbeat is not None and i == after:
            when = at + delay + 3600.0 if heartbeat == "hour" else float(heartbeat)
            hb = {"v": 1, "type": "watermark", "bandit_id": BANDIT, "event_time": when}
            lines.append(line("feedback", hb, at + delay))
    return lines


def write_lines(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def count(summary: dict, dead: list[dict]) -> dict:
    """Joined and expired decisions, and dead letters by reason, of a run."""
    stats = summary["bandits"][BANDIT]["stats"]
    reasons: dict[str, int] = {}
    for d in dead:
        reasons[d["reason"]] = reasons.get(d["reason"], 0) + 1
    return {
        "joined": stats.get("joined", 0),
        "expired": stats.get("expired", 0) + stats.get("expired_forced", 0),
        "dead": reasons,
    }
