"""Slates and per-item feedback through a real Apache Kafka broker, with crashes in the middle.

A recorded slate stream (DPTS-MAT on a 40-item partition matroid, K = 5, per-item feedback with
some items never reported) is produced to the contexts and feedback topics; ``dpbandit serve``
runs on it and is killed with SIGKILL at random moments, then runs to the end. The learned
state (policy, per-item joins, held rows), the ledger of batch releases and every published
slate must equal the crash-free in-process run over the same file: nothing lost, nothing
counted twice, no release re-drawn, repeated decisions identical.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml

from dpbandit_testing.kafka_helpers import (
    create_topics,
    free_port,
    kafka_settings,
    produce_file,
    read_topic,
    sample,
    scrape,
)
from dpbandit_testing.slate_helpers import PartitionEnv, record_slate_stream, slate_bandit
from dpbandit_testing.stream_helpers import (
    BANDIT,
    decisions,
    kafka_topics,
    ledger_digests,
    run_file,
)
from streaming_dpbandit.stream.schemas import SlateDecision, parse_decision
from streaming_dpbandit.stream.service import learned_state_bytes
from streaming_dpbandit.stream.snapshot import SnapshotStore

pytestmark = pytest.mark.kafka

EVENTS = 4000
ITEMS = [f"sku-{i:02d}" for i in range(40)]
BANDIT_CFG = slate_bandit(
    {
        "policy": "dpts-mat",
        "matroid": {
            "type": "partition",
            "categories": [i % 4 for i in range(40)],
            "capacities": [2, 1, 1, 1],
        },
        "epsilon": 1.0,
        "update_every": 32,
        "items": ITEMS,
    },
    lag=600,
)


@pytest.fixture(scope="module")
def recorded_slates(tmp_path_factory):
    d = tmp_path_factory.mktemp("slate-stream")
    path = d / "stream.jsonl"
    record_slate_stream(
        path, EVENTS, PartitionEnv(), BANDIT_CFG, seed=9, state_dir=d / "rec", items=ITEMS
    )
    svc, transport, summary = run_file(d / "ref", path, bandits={BANDIT: BANDIT_CFG})
    slates = {x["event_id"]: [i["item_id"] for i in x["slate"]] for x in decisions(transport)}
    assert len(slates) == EVENTS and summary["bandits"][BANDIT]["stats"]["items_defaulted"] > 0
    return {
        "path": path,
        "state": svc.state_bytes(),
        "ledger": ledger_digests(d / "ref"),
        "slates": slates,
    }


def test_slates_through_kafka_with_kill_9(kafka_broker, recorded_slates, tmp_path):
    topics = kafka_topics(f"slates{os.getpid()}")
    create_topics(kafka_broker, topics)
    produce_file(kafka_broker.bootstrap, recorded_slates["path"], topics)
    port = free_port()
    cfg = kafka_settings(
        tmp_path / "state",
        kafka_broker.bootstrap,
        topics,
        "slates",
        bandits={BANDIT: BANDIT_CFG},
        metrics={"enabled": True, "port": port},
    )
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(json.loads(json.dumps(cfg))))
    log = (tmp_path / "serve.log").open("a")
    cmd = [
        sys.executable,
        "-m",
        "streaming_dpbandit.cli",
        "serve",
        "--config",
        str(cfg_path),
        "--no-progress",
    ]
    rng = random.Random(77)
    for _ in range(5):  # abrupt crashes at random moments
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        time.sleep(rng.uniform(1.0, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    deadline = time.time() + 600
    try:
        while time.time() < deadline:
            time.sleep(1.0)
            assert proc.poll() is None, "the service exited: see serve.log"
            try:
                m = scrape(port)
            except OSError:
                continue
            lag = sum(
                v
                for (n, lb), v in m.items()
                if n == "dpbandit_consumer_lag" and dict(lb)["topic"] in topics.values()
            )
            if (
                sample(m, "dpbandit_rounds", bandit=BANDIT) == EVENTS
                and sample(m, "dpbandit_pending_joins", bandit=BANDIT) == 0
                and lag == 0
            ):
                assert sample(m, "dpbandit_slate_items", bandit=BANDIT, status="reachable") == 40
                break
        else:
            pytest.fail("the service did not catch up within 10 minutes")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    snap = SnapshotStore(tmp_path / "state").load()
    assert learned_state_bytes(snap["bandits"]) == recorded_slates["state"]
    assert ledger_digests(tmp_path / "state") == recorded_slates["ledger"]  # none re-drawn
    seen: dict[str, set] = {}
    for msg in read_topic(kafka_broker.bootstrap, topics["decisions"]):
        dec = parse_decision(msg.value)
        assert isinstance(dec, SlateDecision) and len(dec.slate) == 5
        seen.setdefault(dec.event_id, set()).add(tuple(x.item_id for x in dec.slate))
    assert set(seen) == set(recorded_slates["slates"])  # every request got its slate
    assert all(v == {tuple(recorded_slates["slates"][k])} for k, v in seen.items())
