"""A bandit waiting for the rewards of its next release says so (issue 34, item 8).

In process: a FLIPHAT bandit without swap delay whose first episode's rewards never come is
blocked at its first release; after ``blocked_warning_s`` one warning names what it waits for
and the setting to change, and a line follows when the idle timeout lets it decide again. The
real-broker scenario (a load generator against the service) is in
tests/stream/kafka/test_blocked_kafka.py.
"""

from __future__ import annotations

import io
import json
import logging
import re
import time

import pytest

from streaming_dpbandit.settings import BanditSettings, ServiceSettings
from streaming_dpbandit.stream.runner import run_service
from streaming_dpbandit.stream.stalls import blocking_load
from streaming_dpbandit.stream.transport import InProcessTransport, Source

ARMS = [
    {"arm_id": "a", "features": [0.1, 0.2, 0.0, 1.0]},
    {"arm_id": "b", "features": [0.3, 0.1, 1.0, 0.0]},
]


def shop_settings(tmp_path, **over) -> ServiceSettings:
    """A FLIPHAT bandit without swap delay whose first episode (rounds 1-100) blocks its
    contexts until its rewards resolve; ``over``: service settings (timeouts)."""
    policy = {"policy": "fliphat", "d": 4, "s": 2, "first_episode_len": 100}
    return ServiceSettings.model_validate(
        {
            "bandits": {"shop": {"policy": policy, "feedback_window": 60}},
            "snapshots": {"directory": str(tmp_path / "st")},
            "metrics": {"enabled": False},
            "progress": False,
            **over,
        }
    )


class StalledFeedback(Source):
    """150 contexts at once (episode 1 is rounds 1-100), no reward; after ``hold_s`` of wall
    time a heartbeat past every window expires episode 1's joins, and the input ends."""

    topics = ("dpbandit.contexts", "dpbandit.feedback")

    def __init__(self, hold_s: float):
        self.hold_s, self.started = hold_s, None

    def generate(self, emit, max_new: int) -> bool:
        if self.started is None:
            self.started = time.monotonic()
            for i in range(150):
                ctx = {"event_id": f"e{i}", "bandit_id": "shop", "event_time": 1000.0 + i,
                       "arms": ARMS}  # fmt: skip
                emit(self.topics[0], b"shop", json.dumps(ctx).encode())
            return True
        if time.monotonic() - self.started < self.hold_s:
            time.sleep(0.01)
            return True
        beat = {"type": "watermark", "bandit_id": "shop", "event_time": 1200.0}
        emit(self.topics[1], b"shop", json.dumps(beat).encode())
        return False


def test_a_blocked_bandit_warns_with_the_reason_and_the_setting(tmp_path, caplog):
    settings = shop_settings(tmp_path, blocked_warning_s=0.3)
    caplog.set_level(logging.INFO, logger="streaming_dpbandit.service")
    summary = run_service(settings, InProcessTransport(StalledFeedback(hold_s=1.5)), io.StringIO())
    assert summary["decisions"] == 150
    lines = [r.getMessage() for r in caplog.records if r.name == "streaming_dpbandit.service"]
    (warning,) = [m for m in lines if " blocked for " in m]
    assert re.match(r"bandit shop: blocked for \d+ s, 50 contexts waiting: its next release "
                    "reads the rewards of the decisions up to round 100 and 100 of them have "
                    "none yet", warning)  # fmt: skip
    assert "set policy.swap_delay (now 0) to at least the traffic of one feedback_window" in warning
    assert "feedback_window, 60 s; if the feedback stops, idle_timeout_s, 30 s, expires" in warning
    (again,) = [m for m in lines[lines.index(warning) :] if "deciding again" in m]
    assert re.fullmatch(r"bandit shop: deciding again after \d+ s blocked", again)


