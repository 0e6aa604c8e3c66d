"""Several `dpbandit serve` replicas in one consumer group, against the real broker
(docs/scaling.md, pattern 1), on each Kafka client (``kafka.client``) and, with librdkafka,
each group protocol (``kafka.group_protocol``: classic, and KIP-848's consumer protocol):

* two replicas, 6 partitions, 24 bandits, 12,000 events with delayed feedback (two releases per
  bandit); one replica is killed with SIGKILL mid-stream and another started later: every
  bandit's final state equals the single-process run on the same stream, every event has
  exactly one committed decision under ``read_committed`` (the same as the single-process
  run's: no conflicting one), and the ledger has every release exactly once;
* a replica paused with SIGSTOP, whose tasks moved while it slept, cannot commit anything for
  them after SIGCONT: it is fenced (user-level bandits: their per-user counters move with the
  tasks).
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer, TopicPartition

from dpbandit_testing.stream_helpers import D, bandit_config, kafka_topics
from dpbandit_testing.user_level_helpers import K_USER, raw_ids_in, with_user_ids
from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.privacy.ledger import ReleaseRecord, read_ledger
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.kafka.state_store import KafkaChangelogStore
from streaming_dpbandit.stream.scaling.group import committed_lag
from streaming_dpbandit.stream.scaling.partitioning import partition_of
from streaming_dpbandit.stream.service import Service, learned_state_bytes
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.sim.synthetic import publish_jsonl, write_multi_bandit_stream
from streaming_dpbandit.stream.transport import InProcessTransport
from streaming_dpbandit.utils.serialization import dumps

pytestmark = pytest.mark.kafka

K = 3
ENV = FliphatPaperEnv(d=D, K=K, s_star=3)

#: (kafka.client, kafka.group_protocol) of the replicas
GROUP_CLIENTS = {
    "kafka-python": ("kafka-python", "classic"),
    "confluent-kafka": ("confluent-kafka", "classic"),
    "confluent-kafka-kip848": ("confluent-kafka", "consumer"),
}


# -- the stream ---------------------------------------------------------------------------------
def bandits_config(
    names: list[str],
    first_episode_len: int = 256,
    user_level: dict | None = None,
    seed_base: int = 1000,
) -> dict:
    """The bandits' configuration; the big test's short first episode (64) makes every bandit
    release twice within its 500 events (episodes doubling; each release 250 rounds after its
    episode, longer than the 2 s feedback window, 200 rounds of one bandit, so that no bandit
    waits for its feedback). ``user_level``: every bandit's user-level section; ``seed_base``:
    the bandits' seeds (a replica whose seeds differ must still resume every task with the keys
    of the task's snapshot)."""
    ul = {} if user_level is None else {"user_level": user_level}
    return {
        name: bandit_config(first_episode_len=first_episode_len) | {"seed": seed_base + i} | ul
        for i, name in enumerate(names)
    }


def reference(
    tmp: Path,
    path: Path,
    names: list[str],
    first_episode_len: int = 256,
    user_level: dict | None = None,
) -> dict:
    """The single-process run over the same stream (in-process, one partition per topic)."""
    st = ServiceSettings.model_validate(
        {
            "mode": "service",
            "bandits": bandits_config(names, first_episode_len, user_level),
            "snapshots": {"directory": str(tmp / "ref"), "interval_s": 3600},
            "metrics": {"enabled": False},
            "progress": False,
            "max_batch": 256,
            "idle_timeout_s": 3600,
        }
    )
    transport = InProcessTransport(
        FileSource(path, ("dpbandit.contexts", "dpbandit.feedback")), keep_outputs=True
    )
    svc = Service(st, transport, ServiceMetrics())
    svc.open()
    svc.run()
    decisions = {}
    for v in transport.outputs["dpbandit.decisions"]:
        d = json.loads(v)
        decisions[d["event_id"]] = (d["arm_id"], d["model_version"])
    states = {name: rt.state_dict() for name, rt in svc.bandits.items()}
    recs, torn = read_ledger(tmp / "ref" / "ledger.jsonl")
    assert torn == 0
    ledger = {r.release_id: r.content_digest() for r in recs}
    return {"decisions": decisions, "states": states, "ledger": ledger}


# -- Kafka helpers -------------------------------------------------------------------------------
def read_committed(bootstrap: str, topic: str, headers: bool = False) -> list:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    try:
        parts = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
        if not parts:  # not created yet
            return []
        c.assign(parts)
        c.seek_to_beginning(*parts)
        ends = c.end_offsets(parts)
        out = []
        while any(c.position(p) < ends[p] for p in parts):
            for msgs in c.poll(timeout_ms=500).values():
                out.extend(msgs)
        return out
    finally:
        c.close()


