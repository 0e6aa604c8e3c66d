"""The real-time load generator's stream logic and options (its Kafka round trip with a real
service is in test_loadgen_kafka.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpbandit_testing.stream_helpers import BANDIT, D, K
from streaming_dpbandit.cli import main
from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.errors import ConfigError
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.sim.loadgen import RealTimeStream, check_loadgen_settings


def test_real_time_stream_paces_contexts_and_schedules_rewards_after_decisions():
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    t0 = 1_800_000_000.0
    s = RealTimeStream(env, "shop", rate=100, start=t0, delay_mean=0.5, seed=1, id_prefix="run1")
    assert len(s.contexts(t0)) == 1  # event 0 happens at the start
    batch = [json.loads(c) for c in s.contexts(t0 + 0.999)]
    assert len(batch) == 99 and s.events == 100
    assert s.contexts(t0 + 0.999) == []
    ids = [c["event_id"] for c in batch]
    assert ids[0] == "run1-1" and len(set(ids)) == 99
    times = [c["event_time"] for c in batch]
    assert times == sorted(times) and times[-1] <= t0 + 0.999
    assert all(len(c["arms"]) == K and len(c["arms"][0]["features"]) == D for c in batch)

    last_heartbeat = -np.inf
    now = t0 + 1.0
    for c in batch:  # decisions arrive; rewards are due after them, never before a heartbeat
        s.on_decision({"event_id": c["event_id"], "arm_index": 0}, now)
    s.on_decision({"event_id": batch[0]["event_id"], "arm_index": 1}, now)  # a repeat: ignored
    s.on_decision({"event_id": "someone-else", "arm_index": 1}, now)
    assert s.decisions == 99
    sent = []
    for step in range(1, 200):
        out = s.feedback(now + step * 0.05)
        *rewards, hb = out
        assert hb["type"] == "watermark" and hb["event_time"] == now + step * 0.05
        assert all(r["event_time"] >= last_heartbeat for r in rewards)
        assert all(r["event_time"] <= hb["event_time"] for r in rewards)
        last_heartbeat = hb["event_time"]
        sent += rewards
    assert len(sent) == 99 and s.rewards_sent == 99
    assert min(r["event_time"] for r in sent) > now
    assert not s.finished  # unlimited


def test_real_time_stream_finishes_after_the_last_reward():
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    s = RealTimeStream(env, "shop", rate=1000, start=0.0, delay_mean=0.1, max_events=5)
    ctx = [json.loads(c) for c in s.contexts(100.0)]
    assert len(ctx) == 5 and s.contexts(200.0) == []
    for c in ctx:
        s.on_decision({"event_id": c["event_id"], "arm_index": 2}, 100.0)
    assert not s.finished
    s.feedback(1e6)
    assert s.finished
    summary = s.summary()
    assert summary["events"] == summary["decisions"] == summary["rewards"] == 5


def test_real_time_stream_drops_rewards_with_the_configured_probability():
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    s = RealTimeStream(env, "shop", rate=1e4, start=0.0, feedback_probability=0.3, seed=4)
    for c in map(json.loads, s.contexts(0.5)):
        s.on_decision({"event_id": c["event_id"], "arm_index": 0}, 1.0)
    s.feedback(1e9)
    assert s.decisions == 5001
    assert 0.25 < s.rewards_sent / s.decisions < 0.35


def kafka_settings(**over) -> ServiceSettings:
    data = {
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "simulation": {"env_params": {"d": D, "K": K, "s_star": 3}, "bandit_id": BANDIT},
        "bandits": {BANDIT: {"policy": {"policy": "fliphat", "d": D, "s": 4}}},
    } | over
    return ServiceSettings.model_validate(data)


def test_loadgen_refuses_settings_the_service_could_not_use():
    assert check_loadgen_settings(kafka_settings()).d == D
    with pytest.raises(ConfigError, match="needs Kafka"):
        check_loadgen_settings(kafka_settings(kafka=None))
    with pytest.raises(ConfigError, match="not a configured bandit"):
        check_loadgen_settings(kafka_settings(simulation={"bandit_id": "other"}))
    with pytest.raises(ConfigError, match="has d=20 but the simulated environment has d=100"):
        check_loadgen_settings(kafka_settings(simulation={"bandit_id": BANDIT}))
    with pytest.raises(ConfigError, match="unknown environment"):
        check_loadgen_settings(kafka_settings(simulation={"env": "mars", "bandit_id": BANDIT}))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["loadgen"], "needs Kafka"),
        (["loadgen", "--kafka", "127.0.0.1:1", "--rate", "0"], "positive number"),
        (["loadgen", "--kafka", "127.0.0.1:1", "--events", "-3"], "positive integer"),
        (["serve", "--linger", "-1"], "number >= 0"),
    ],
)
def test_loadgen_and_linger_options_give_one_clear_line(argv, message, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
