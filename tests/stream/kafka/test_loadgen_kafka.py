"""`dpbandit loadgen` against a real broker and a real service: closed loop, restart-safe."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading

import pytest
import yaml

from dpbandit_testing.kafka_helpers import read_topic
from dpbandit_testing.stream_helpers import BANDIT, D, K, bandit_config, kafka_topics
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.kafka.transport import KafkaTransport
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.loadgen import run_loadgen

pytestmark = pytest.mark.kafka


def test_loadgen_drives_a_service_through_kafka_and_can_be_restarted(kafka_broker, tmp_path):
    name = f"loadgen{os.getpid()}"
    topics = kafka_topics(name)
    for t in topics.values():
        kafka_broker.create_topic(t, 2)
    bandit = bandit_config() | {"feedback_window": 10.0}
    st = ServiceSettings.model_validate(
        {
            "kafka": {
                "bootstrap_servers": kafka_broker.bootstrap,
                "group_id": name,
                "topics": topics,
                "create_topics": False,
                "poll_timeout_ms": 20,
            },
            "simulation": {
                "env_params": {"d": D, "K": K, "s_star": 3},
                "bandit_id": BANDIT,
                "feedback_delay_mean": 0.05,
                "seed": 11,
            },
            "bandits": {BANDIT: bandit},
            "snapshots": {"directory": str(tmp_path / "state"), "interval_s": 1},
            "metrics": {"enabled": False},
            "progress": False,
            "idle_timeout_s": 3600,
        }
    )
    svc = Service(st, KafkaTransport(st.kafka))
    both_sent = threading.Event()

    def done(s):
        rt = s.bandits[BANDIT]
        resolved = rt.stats["joined"] + rt.stats["expired"] + rt.stats["fb_after_expiry"]
        return both_sent.is_set() and rt.policy.t >= 1500 and resolved >= 1500

    result = []

    def serve():
        svc.open()
        result.append(svc.run(progress=lambda s: s.request_stop() if done(s) else None))

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    log = io.StringIO()
    first = run_loadgen(
        st, rate=400, events=1200, duration_s=90, out=log, install_signal_handlers=False
    )
    assert first["events"] == first["decisions"] == first["rewards"] == 1200, log.getvalue()

    # a restarted generator: new event ids, event times in the present — nothing collides
    second = run_loadgen(
        st, rate=400, events=300, duration_s=60, out=log, install_signal_handlers=False
    )
    assert second["events"] == second["decisions"] == second["rewards"] == 300, log.getvalue()
    both_sent.set()
    th.join(timeout=60)
    assert not th.is_alive() and result, "the service did not finish"
    rt = svc.bandits[BANDIT]
    assert rt.policy.t == 1500
    assert rt.policy.model_version >= 2  # it learned: private releases happened
    assert rt.stats["joined"] >= 1450, dict(rt.stats)
    bad = {k: v for k, v in svc.dead_count.items() if k != "feedback_after_expiry"}
    assert not bad, bad  # no duplicate events, unknown events or malformed messages
    assert "sent 300 events" in log.getvalue()


def test_loadgen_takes_the_broker_from_kafka_when_the_yaml_names_none(kafka_broker, tmp_path):
    """`loadgen --config kafka.yaml --kafka HOST:PORT` with a `kafka:` section that names no
    bootstrap servers (topics only): --kafka completes it before validation, as for serve."""
    name = f"loadgen-flag{os.getpid()}"
    topics = kafka_topics(name)
    cfg = tmp_path / "kafka.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "kafka": {"topics": topics, "group_id": name},  # no bootstrap_servers
                "simulation": {"env_params": {"d": D, "K": K, "s_star": 3}, "bandit_id": BANDIT},
                "bandits": {BANDIT: bandit_config()},
            }
        )
    )
    # no service answers: it sends its 20 contexts, then waits for decisions until --duration
    argv = ["loadgen", "--config", str(cfg), "--kafka", kafka_broker.bootstrap]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming_dpbandit.cli",
            *argv,
            "--events",
            "20",
            "--duration",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "loadgen: sent 20 events" in out.stderr
    assert len(read_topic(kafka_broker.bootstrap, topics["contexts"])) == 20
