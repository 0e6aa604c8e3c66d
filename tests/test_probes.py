"""The probes' rules (streaming_dpbandit/probes.py) on a controlled clock, and over HTTP.

The real-broker test (tests/stream/kafka/test_probes_kafka.py) drives a service through
assignment and a broker outage; these pin the timing rules and the HTTP answers.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.probes import Readiness
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.readiness import service_readiness
from streaming_dpbandit.stream.runner import start_metrics_server


def test_broker_unreachable_is_not_ready_only_after_the_timeout():
    now, up = [0.0], [True]
    r = Readiness(
        "kafka:9092", broker_timeout_s=10, clock=lambda: now[0], reachable=lambda _: up[0]
    )
    assert r.ready()[0]
    up[0] = False
    for t in (1.0, 5.0, 9.5):  # unreachable, but not for long yet
        now[0] = t
        assert r.ready()[0], t
    now[0] = 10.5
    ok, body = r.ready()
    assert not ok and body["checks"]["broker"]["detail"] == "kafka:9092 unreachable for 10 s"
    up[0] = True
    now[0] = 12.0
    assert r.ready()[0]  # back: ready at once


def test_broker_is_asked_at_most_once_a_second():
    now, asked = [0.0], []
    r = Readiness("b:1", clock=lambda: now[0], reachable=lambda b: asked.append(b) or True)
    for t in (0.0, 0.2, 0.9, 1.0, 1.5, 2.1):
        now[0] = t
        r.ready()
    assert len(asked) == 3


def test_a_loop_that_stops_turning_is_not_live_until_it_has_stopped():
    now = [0.0]
    r = Readiness(stall_timeout_s=60, clock=lambda: now[0])
    now[0] = 1000.0
    assert r.live()[0]  # no beat yet: starting (the startup probe's time)
    r.beat()
    now[0] = 1059.0
    assert r.live()[0]
    now[0] = 1061.0
    ok, body = r.live()
    assert not ok and body["checks"]["loop"]["detail"] == "last turn 61.0 s ago (≥ 60 s)"
    r.stopped("input finished")  # lingering after a finite input: live, not ready
    assert r.live()[0] and not r.ready()[0]


def get(port: int, path: str) -> tuple[int, dict | str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            raw = resp.read().decode()
            ctype = resp.headers["Content-Type"]
            return resp.status, json.loads(raw) if ctype == "application/json" else raw
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_metrics_port_serves_the_probes_and_the_metrics():
    st = ServiceSettings.model_validate({"metrics": {"port": 0}})
    readiness = service_readiness(st)
    server, port = start_metrics_server(st, ServiceMetrics(), readiness)
    try:
        status, body = get(port, "/readyz")
        assert status == 503 and body["status"] == "not ready"
        assert sorted(body["checks"]) == ["ledger", "partitions", "state"]
        assert "broker" not in body["checks"]  # no Kafka section: no broker to watch
        assert get(port, "/livez")[0] == 200
        for name in ("state", "ledger", "partitions"):
            readiness.set(name, True)
        assert get(port, "/readyz")[0] == 200
        status, text = get(port, "/metrics")
        assert status == 200 and "dpbandit_build_info" in text
    finally:
        server.shutdown()
        server.server_close()