def committed_decisions(bootstrap: str, topic: str) -> dict[str, list]:
    seen: dict[str, list] = {}
    for m in read_committed(bootstrap, topic):
        d = json.loads(m.value)
        replica = dict(m.headers or []).get("replica", b"").decode()
        seen.setdefault(d["event_id"], []).append((d["arm_id"], d["model_version"], replica))
    return seen


def group_lag(bootstrap: str, group: str, topics: dict) -> int | None:
    return committed_lag(bootstrap, group, [topics["contexts"], topics["feedback"]])


def write_config(
    tmp: Path,
    name: str,
    bootstrap: str,
    topics: dict,
    group: str,
    names,
    first_episode_len: int = 256,
    user_level: dict | None = None,
    seed_base: int = 1000,
    client: str = "kafka-python",
    **scaling,
):
    library, protocol = GROUP_CLIENTS[client]
    kafka = {
        "bootstrap_servers": bootstrap,
        "client": library,
        "group_protocol": protocol,
        "group_id": group,
        "client_id": name,
        "topics": topics,
        "create_topics": True,
        "max_poll_records": 2000,
        "poll_timeout_ms": 50,
    }
    if protocol == "classic":  # (the consumer protocol's session is the broker's: 10 s here)
        kafka["session_timeout_ms"] = 10_000
    cfg = {
        "mode": "service",
        "kafka": kafka,
        "scaling": {"mode": "group", **scaling},
        "bandits": bandits_config(names, first_episode_len, user_level, seed_base),
        "metrics": {"enabled": False},
        "progress": False,
        "max_batch": 256,
        "idle_timeout_s": 3600,
        "log_level": "INFO",
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(cfg))))
    return path


LIVE: list[Replica] = []


@pytest.fixture(autouse=True)
def _no_orphan_replicas():
    yield
    while LIVE:
        r = LIVE.pop()
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


class Replica:
    """A `dpbandit serve` replica run the way docs/operations.md asks: under a supervisor.

    A replica whose group membership stalls (kafka-python's re-join stall) replaces its consumer
    in-process (``scaling/group.py``); it must never exit on its own, so any exit while the
    test waits fails it.
    """

    def __init__(self, tmp: Path, name: str, config: Path):
        LIVE.append(self)
        self.name = name
        self.config = config
        self.log_path = tmp / f"{name}.log"
        self.log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(config)],
            stdout=self.log,
            stderr=self.log,
        )

    def supervise(self) -> None:
        """Fail on any exit."""
        rc = self.proc.poll()
        assert rc is None, f"replica {self.name} exited with {rc}:\n{self.text()[-3000:]}"

    def signal(self, sig) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 120) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        self.log.close()
        return rc

    def text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()


