"""/livez and /readyz through a real broker, asked over HTTP as Kubernetes and Docker ask them.

One `dpbandit serve` process per Kafka client, started before its input topics exist: it cannot
be assigned partitions, so /readyz must answer 503 (its state restored, its ledger verified, no
partition); once the topics are created it is assigned and answers 200; when the broker stops
it answers 503 after ``metrics.broker_timeout_s``, and 200 again once the broker is back. /livez
answers 200 throughout. Both clients run side by side, so the broker is stopped once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from dpbandit_testing.kafka_helpers import free_port, kafka_settings
from dpbandit_testing.stream_helpers import kafka_topics
from streaming_dpbandit.stream.kafka.seam import CLIENTS

pytestmark = pytest.mark.kafka


def probe(port: int, path: str) -> tuple[int, dict]:
    """(HTTP status, JSON body) of a probe; (0, {}) while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
    except OSError:
        return 0, {}


def wait_for(port: int, path: str, status: int, timeout_s: float, log) -> dict:
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        code, body = probe(port, path)
        if code == status:
            return body
        seen = (code, body)
        time.sleep(0.1)
    pytest.fail(f"{path} on :{port} not {status} within {timeout_s:.0f} s (last {seen}); {log}")


def test_readyz_follows_assignment_and_the_broker(kafka_broker, tmp_path):
    services = {}
    for client in CLIENTS:
        name = f"probes-{client}-{os.getpid()}"
        topics = kafka_topics(name)
        port = free_port()
        data = kafka_settings(tmp_path / client, kafka_broker.bootstrap, topics, name, client)
        data["metrics"] = {"port": port, "broker_timeout_s": 2.0}
        data["snapshots"]["interval_s"] = 3600  # no flush while the broker is away
        cfg = tmp_path / f"{client}.yaml"
        cfg.write_text(yaml.safe_dump(data))
        log = tmp_path / f"{client}.log"
        with log.open("w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(cfg)],
                stdout=fh,
                stderr=fh,
            )
        services[client] = (proc, port, topics, log)
    try:
        for client, (_, port, _, log) in services.items():
            # the topics do not exist: the service is restored but waits for its partitions
            assert wait_for(port, "/livez", 200, 60, log)["status"] == "live"
            body = wait_for(port, "/readyz", 503, 60, log)
            checks = body["checks"]
            assert not checks["partitions"]["ok"], (client, body)
            assert checks["broker"]["ok"], (client, body)
        for _, _, topics, _ in services.values():
            for t in topics.values():
                kafka_broker.create_topic(t, 2)
        for client, (_, port, _, log) in services.items():
            body = wait_for(port, "/readyz", 200, 120, log)
            assert all(c["ok"] for c in body["checks"].values()), (client, body)
            assert body["checks"]["partitions"]["detail"] == "4 input partitions assigned"
        kafka_broker.stop()
        try:
            for client, (_, port, _, log) in services.items():
                body = wait_for(port, "/readyz", 503, 30, log)
                assert not body["checks"]["broker"]["ok"], (client, body)
                assert "unreachable" in body["checks"]["broker"]["detail"]
                assert probe(port, "/livez")[0] == 200, client  # alive: it waits for the broker
        finally:
            kafka_broker.start()
        for _, port, _, log in services.values():
            wait_for(port, "/readyz", 200, 120, log)
    finally:
        for proc, *_ in services.values():
            proc.send_signal(signal.SIGTERM)
        for client, (proc, _, _, log) in services.items():
            assert proc.wait(60) == 0, (client, log.read_text()[-3000:])
