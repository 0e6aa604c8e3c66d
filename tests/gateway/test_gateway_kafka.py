"""``dpbandit gateway`` over a real broker with the learner service (``dpbandit serve``,
``broadcast.role: learner``), each a real process; a real HTTP client. On both Kafka clients of
the gateway's producer. Rank → Reward → the learner releases → later Ranks decide with the new
model; kill -9 of the gateway loses no acknowledged reward and decides no event twice
differently; with the broker down, Rank answers while records are buffered within the bound,
then 503 with Retry-After, and nothing acknowledged is lost when the broker is back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import yaml

from .conftest import RANK, GatewayProcess, bandit, free_port, rank_body, reward_path

pytestmark = pytest.mark.kafka

CLIENTS = ["kafka-python", "confluent-kafka"]


def configs(
    tmp_path, bootstrap: str, client: str, window: float = 5.0, **gateway
) -> tuple[dict, dict]:
    """(the learner's settings, the gateway's): one bandit, fresh topics and groups."""
    name = f"gw-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    topics = {
        "contexts": f"{name}.contexts",
        "feedback": f"{name}.feedback",
        "decisions": f"{name}.decisions",
        "dead_letter": f"{name}.dead",
        "models": f"{name}.models",
    }
    kafka = {"bootstrap_servers": bootstrap, "client": client, "group_id": name,
             "topics": topics, "partitions": 1}  # fmt: skip
    common = {"kafka": kafka, "bandits": {"shop": bandit(window=window)},
              "metrics": {"enabled": False}}  # fmt: skip
    learner = {
        **common,
        "kafka": {**kafka, "client": "kafka-python"},  # (a broadcast learner: kafka-python)
        "broadcast": {"role": "learner", "models_topic": topics["models"]},
        "snapshots": {"directory": str(tmp_path / "learner"), "interval_s": 1.0},
    }
    gw = {  # the models topic: kafka.topics.models, the learner's broadcast.models_topic
        **common,
        "snapshots": {"directory": str(tmp_path / "gateway")},
        "gateway": {"port": free_port(), "heartbeat_s": 0.2, **gateway},
    }
    return learner, gw


class Learner:
    def __init__(self, config: dict, tmp_path):
        path = tmp_path / "learner.yaml"
        path.write_text(yaml.safe_dump(config))
        self.log = tmp_path / "learner.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(path)],
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def read_topic(bootstrap: str, topic: str) -> list[dict]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
    c.assign(parts)
    c.seek_to_beginning(*parts)
    ends = c.end_offsets(parts)
    out = []
    while any(c.position(p) < ends[p] for p in parts):
        for msgs in c.poll(timeout_ms=1000).values():
            out.extend(json.loads(m.value) for m in msgs)
    c.close()
    return out


def drained(gp: GatewayProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while gp.metric("dpbandit_gateway_buffered_records") > 0:
        assert time.monotonic() < deadline, gp.text()
        time.sleep(0.2)


def _best(body: dict) -> str:
    return "a0" if body["contextFeatures"][0]["user"]["tier"] == "gold" else "a2"


@pytest.mark.parametrize("client", CLIENTS)
def test_rank_reward_release_then_the_new_model_decides(
    kafka_bootstrap, tmp_path, gateway_factory, client
):
    lc, gc = configs(tmp_path, kafka_bootstrap, client)
    learner = Learner(lc, tmp_path)
    try:
        gp = gateway_factory(gc).start()
        c = gp.client
        for i in range(45):
            body = rank_body(i)
            r = c.post(RANK, json=body)
            assert r.status_code == 201, r.text
            value = 1.0 if r.json()["rewardActionId"] == _best(body) else 0.0
            assert c.post(reward_path(f"ev-{i}"), json={"value": value}).status_code == 204
        deadline = time.monotonic() + 60
        while gp.metric("dpbandit_gateway_model_version") < 1:
            assert time.monotonic() < deadline, learner.log.read_text()[-3000:] + gp.text()
            time.sleep(0.2)
        later = c.post(RANK, json=rank_body(1000))
        assert int(later.headers["x-dpbandit-model-version"]) >= 1
        drained(gp)
        t = gc["kafka"]["topics"]
        decisions = read_topic(kafka_bootstrap, t["decisions"])
        assert [d["event_id"] for d in decisions] == [f"ev-{i}" for i in range(45)] + ["ev-1000"]
        assert decisions[-1]["model_version"] >= 1 and decisions[0]["model_version"] == 0
        assert all(len(d["features"]) == 64 and d["propensity"] > 0 for d in decisions)
        rewards = [f for f in read_topic(kafka_bootstrap, t["feedback"]) if "reward" in f]
        assert [f["event_id"] for f in rewards] == [f"ev-{i}" for i in range(45)]
        models = read_topic(kafka_bootstrap, t["models"])
        assert models and models[0]["model_version"] == 1
    finally:
        learner.stop()


@pytest.mark.parametrize("client", CLIENTS)
def test_kill9_loses_no_acknowledged_reward_and_no_decision_changes(
    kafka_bootstrap, tmp_path, gateway_factory, client
):
    # (a feedback window longer than a restart: a retried reward is still inside it)
    _, gc = configs(tmp_path, kafka_bootstrap, client, window=120.0)
    gp = gateway_factory(gc).start()
    answers: dict[str, bytes] = {}  # acknowledged Ranks
    rewarded: dict[str, float] = {}  # acknowledged rewards
    unsure: list[str] = []  # requests cut by the kill

    def traffic(c: httpx.Client, start: int, n: int) -> None:
        for i in range(start, start + n):
            try:
                r = c.post(RANK, json=rank_body(i))
            except httpx.TransportError:
                unsure.append(f"ev-{i}")
                return
            answers[f"ev-{i}"] = r.content
            value = float(i % 2)
            try:
                rr = c.post(reward_path(f"ev-{i}"), json={"value": value})
            except httpx.TransportError:
                unsure.append(f"ev-{i}")
                return
            assert rr.status_code == 204, rr.text
            rewarded[f"ev-{i}"] = value

    th = threading.Thread(target=traffic, args=(gp.client, 0, 100_000))
    th.start()
    while len(rewarded) < 40:
        time.sleep(0.005)
    gp.kill9()  # while the thread is ranking and rewarding
    th.join(timeout=30)
    assert unsure, "the kill landed after the traffic"
    gp.start()
    c = gp.client
    for eid, body in answers.items():  # the same decision, after the restart
        assert c.post(RANK, json=rank_body(int(eid[3:]))).content == body
    for eid in unsure:  # the client retries what the kill cut
        i = int(eid[3:])
        assert c.post(RANK, json=rank_body(i)).status_code == 201
        r = c.post(reward_path(eid), json={"value": float(i % 2)})
        if r.status_code == 409:  # it was recorded before the kill
            assert r.json()["error"]["innerError"]["code"] == "DuplicateReward", r.text
        else:
            assert r.status_code == 204, r.text
        rewarded[eid] = float(i % 2)
    drained(gp)
    t = gc["kafka"]["topics"]
    on_topic = {f["event_id"]: f["reward"] for f in read_topic(kafka_bootstrap, t["feedback"])
                if "reward" in f}  # fmt: skip
    missing = {e: (v, on_topic.get(e)) for e, v in rewarded.items() if on_topic.get(e) != v}
    assert not missing, f"acknowledged rewards not on the topic: {missing}; unsure: {unsure}"
    chosen: dict[str, set] = {}
    for d in read_topic(kafka_bootstrap, t["decisions"]):
        chosen.setdefault(d["event_id"], set()).add((d["arm_id"], d["model_version"]))
    assert set(answers) <= set(chosen)
    assert all(len(v) == 1 for v in chosen.values()), "an event was decided twice differently"
    for eid, body in answers.items():
        assert {json.loads(body)["rewardActionId"]} == {a for a, _ in chosen[eid]}


@pytest.mark.parametrize("client", CLIENTS)
def test_broker_down_buffers_within_the_bound_then_503(
    kafka_broker, kafka_bootstrap, tmp_path, gateway_factory, client
):
    _, gc = configs(tmp_path, kafka_bootstrap, client, max_buffered=12, unready_after_s=1.0,
                    delivery_timeout_s=1.0, heartbeat_s=30.0)  # fmt: skip
    gp = gateway_factory(gc).start()
    c = gp.client
    acked: dict[str, float] = {}
    kafka_broker.stop()
    try:
        statuses = []
        for i in range(20):
            r = c.post(RANK, json=rank_body(i))
            statuses.append(r.status_code)
            if r.status_code != 201:
                break
            rr = c.post(reward_path(f"ev-{i}"), json={"value": 1.0})
            statuses.append(rr.status_code)
            if rr.status_code != 204:
                r = rr
                break
            acked[f"ev-{i}"] = 1.0
        assert r.status_code == 503 and r.headers["retry-after"] == "5", statuses
        assert r.json()["error"]["innerError"]["code"] == "ServiceUnavailable"
        assert 5 <= len(acked) <= 6  # 12 records: Rank and Reward of each event
        time.sleep(1.2)
        ready = c.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert not ready.json()["checks"]["delivery"]["ok"]
    finally:
        kafka_broker.start()
    drained(gp, timeout_s=120)
    assert c.get("/readyz").status_code == 200
    t = gc["kafka"]["topics"]
    on_topic = {f["event_id"]: f["reward"] for f in read_topic(kafka_bootstrap, t["feedback"])
                if "reward" in f}  # fmt: skip
    assert {e: on_topic.get(e) for e in acked} == acked