def wait_for(cond, timeout: float, what: str, replicas=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for r in replicas:
            r.supervise()
        if cond():
            return
        time.sleep(1.0)
    logs = "\n".join(f"--- {r.name}\n{r.text()[-2000:]}" for r in replicas)
    pytest.fail(f"timed out waiting for {what}\n{logs}")


def final_states(bootstrap: str, state_topic: str, partitions: int) -> dict:
    store = KafkaChangelogStore(bootstrap, state_topic)
    out = {}
    for p in range(partitions):
        snap = store.load(f"task-{p}")
        if snap is not None:
            out.update(snap["bandits"])
    return out


def ledger_records(bootstrap: str, topic: str) -> list[ReleaseRecord]:
    return [ReleaseRecord.from_dict(json.loads(m.value)) for m in read_committed(bootstrap, topic)]


def check_against_reference(bootstrap, topics, group, ref, partitions, own_seeds=False):
    """``own_seeds``: the replicas were configured with other seeds than the reference (the
    policies record their configured ``seed`` parameter; every key must be the snapshot's)."""
    states = final_states(bootstrap, f"{group}.state", partitions)
    assert set(states) == set(ref["states"])

    def learned(name, st) -> bytes:
        if own_seeds:  # (a user-level bandit: its policy's state is under "policy")
            st = copy.deepcopy(st)
            st["policy"]["policy"]["params"].pop("seed")
        return learned_state_bytes({name: st})

    for name, st in states.items():  # nothing lost or counted twice, bandit by bandit
        assert learned(name, st) == learned(name, ref["states"][name]), name
    seen = committed_decisions(bootstrap, topics["decisions"])
    assert set(seen) == set(ref["decisions"])  # no event without a decision
    dup = {k: v for k, v in seen.items() if len(v) != 1}
    assert not dup, (
        f"{len(dup)} events with several committed decisions, e.g. {next(iter(dup.items()))}"
    )
    assert {k: v[0][:2] for k, v in seen.items()} == ref["decisions"]
    recs = ledger_records(bootstrap, f"{group}.ledger")
    ids = [r.release_id for r in recs]
    assert len(ids) == len(set(ids)), "a release was recorded twice"
    assert {r.release_id: r.content_digest() for r in recs} == ref["ledger"]
    return seen


USER_LEVEL = {"max_contributions_per_user": K_USER}


def check_users(bootstrap, topics, group, partitions, names, ref, replicas) -> None:
    """User level: every bandit's counters are the single process's (admitted + bounded =
    its decisions, many bounded), and no raw user id is on any topic or in any log."""
    states = final_states(bootstrap, f"{group}.state", partitions)
    for name in names:
        got = states[name]["policy"]["user_bound"]["counters"]
        assert got == ref["states"][name]["policy"]["user_bound"]["counters"], name
        assert got["admitted"] + got["bounded"] == 1500 and got["bounded"] > 300, got
    for topic in (
        topics["decisions"],
        topics["dead_letter"],
        f"{group}.state",
        f"{group}.ledger",
    ):
        msgs = read_committed(bootstrap, topic)
        blob = "".join(m.value.decode("latin-1") for m in msgs if m.value)
        assert raw_ids_in(blob) == [], f"user ids on {topic}"
    assert raw_ids_in(dumps(states).decode()) == []  # the snapshots whole, however chunked
    for r in replicas:
        assert raw_ids_in(r.text()) == [], f"user ids in the log of {r.name}"


# -- tests ----------------------------------------------------------------------------------------
BANDITS = [f"b{i:02d}" for i in range(24)]
PARTITIONS = 6
EVENTS_PER_BANDIT = 500
FIRST_EPISODE = 64  # two releases per bandit within its 500 events (bandits_config)


@pytest.fixture(scope="module")
def big_stream(tmp_path_factory):
    d = tmp_path_factory.mktemp("group-stream")
    path = d / "stream.jsonl"
    counts = write_multi_bandit_stream(
        path, BANDITS, EVENTS_PER_BANDIT, FliphatPaperEnv(d=D, K=K, s_star=3), seed=11
    )
    assert counts["contexts"] == len(BANDITS) * EVENTS_PER_BANDIT
    ref = reference(d, path, BANDITS, FIRST_EPISODE)
    return {"path": path, "counts": counts, "ref": ref}


@pytest.mark.parametrize("client", list(GROUP_CLIENTS))
def test_kill_9_of_one_replica_of_two_and_a_late_joiner_equal_the_single_process_run(
    kafka_broker, big_stream, tmp_path, client
):
    assert len({partition_of(b, PARTITIONS) for b in BANDITS}) == PARTITIONS
    group = f"grp{os.getpid()}{client[-6:]}"
    topics = kafka_topics(group)
    for t in (topics["contexts"], topics["feedback"]):
        kafka_broker.create_topic(t, PARTITIONS)
    # 60% of the stream now, the rest once the late joiner owns tasks: however fast the
    # replicas are, work remains for it (the same ordered stream, published in two parts)
    lines = Path(big_stream["path"]).read_text().splitlines(keepends=True)
    cut = len(lines) * 3 // 5
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_text("".join(lines[:cut]))
    rest.write_text("".join(lines[cut:]))
    publish_jsonl(kafka_broker.bootstrap, first, topics)
    boot = kafka_broker.bootstrap
    total = len(BANDITS) * EVENTS_PER_BANDIT

    def cfg(name):
        return write_config(
            tmp_path, name, boot, topics, group, BANDITS, FIRST_EPISODE, client=client
        )

    replicas = [Replica(tmp_path, f"r{i}", cfg(f"r{i}")) for i in range(2)]

    def decided() -> int:
        return len(committed_decisions(boot, topics["decisions"]))

    def committed_by(name: str) -> int:
        seen = committed_decisions(boot, topics["decisions"]).values()
        return sum(1 for v in seen if v[0][2] == name)

    owns = re.compile(r"assigned tasks \[\d")
    wait_for(lambda: all(owns.search(r.text()) for r in replicas), 300, "tasks for both", replicas)
    wait_for(lambda: decided() >= total // 4, 600, "a quarter of the decisions", replicas)
    # r1 has committed work of its own (on a loaded machine r0 alone could reach the quarter)
    wait_for(lambda: committed_by("r1") > 0, 600, "r1's first committed decisions", replicas)
    replicas[1].signal(signal.SIGKILL)  # mid-stream, with an open transaction
    replicas[1].proc.wait()
    alive = [replicas[0]]
    wait_for(lambda: decided() >= total // 2, 600, "half of the decisions", alive)
    late = Replica(tmp_path, "r2", cfg("r2"))
    alive.append(late)
    wait_for(lambda: owns.search(late.text()), 300, "tasks for the late joiner", alive)
    publish_jsonl(boot, rest, topics)
    wait_for(lambda: group_lag(boot, group, topics) == 0, 900, "the end of the stream", alive)
    for r in alive:
        assert r.stop() == 0, r.text()[-3000:]
    seen = check_against_reference(boot, topics, group, big_stream["ref"], PARTITIONS)
    by = {}
    for v in seen.values():
        by[v[0][2]] = by.get(v[0][2], 0) + 1
    assert by.get("r2", 0) > 0 and by.get("r1", 0) > 0, by  # the work really was shared


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka-kip848"])
def test_a_paused_replica_is_fenced_when_it_resumes(kafka_broker, tmp_path, client):
    """With user-level bandits: the per-user counters are task state (in the task's snapshot,
    committed with its offsets): they move with the task, and the paused replica's uncommitted
    admissions are redone by the new owner exactly once, as the single process made them (the
    event-level checks are the same, and hold with them)."""
    user_level = USER_LEVEL
    names = [f"p{i:02d}" for i in range(8)]
    parts = 4
    path = tmp_path / "stream.jsonl"
    write_multi_bandit_stream(path, names, 1500, ENV, seed=3)
    if user_level is not None:
        path = with_user_ids(path, tmp_path / "users.jsonl")
    ref = reference(tmp_path, path, names, user_level=user_level)
    group = f"pause{os.getpid()}{client[-6:]}"
    topics = kafka_topics(group)
    for t in (topics["contexts"], topics["feedback"]):
        kafka_broker.create_topic(t, parts)
    boot = kafka_broker.bootstrap
    # the sleeper commits rarely: when paused it certainly holds uncommitted work
    cfg = {"user_level": user_level, "client": client}
    a = Replica(
        tmp_path,
        "a",
        write_config(tmp_path, "a", boot, topics, group, names, commit_interval_s=30, **cfg),
    )
    wait_for(lambda: "assigned tasks [0, 1, 2, 3]" in a.text(), 120, "a owns every task", [a])
    publish_jsonl(boot, path, topics)
    wait_for(lambda: "release" in a.text(), 300, "a's first releases", [a])
    a.signal(signal.SIGSTOP)
    paused_at = time.time()
    if user_level is not None:  # b's own seeds: every key (user-id hash, noise) must come
        cfg["seed_base"] = 2000  # from the tasks' snapshots, or b's state would differ
    b = Replica(tmp_path, "b", write_config(tmp_path, "b", boot, topics, group, names, **cfg))
    try:
        wait_for(lambda: group_lag(boot, group, topics) == 0, 600, "b to finish the stream", [b])
        pre = committed_decisions(boot, topics["decisions"])
        assert set(pre) == set(ref["decisions"])
    finally:
        a.signal(signal.SIGCONT)
    resumed_at = time.time()
    wait_for(lambda: "fenced" in a.text().lower() or "lost" in a.text(), 120, "a to notice", [a, b])
    time.sleep(5)  # a rejoins the group; anything it still tried to write stays aborted
    assert b.stop() == 0 and a.stop() == 0
    seen = check_against_reference(boot, topics, group, ref, parts, own_seeds=bool(user_level))
    assert seen == pre  # nothing a wrote after it resumed became visible
    assert resumed_at - paused_at > 10  # longer than the session: its tasks had moved
    if user_level is not None:
        check_users(boot, topics, group, parts, names, ref, [a, b])
    # the group's privacy spend, from the ledger topic
    cli = [sys.executable, "-m", "streaming_dpbandit.cli", "budget", "--kafka", boot]
    out = subprocess.run(
        [*cli, f"{group}.ledger", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    budget = json.loads(out.stdout)
    assert budget["records"] == len(ref["ledger"])
    assert sorted(b["spend"]["bandit_id"] for b in budget["bandits"]) == names
    missing = subprocess.run(
        [*cli, "no-such.ledger"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "no ledger topic 'no-such.ledger'" in missing.stderr
