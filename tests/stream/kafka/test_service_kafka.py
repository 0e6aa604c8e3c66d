"""The service through a real Apache Kafka broker (started by scripts/run-tests.sh).

* end to end: a 20,000-event recorded stream with delayed, shuffled feedback → exactly one
  decision per context, and the learned state equals the in-process run on the same stream;
* crashes: `dpbandit serve` is killed with SIGKILL 22 times (8 with librdkafka), each time at
  a random moment after the process has published decisions of its own, and the broker is
  restarted mid-stream; the end state, the ledger and the decisions match the crash-free run;
* the transport's tests run over both Kafka clients (``kafka_client``, conftest.py);
* bad input: the 23-kind table goes to the dead-letter topic with its reasons;
* /metrics scraped over HTTP shows the documented series with correct values.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from dpbandit_testing.kafka_helpers import (
    PARTITIONS,
    create_topics,
    free_port,
    kafka_settings,
    produce_file,
    read_topic,
    run_in_thread,
    sample,
    scrape,
)
from dpbandit_testing.stream_helpers import (
    BANDIT,
    CATALOG,
    bad_input_stream,
    bandit_config,
    catalog_config,
    kafka_topics,
    ledger_digests,
    record_stream,
    run_file,
)
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.runner import kafka_transport
from streaming_dpbandit.stream.service import Service, learned_state_bytes
from streaming_dpbandit.stream.snapshot import SnapshotStore

pytestmark = pytest.mark.kafka

EVENTS = 20_000


# -- fixtures -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A recorded 20,000-event stream and the crash-free in-process run over it."""
    d = tmp_path_factory.mktemp("kafka-stream")
    path = d / "stream.jsonl"
    record_stream(path, EVENTS, seed=5, state_dir=d / "rec")
    svc, transport, summary = run_file(d / "ref", path)
    decisions = {}
    for v in transport.outputs["dpbandit.decisions"]:
        dec = json.loads(v)
        decisions[dec["event_id"]] = (dec["arm_id"], dec["model_version"])
    n_feedback = sum(
        1 for x in path.read_text().splitlines() if json.loads(x)["topic"] == "feedback"
    )
    return {
        "path": path,
        "state": svc.state_bytes(),
        "ledger": ledger_digests(d / "ref"),
        "decisions": decisions,
        "summary": summary,
        "n_feedback": n_feedback,
    }


def finished(svc: Service, n_feedback: int) -> bool:
    rt = svc.bandits[BANDIT]
    fb = sum(off for (t, _), off in svc.offsets.items() if t.endswith(".feedback"))
    return rt.policy.t >= EVENTS and fb >= n_feedback and not rt.join.pending


# -- tests --------------------------------------------------------------------------------------
def test_end_to_end_matches_the_in_process_run(kafka_broker, recorded, tmp_path, kafka_client):
    topics = kafka_topics(f"e2e{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    produce_file(kafka_broker.bootstrap, recorded["path"], topics)
    st = ServiceSettings.model_validate(
        kafka_settings(
            tmp_path, kafka_broker.bootstrap, topics, f"e2e-{kafka_client}", client=kafka_client
        )
    )
    svc, th, result = run_in_thread(st, lambda s: finished(s, recorded["n_feedback"]))
    th.join(timeout=600)
    assert not th.is_alive() and result, "the service did not finish"
    assert svc.state_bytes() == recorded["state"]
    assert ledger_digests(tmp_path) == recorded["ledger"]
    decs = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, topics["decisions"])]
    ids = [d["event_id"] for d in decs]
    assert len(ids) == EVENTS and len(set(ids)) == EVENTS  # exactly one decision per context
    assert {d["event_id"]: (d["arm_id"], d["model_version"]) for d in decs} == recorded["decisions"]


