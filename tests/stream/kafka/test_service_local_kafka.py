"""privacy=local through a real Apache Kafka broker (started by scripts/run-tests.sh).

The test process plays the devices: it fetches the published model over HTTP with the client
SDK, decides, privatises and produces ``ldp_report`` messages. ``dpbandit serve`` runs as a
subprocess (JSON logs to a file), is killed with SIGKILL twice mid-stream and restarted, and
finally stopped. Then every server artefact — its logs, snapshot, ledger, /metrics, the models
topic, the HTTP model and the dead-letter topic — is checked to contain no raw context or
reward (the detectors are shown to fire on a planted value), the published versions are
contiguous, and an in-process replay of the feedback topic reaches the identical state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from kafka import KafkaProducer

from dpbandit_testing.kafka_helpers import free_port, read_topic, sample, scrape
from dpbandit_testing.ldp_stream_helpers import (
    BANDIT,
    local_bandit,
    raw_values,
    state_leaks,
    text_leaks,
)
from dpbandit_testing.stream_helpers import kafka_topics, run_file
from streaming_dpbandit.envs import LDPSingleParamEnv
from streaming_dpbandit.ldp import LDPClient, fetch_snapshot
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.stream.local.runtime import learned_local_bytes
from streaming_dpbandit.stream.snapshot import SnapshotStore

pytestmark = pytest.mark.kafka

REPORTS = 4000


def _topics(name: str) -> dict:
    return kafka_topics(name) | {"models": f"{name}.models"}


def test_local_mode_end_to_end_with_crashes_and_no_raw_data_anywhere(kafka_broker, tmp_path):
    topics = _topics(f"ldp{os.getpid()}")
    for key, t in topics.items():
        configs = {"cleanup.policy": "compact"} if key == "models" else None
        kafka_broker.create_topic(t, 3, configs=configs)
    mport, hport = free_port(), free_port()
    bandit = local_bandit(refresh_every=100)
    cfg = {
        "mode": "service",
        "kafka": {
            "bootstrap_servers": kafka_broker.bootstrap,
            "group_id": "ldp-e2e",
            "topics": topics,
            "create_topics": False,
            "poll_timeout_ms": 50,
        },
        "bandits": {BANDIT: bandit},
        "snapshots": {"directory": str(tmp_path / "state"), "interval_s": 0.5},
        "metrics": {"enabled": True, "port": mport},
        "model_server": {"enabled": True, "port": hport},
        "log_level": "DEBUG",
        "progress": False,
    }
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    log_path = tmp_path / "serve.log"
    log = log_path.open("a")
    cmd = [
        sys.executable,
        "-m",
        "streaming_dpbandit.cli",
        "serve",
        "--config",
        str(cfg_path),
        "--no-progress",
        "--log-json",
    ]
    url = f"http://127.0.0.1:{hport}/v1/models/{BANDIT}"

    def start():
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert proc.poll() is None, "the service exited: see serve.log"
            try:
                return proc, fetch_snapshot(url, timeout=1.0)
            except OSError:
                time.sleep(0.2)
        pytest.fail("the model endpoint never came up")

    proc, snap = start()
    env = LDPSingleParamEnv(d=20, K=5, theta_seed=8)
    rng = np.random.default_rng(3)
    client = LDPClient(snap, max_epsilon=1.0, rng=np.random.default_rng(4))
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", linger_ms=5)
    samples = []
    try:
        for i in range(REPORTS):
            if i % 100 == 0:
                try:
                    client.update(fetch_snapshot(url, timeout=1.0, current=client.snapshot))
                except OSError:
                    pass  # the service is restarting: keep deciding with the last model
            if i in (1300, 2700):  # kill -9 mid-stream, restart
                producer.flush()
                time.sleep(0.5)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc, _ = start()
            X = env.contexts(rng, 1)[0]
            choice = client.decide(X)
            r = float(env.mean_rewards(X[None])[0, choice.arm])
            samples.append((X[choice.arm], r))
            producer.send(
                topics["feedback"], key=BANDIT.encode(), value=client.report(choice, r).to_json()
            )
        producer.flush()
        deadline = time.time() + 300
        while time.time() < deadline:
            time.sleep(0.5)
            m = scrape(mport)
            outcomes = sum(
                v
                for (n, lb), v in m.items()
                if n == "dpbandit_ldp_reports_total" and dict(lb)["bandit"] == BANDIT
            )
            absorbed = sample(m, "dpbandit_ldp_reports_absorbed", bandit=BANDIT) or 0
            if absorbed >= REPORTS - 5 and outcomes >= 0:
                snap_now = json.loads(urllib.request.urlopen(url, timeout=2).read())
                if snap_now["reports"] == absorbed - absorbed % 100:
                    break
        metrics_text = (
            urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        )
        http_model = urllib.request.urlopen(url, timeout=2).read().decode()
    finally:
        producer.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    raw = raw_values(samples)
    assert raw.size > 10_000
    # -- no raw context or reward anywhere on the server side --------------------------------
    snapshot_bytes = (tmp_path / "state" / "snapshot.json").read_bytes()
    models = [m.value.decode() for m in read_topic(kafka_broker.bootstrap, topics["models"])]
    dead = [m.value.decode() for m in read_topic(kafka_broker.bootstrap, topics["dead_letter"])]
    texts = {
        "logs": log_path.read_text(),
        "ledger": (tmp_path / "state" / "ledger.jsonl").read_text(),
        "metrics": metrics_text,
        "models topic": "\n".join(models),
        "http model": http_model,
        "dead letters": "\n".join(dead),
        "snapshot (text)": snapshot_bytes.decode(errors="replace"),
    }
    for name, text in texts.items():
        assert text_leaks(text, raw) == [], name
    assert state_leaks(snapshot_bytes, raw) == []
    assert text_leaks(texts["logs"] + repr(float(raw[11])), raw) == [float(raw[11])]
    assert "published model" in texts["logs"] and "restored snapshot" in texts["logs"]
    # -- what was learned and published ----------------------------------------------------------
    snap = SnapshotStore(tmp_path / "state").load()
    st = snap["local"][BANDIT]
    assert (
        st["server"]["reports"] + sum(v for k, v in st["stats"].items() if k != "absorbed")
        == REPORTS
    )
    versions = sorted({json.loads(m)["model_version"] for m in models})
    assert versions == list(range(versions[-1] + 1)) and versions[-1] >= REPORTS // 100 - 3
    recs, _ = read_ledger(tmp_path / "state" / "ledger.jsonl")
    assert [r.model_version for r in recs] == versions[1:]
    assert all(r.privacy_model == "local" and r.epsilon == 1.0 for r in recs)
    assert "dpbandit_ldp_reports_total" in metrics_text
    # -- kill -9 changed nothing: an in-process replay of the topic gives the same state --------
    reports = [m.value.decode() for m in read_topic(kafka_broker.bootstrap, topics["feedback"])]
    path = tmp_path / "replay.jsonl"
    path.write_text("".join(json.dumps({"topic": "feedback", "value": v}) + "\n" for v in reports))
    svc, _, _ = run_file(tmp_path / "replay", path, bandits={BANDIT: bandit})
    assert learned_local_bytes({BANDIT: svc.local.runtimes[BANDIT].state_dict()}) == (
        learned_local_bytes(snap["local"])
    )
    assert Path(tmp_path / "state").stat().st_mode & 0o777 == 0o700


def test_the_models_topic_is_created_compacted(kafka_broker):
    from kafka.admin import ConfigResource, ConfigResourceType

    from streaming_dpbandit.settings import KafkaSettings
    from streaming_dpbandit.stream.local.publisher import ensure_models_topic

    name = f"ldp{os.getpid()}.models-created"
    settings = KafkaSettings(bootstrap_servers=kafka_broker.bootstrap)
    assert ensure_models_topic(settings, name) is True
    assert ensure_models_topic(settings, name) is False  # idempotent
    admin = kafka_broker.admin()
    try:
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        text = repr(res)
    finally:
        admin.close()
    assert "cleanup.policy" in text and "compact" in text