@pytest.mark.parametrize(
    "policy, lag, rate, p, refused",
    [
        ({"policy": "fliphat", "d": 20, "swap_delay": 100}, 0, 50, 0.95, "policy.swap_delay"),
        ({"policy": "fliphat", "d": 20, "swap_delay": 1500}, 0, 50, 0.95, None),  # 50 × 30
        ({"policy": "fliphat", "d": 20, "swap_delay": 0}, 0, 50, 1.0, None),  # all rewarded
        ({"policy": "linucb", "d": 20}, 0, 50, 0.9, "feedback_lag_rounds"),
        ({"policy": "linucb", "d": 20}, 2000, 50, 0.9, None),
        ({"policy": "random", "d": 20}, 0, 50, 0.5, None),  # never releases: never waits
    ],
)
def test_the_load_that_blocks_at_every_release_is_refused(policy, lag, rate, p, refused):
    b = BanditSettings.model_validate(
        {"policy": policy, "feedback_window": 30, "feedback_lag_rounds": lag}
    )
    why = blocking_load("shop", b, rate, p)
    assert (why is None) == (refused is None)
    if refused:
        assert f"Set {refused} to at least 1,500" in why


@pytest.mark.timeout(120)
def test_a_finished_file_does_not_wait_the_idle_timeout(tmp_path, caplog):
    """A file whose last decisions get no reward: nothing more can arrive, so the bandit blocked
    at its release expires them at once (the run waited idle_timeout_s, 30 s by default; here an
    hour, which the timeout above would catch)."""
    from streaming_dpbandit.stream.sim.sources import FileSource

    path = tmp_path / "events.jsonl"
    with path.open("w") as f:
        for i in range(150):
            ctx = {"event_id": f"e{i}", "bandit_id": "shop", "event_time": 1000.0 + i,
                   "arms": ARMS}  # fmt: skip
            f.write(json.dumps({"topic": "contexts", "timestamp": 1e6 + 1e3 * i, "value": ctx}))
            f.write("\n")
    settings = shop_settings(tmp_path, idle_timeout_s=3600)
    caplog.set_level(logging.INFO, logger="streaming_dpbandit.service")
    source = FileSource(path, ("dpbandit.contexts", "dpbandit.feedback"))
    summary = run_service(settings, InProcessTransport(source), io.StringIO())
    assert summary["decisions"] == 150 and summary["bandits"]["shop"]["model_version"] == 1
    lines = [r.getMessage() for r in caplog.records if r.name == "streaming_dpbandit.service"]
    assert "bandit shop: the input ended while blocked (release, or a full join); expired 100 " \
        "pending joins" in lines  # fmt: skip


class QuietStart(Source):
    """Nothing for ``quiet_s`` of wall time, then 150 contexts at once and, ``lag_s`` later,
    the rewards of the first 100 (episode 1), then the input ends."""

    topics = ("dpbandit.contexts", "dpbandit.feedback")

    def __init__(self, quiet_s: float, lag_s: float):
        self.quiet_s, self.lag_s, self.started, self.sent = quiet_s, lag_s, time.monotonic(), None

    def generate(self, emit, max_new: int) -> bool:
        now = time.monotonic()
        if self.sent is None:
            if now - self.started < self.quiet_s:
                time.sleep(0.01)
                return True
            self.sent = now
            for i in range(150):
                ctx = {"event_id": f"e{i}", "bandit_id": "shop", "event_time": 1000.0 + i,
                       "arms": ARMS}  # fmt: skip
                emit(self.topics[0], b"shop", json.dumps(ctx).encode())
            return True
        if now - self.sent < self.lag_s:
            time.sleep(0.01)
            return True
        for i in range(100):
            fb = {"event_id": f"e{i}", "bandit_id": "shop", "event_time": 1000.5 + i, "reward": 1}
            emit(self.topics[1], b"shop", json.dumps(fb).encode())
        return False


def test_the_idle_timeout_counts_from_the_block_not_from_the_start(tmp_path):
    """A service quiet for longer than idle_timeout_s before its first contexts: blocked at its
    first release, it waits for the rewards (they come 0.5 s later) instead of expiring them at
    once — its idle timer counted from the runtime's construction."""
    settings = shop_settings(tmp_path, idle_timeout_s=3.0)
    source = QuietStart(quiet_s=4.0, lag_s=0.5)
    summary = run_service(settings, InProcessTransport(source), io.StringIO())
    stats = summary["bandits"]["shop"]["stats"]
    assert summary["decisions"] == 150 and stats["joined"] == 100, stats
    assert "feedback_after_expiry" not in summary["dead_letters"]