def test_feedback_running_ahead_is_paced_and_changes_nothing(
    kafka_broker, recorded, tmp_path, monkeypatch, kafka_client
):
    """Read from full topics, the small feedback messages run far ahead of the large
    contexts. Above EARLY_PAUSE held messages the feedback partitions pause (and resume at a
    tenth, through ``resume_partition``): at most one poll more is held, and the outcome is
    the in-process run's."""
    from streaming_dpbandit.stream import feedback as feedback_module

    limit, poll = 400, 200
    monkeypatch.setattr(feedback_module, "EARLY_PAUSE", limit)
    topics = kafka_topics(f"pace{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    produce_file(kafka_broker.bootstrap, recorded["path"], topics)
    cfg = kafka_settings(
        tmp_path, kafka_broker.bootstrap, topics, f"pace-{kafka_client}", client=kafka_client
    )
    cfg["kafka"]["max_poll_records"] = poll
    st = ServiceSettings.model_validate(cfg)
    held, paused = [], []

    def done(s) -> bool:
        held.append(s.bandits[BANDIT].join.early_count)
        paused.append(bool(s.feedback_paused))
        gauge = s.metrics.registry.get_sample_value("dpbandit_feedback_paused")
        assert gauge == float(paused[-1])  # the gauge shows the pause
        return finished(s, recorded["n_feedback"])

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=600)
    assert not th.is_alive() and result, "the service did not finish"
    assert svc.state_bytes() == recorded["state"]
    assert ledger_digests(tmp_path) == recorded["ledger"]
    assert sum(paused) > 0 and not paused[-1]  # it paused, and it resumed
    assert limit < max(held) <= limit + poll


def test_a_decided_chunk_goes_to_the_partition_its_key_hashes_to(
    kafka_broker, tmp_path, kafka_client
):
    """``send_many`` hashes a chunk's key once: every record lands in the partition that
    kafka-python's default partitioner picks for that key record by record (``send``); both
    clients put a key on the same partition (the Java client's murmur2 partitioner)."""
    from kafka.partitioner.default import murmur2

    topics = kafka_topics(f"keys{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    st = ServiceSettings.model_validate(
        kafka_settings(
            tmp_path, kafka_broker.bootstrap, topics, f"keys-{kafka_client}", client=kafka_client
        )
    )
    transport = kafka_transport(st.kafka)
    transport.open({})
    keys = [f"bandit-{i}".encode() for i in range(12)]
    try:
        for key in keys:
            for _ in range(3):
                transport.send(topics["decisions"], key, b"one " + key)
            transport.send_many(topics["decisions"], key, [b"many " + key] * 3)
        transport.flush()
    finally:
        transport.close()
    where: dict[bytes, set[tuple[bytes, int]]] = {}
    for m in read_topic(kafka_broker.bootstrap, topics["decisions"]):
        where.setdefault(m.key, set()).add((m.value.split(b" ")[0], m.partition))
    assert set(where) == set(keys)
    for key, seen in where.items():
        (one,) = {p for how, p in seen if how == b"one"}
        assert seen == {(b"one", one), (b"many", one)}, key
        assert one == (murmur2(key) & 0x7FFFFFFF) % PARTITIONS, key  # the Java client's
    assert len({p for seen in where.values() for _, p in seen}) == PARTITIONS  # keys spread


#: kills per client, every one of a process that is deciding. librdkafka's run checks the same
#: property (random kill moments, a broker restart in the middle) with fewer kills: the CI budget
#: (kafka-python's 22 took 110-240 s; the transport-independent recovery is covered by them)
KILLS = {"kafka-python": 22, "confluent-kafka": 8}


class DecisionCount:
    """Decisions published so far: the sum of the decisions topic's end offsets."""

    def __init__(self, bootstrap: str, topic: str):
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self.parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    def __call__(self) -> int:
        for _ in range(120):  # the broker may be restarting
            try:
                return sum(self.consumer.end_offsets(self.parts).values())
            except Exception:
                time.sleep(0.5)
        raise RuntimeError("the broker did not answer for a minute")

    def wait_beyond(self, before: int, proc, timeout: float = 600.0) -> float:
        """Seconds until decisions beyond ``before`` appear; fails if ``proc`` exits or none
        appear within ``timeout`` (a liveness bound, not a speed target: on a loaded 2-core
        machine starting Python and importing the package took up to 90 s)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            assert proc.poll() is None, "the service exited: see serve.log"
            if self() > before:
                return time.monotonic() - t0
            time.sleep(0.05)
        pytest.fail(f"the restarted service published no decision within {timeout:.0f} s")


def test_kill_9_at_random_moments_and_a_broker_restart_change_nothing(
    kafka_broker, recorded, tmp_path, capsys, kafka_client
):
    """The recorded stream arrives in slices, one before each start, so that every process
    has contexts to decide; each is killed with SIGKILL at a random moment after it has
    published decisions of its own (the decisions topic grew since it started, and no other
    process was alive), 22 times (8 with librdkafka), with a broker restart in the middle.
    Before issue 19, a restarted process waited out the 45-s session of the one it replaced,
    so most kills hit a process that had never got its partitions. The end state, the ledger
    and the decisions match the crash-free run."""
    topics = kafka_topics(f"crash{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    kills = KILLS[kafka_client]
    lines = recorded["path"].read_text().splitlines()
    n_slices = kills + 2  # one more after the broker restart, one for the last run
    cuts = [round(i * len(lines) / n_slices) for i in range(n_slices + 1)]
    slices = [lines[a:b] for a, b in itertools.pairwise(cuts)]
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", linger_ms=5)

    def produce_slice() -> None:
        for line in slices.pop(0):
            rec = json.loads(line)
            producer.send(
                topics[rec["topic"]],
                key=BANDIT.encode(),
                value=rec["value"].encode(),
                timestamp_ms=rec["timestamp"],  # the recorded stream's clock
            )
        producer.flush()

    port = free_port()
    cfg = kafka_settings(
        tmp_path / "state",
        kafka_broker.bootstrap,
        topics,
        f"crash-{kafka_client}",
        client=kafka_client,
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
    count = DecisionCount(kafka_broker.bootstrap, topics["decisions"])
    rng = random.Random(2026)
    deciding_kills, to_first_decision = 0, []
    broker_restarted = False
    for k in range(kills):
        produce_slice()
        before = count()  # the previous process is dead: only this one writes decisions now
        proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        to_first_decision.append(count.wait_beyond(before, proc))
        if k == kills // 2:
            kafka_broker.restart()  # the broker goes away and comes back while the service runs
            broker_restarted = True
            before = count()
            produce_slice()
            count.wait_beyond(before, proc)  # deciding again
        time.sleep(rng.uniform(0.0, 1.0))
        assert proc.poll() is None and count() > before  # killed while deciding
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deciding_kills += 1
    with capsys.disabled():
        print(
            f"\nkill -9: {deciding_kills} kills, each of a process that had published decisions "
            f"since its start; start to first decision median "
            f"{sorted(to_first_decision)[len(to_first_decision) // 2]:.1f} s, "
            f"max {max(to_first_decision):.1f} s"
        )
    assert not slices[1:]
    produce_slice()
    producer.close()
    # a last run to the end of the stream, then a graceful stop (SIGTERM)
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
                if n == "dpbandit_consumer_lag"
                and dict(lb)["topic"].startswith(topics["contexts"][:-9])
            )
            if (
                sample(m, "dpbandit_rounds", bandit=BANDIT) == EVENTS
                and sample(m, "dpbandit_pending_joins", bandit=BANDIT) == 0
                and lag == 0
            ):
                break
        else:
            pytest.fail("the service did not catch up within 10 minutes")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert deciding_kills == kills and broker_restarted
    snap = SnapshotStore(tmp_path / "state").load()
    assert learned_state_bytes(snap["bandits"]) == recorded["state"]  # nothing lost or doubled
    assert ledger_digests(tmp_path / "state") == recorded["ledger"]  # no release re-drawn
    seen: dict[str, set] = {}
    for msg in read_topic(kafka_broker.bootstrap, topics["decisions"]):
        d = json.loads(msg.value)
        seen.setdefault(d["event_id"], set()).add((d["arm_id"], d["model_version"]))
    assert set(seen) == set(recorded["decisions"])  # no event lacks a decision
    assert all(v == {recorded["decisions"][k]} for k, v in seen.items())  # repeats identical


def test_bad_input_through_kafka(kafka_broker, recorded, tmp_path):
    base = tmp_path / "valid.jsonl"
    lines = recorded["path"].read_text().splitlines()
    # the first 1,500 contexts and their feedback (plus the end-of-stream watermark)
    cut, seen = [], 0
    for x in lines:
        rec = json.loads(x)
        if rec["topic"] == "contexts":
            seen += 1
            if seen > 1500:
                continue
        cut.append(x)
    base.write_text("\n".join(cut) + "\n")
    path = tmp_path / "bad.jsonl"
    expected, moved = bad_input_stream(base, path)
    ref_svc, ref_transport, _ = run_file(tmp_path / "ref", base)
    for v in ref_transport.outputs.get("dpbandit.dead-letter", []):
        dl = json.loads(v)
        kind = "contexts" if dl["source_topic"].endswith("contexts") else "feedback"
        expected[(kind, moved[(kind, dl["offset"])])] = dl["reason"]
    topics = kafka_topics(f"bad{os.getpid()}")
    create_topics(kafka_broker, topics)
    counts = produce_file(kafka_broker.bootstrap, path, topics)
    cfg = kafka_settings(
        tmp_path / "state",
        kafka_broker.bootstrap,
        topics,
        "bad",
        bandits={BANDIT: bandit_config(), CATALOG: catalog_config()},
        max_message_bytes=100_000,
    )
    st = ServiceSettings.model_validate(cfg)

    def done(s):
        total = {"contexts": 0, "feedback": 0}
        for (t, _), off in s.offsets.items():
            total["contexts" if t.endswith("contexts") else "feedback"] += off
        return total == counts and not s.bandits[BANDIT].join.pending

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=300)
    assert result, "the service did not finish"
    # Kafka spreads keys over partitions: map (partition, offset) back to the file's order
    dead = [json.loads(m.value) for m in read_topic(kafka_broker.bootstrap, topics["dead_letter"])]
    got = {}
    positions = _positions(kafka_broker.bootstrap, topics)
    for dl in dead:
        kind = "contexts" if dl["source_topic"] == topics["contexts"] else "feedback"
        got[(kind, positions[(dl["source_topic"], dl["partition"], dl["offset"])])] = dl["reason"]
    assert got == expected
    assert len(set(expected.values())) >= 15
    assert (
        svc.state_bytes().startswith(b"{")
        and learned_state_bytes({BANDIT: svc.bandits[BANDIT].state_dict()}) == ref_svc.state_bytes()
    )


def _positions(bootstrap, topics) -> dict:
    """(topic, partition, offset) → the message's position in the file (its "index" header)."""
    out = {}
    for kind in ("contexts", "feedback"):
        for m in read_topic(bootstrap, topics[kind]):
            out[(m.topic, m.partition, m.offset)] = int(dict(m.headers)["index"])
    return out


def test_metrics_endpoint_over_http(kafka_broker, recorded, tmp_path, kafka_client):
    """Scrape /metrics of a real service after a run: documented series, correct values."""
    base = tmp_path / "small.jsonl"
    lines = recorded["path"].read_text().splitlines()
    keep, seen = [], 0
    for x in lines:
        if json.loads(x)["topic"] == "contexts":
            seen += 1
            if seen > 3000:
                continue
        keep.append(x)
    base.write_text("\n".join(keep) + "\n")
    topics = kafka_topics(f"metrics{os.getpid()}{kafka_client[:5]}")
    create_topics(kafka_broker, topics)
    counts = produce_file(kafka_broker.bootstrap, base, topics)
    port = free_port()
    cfg = kafka_settings(
        tmp_path / "state",
        kafka_broker.bootstrap,
        topics,
        f"metrics-{kafka_client}",
        client=kafka_client,
        metrics={"enabled": True, "port": port},
    )
    st = ServiceSettings.model_validate(cfg)
    from streaming_dpbandit.metrics import ServiceMetrics
    from streaming_dpbandit.stream.runner import start_metrics_server

    metrics = ServiceMetrics()
    server, bound = start_metrics_server(st, metrics)
    svc = Service(st, kafka_transport(st.kafka), metrics)
    svc.open()
    svc.run(
        progress=lambda s: (
            s.request_stop()
            if (
                s.bandits[BANDIT].policy.t >= 3000
                and sum(o for (t, _), o in s.offsets.items() if t.endswith("feedback"))
                >= counts["feedback"]
            )
            else None
        )
    )
    try:
        m = scrape(bound)
    finally:
        server.shutdown()
    recs, _ = read_ledger(tmp_path / "state" / "ledger.jsonl")
    stats = svc.bandits[BANDIT].stats
    assert sample(m, "dpbandit_events_total", bandit=BANDIT, outcome="decided") == 3000
    assert sample(m, "dpbandit_rounds", bandit=BANDIT) == 3000
    mv = svc.bandits[BANDIT].policy.model_version
    assert sample(m, "dpbandit_model_version", bandit=BANDIT) == mv
    assert sample(m, "dpbandit_ledger_releases", bandit=BANDIT) == len(recs) >= 3
    assert (
        sample(
            m,
            "dpbandit_privacy_epsilon_spent",
            bandit=BANDIT,
            calibration="certified",
            accountant="basic",
        )
        == 5.0
    )
    assert sample(m, "dpbandit_privacy_delta_spent", bandit=BANDIT, calibration="certified") == 1e-4
    assert (
        sample(
            m,
            "dpbandit_calibration_info",
            bandit=BANDIT,
            policy="fliphat",
            calibration="certified",
            dp_valid="true",
        )
        == 1
    )
    assert sample(m, "dpbandit_decision_latency_seconds_count", bandit=BANDIT) == 3000
    joined = sample(m, "dpbandit_feedback_total", bandit=BANDIT, outcome="joined") or 0
    assert (
        joined + (sample(m, "dpbandit_feedback_total", bandit=BANDIT, outcome="held_early") or 0)
        >= stats["joined"]
    )
    assert sample(m, "dpbandit_checkpoints_total", reason="release") >= len(recs)
    assert sample(m, "dpbandit_checkpoint_age_seconds") is not None
    for name in (
        "dpbandit_pending_joins",
        "dpbandit_reward_sum",
        "dpbandit_episode_progress_ratio",
        "dpbandit_blocked",
    ):
        assert sample(m, name, bandit=BANDIT) is not None, name
    lags = [v for (n, _), v in m.items() if n == "dpbandit_consumer_lag"]
    assert lags and max(lags) == 0


def test_an_undeliverable_record_fails_the_flush(kafka_broker, tmp_path, kafka_client):
    """A record the broker refuses (larger than its ``message.max.bytes``) makes ``flush`` —
    which the service calls before every snapshot — raise, so no snapshot implies an output
    that was never written (kafka-python's own flush returns when the record has failed)."""
    from streaming_dpbandit.stream.errors import ServiceStartError

    topics = kafka_topics(f"undeliverable{os.getpid()}{kafka_client[0]}")
    create_topics(kafka_broker, topics)
    st = ServiceSettings.model_validate(
        kafka_settings(
            tmp_path, kafka_broker.bootstrap, topics, "undeliverable", client=kafka_client
        )
    )
    transport = kafka_transport(st.kafka)
    transport.open({})
    try:
        transport.send(topics["decisions"], b"k", b"small")
        transport.flush()  # delivered: no error
        transport.send(topics["decisions"], b"k", b"x" * (2 << 20))  # the broker takes ≤ 1 MiB
        with pytest.raises(ServiceStartError, match=r"1 output record\(s\) could not be written"):
            transport.flush()
    finally:
        transport.close()
