"""Scaling pattern 1 (replicas in a consumer group) on this machine; prints JSON.

* throughput with 1, 2 and 3 ``dpbandit serve`` replicas (``scaling.mode: group``) over the same
  recorded stream (many FLIPHAT bandits, 12 partitions): contexts per second from the moment
  every replica holds its tasks to the moment the group has committed the whole input;
* the rebalance pause when a replica joins a running group (from the first revocation to the
  last task restored, from the replicas' logs);
* recovery after ``kill -9`` of a replica: from the kill to its tasks running elsewhere;
* ``--cpu`` (issue 32): contexts per service CPU-second with 2 replicas for each client of
  ``kafka.client`` × {JSON, binary ``raw-f64``} features — the replicas' CPU time (all their
  threads, from /proc) from the moment both hold their tasks on empty topics to the group's
  last commit, the stream published in between (each record with its recorded timestamp), the
  clients alternated with the order reversed every pair — and the resident memory of a replica
  at the end of each run;
* ``--memory`` (issue 32): the resident memory (VmRSS, and its peak VmHWM) of each of 2
  replicas of ``--client`` sampled every ``--sample-s`` seconds while they decide the whole
  stream (published after both hold their tasks), against the input records the group has
  committed so far — is memory flat over 10^6 events in group mode.

Needs a broker: ``DPBANDIT_BENCH_KAFKA=host:port`` (e.g. one started with scripts/kafka.sh).

    python bench/bench_scaling.py [--bandits 48] [--events 500] [--replicas 1,2,3]
    python bench/bench_scaling.py --cpu [--pairs 2] [--encodings json,raw-f64]
    python bench/bench_scaling.py --memory --events 10600 [--client confluent-kafka]
        [--encodings raw-f64] [--sample-s 10] [--publish-rate 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml
from kafka.admin import KafkaAdminClient, NewTopic

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.stream.scaling.group import committed_lag
from streaming_dpbandit.stream.sim.synthetic import write_multi_bandit_stream

PARTITIONS = 12
LOG_TIME = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?(revoked|assigned) tasks (\[.*?\])"
)


def bandit(seed: int) -> dict:
    return {
        "policy": {
            "policy": "fliphat",
            "d": 20,
            "s": 4,
            "epsilon": 5.0,
            "delta": 1e-4,
            "b_max": 3.5,
            "first_episode_len": 256,
            "swap_delay": 250,
        },
        "feedback_window": 2.0,
        "seed": seed,
        "reward_bounds": [-50, 50],
    }


def group_lag(bootstrap: str, group: str, topics: dict) -> int | None:
    return committed_lag(bootstrap, group, [topics["contexts"], topics["feedback"]])


class Replica:
    def __init__(self, tmp: Path, name: str, cfg: dict):
        self.name = name
        path = tmp / f"{name}.yaml"
        cfg = json.loads(json.dumps(cfg))
        cfg["kafka"]["client_id"] = name
        path.write_text(yaml.safe_dump(cfg))
        self.log_path = tmp / f"{name}.log"
        self.log = self.log_path.open("w")
        cmd = [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(path)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)

    def events(self) -> list[tuple[float, str, list]]:
        out = []
        for line in self.log_path.read_text().splitlines():
            m = LOG_TIME.match(line)
            if m:
                t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                out.append((t, m.group(2), json.loads(m.group(3))))
        return out

    def tasks(self) -> list:
        ev = [e for e in self.events() if e[1] == "assigned"]
        return ev[-1][2] if ev else []

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=120)
        self.log.close()


def proc_stat(pid: int) -> tuple[float, float]:
    """(CPU seconds so far, resident MB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu, int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def binary_stream(path: Path, out: Path) -> Path:
    """The JSONL stream with every context as the binary ``raw-f64`` message (base64 in the
    JSONL line; published as raw bytes)."""
    import base64

    import numpy as np

    from streaming_dpbandit.stream.binary_context import encode_binary_context

    with out.open("w") as fh:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            v = rec["value"]
            if rec["topic"] == "contexts":
                X = np.array([a["features"] for a in v["arms"]])
                ids = [a["arm_id"] for a in v["arms"]]
                raw = encode_binary_context(v["event_id"], v["bandit_id"], v["event_time"], X, ids)
                rec = {
                    "topic": "contexts",
                    "key": v["bandit_id"],
                    "b64": base64.b64encode(raw).decode(),
                    "timestamp": rec.get("timestamp"),
                }
            fh.write(json.dumps(rec) + "\n")
    return out


def publish(
    bootstrap: str, path: Path, topics: dict, rate: float = 0.0, sent: list | None = None
) -> None:
    """A recorded stream to the topics, keyed by bandit (binary contexts as raw bytes), each
    record stamped with its line's timestamp (the service's stream clock: a record stamped now
    with an event time of the recorded past is dead-lettered, ``event_time_out_of_range``);
    at most ``rate`` records per second (0: as fast as it goes), the count so far in
    ``sent[0]``."""
    import base64

    from streaming_dpbandit.settings import KafkaSettings
    from streaming_dpbandit.stream.kafka.seam import kafka_client

    settings = KafkaSettings(bootstrap_servers=bootstrap)
    p = kafka_client("confluent-kafka").producer(settings, linger_ms=20)
    t0 = time.time()
    for i, line in enumerate(path.read_text().splitlines()):
        if rate and i % 100 == 0:
            time.sleep(max(0.0, t0 + i / rate - time.time()))
            if sent is not None:
                sent[0] = i
        rec = json.loads(line)
        stamp = rec.get("timestamp")
        if "b64" in rec:
            raw = base64.b64decode(rec["b64"])
            p.send(topics["contexts"], rec["key"].encode(), raw, timestamp_ms=stamp)
        else:
            v = rec["value"]
            value = json.dumps(v).encode()
            p.send(topics[rec["topic"]], v["bandit_id"].encode(), value, timestamp_ms=stamp)
    p.flush()
    p.close()
    if sent is not None:
        sent[0] = i + 1


def setup(bootstrap: str, prefix: str, path: Path | None) -> dict:
    """The group's topics, and ``path`` published to them (unless None)."""
    topics = {
        "contexts": f"{prefix}.contexts",
        "feedback": f"{prefix}.feedback",
        "decisions": f"{prefix}.decisions",
        "dead_letter": f"{prefix}.dead-letter",
    }
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topics[t], PARTITIONS, 1) for t in ("contexts", "feedback")])
    admin.close()
    time.sleep(1.0)
    if path is not None:
        publish(bootstrap, path, topics)
    return topics


def config(
    bootstrap: str, group: str, topics: dict, names: list[str], client: str = "kafka-python"
) -> dict:
    return {
        "mode": "service",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "client": client,
            "group_id": group,
            "topics": topics,
            "create_topics": True,
            "partitions": PARTITIONS,
            "session_timeout_ms": 6000,
        },
        "scaling": {"mode": "group"},
        "bandits": {n: bandit(100 + i) for i, n in enumerate(names)},
        "metrics": {"enabled": False},
        "progress": False,
        "idle_timeout_s": 3600,
    }


def wait(cond, timeout: float, replicas) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        for r in replicas:
            if r.proc.poll() is not None:
                raise RuntimeError(f"{r.name} exited: {r.log_path.read_text()[-2000:]}")
        if cond():
            return
        time.sleep(0.5)
    raise TimeoutError


def throughput(boot, tmp, path, names, n_replicas, contexts) -> dict:
    group = f"bs{os.getpid()}x{n_replicas}"
    topics = setup(boot, group, path)
    cfg = config(boot, group, topics, names)
    replicas = [Replica(tmp, f"{group}-r{i}", cfg) for i in range(n_replicas)]
    t_launch = time.time()
    # ready: the tasks are spread over all replicas (the last rebalance is over)
    wait(
        lambda: (
            sum(len(r.tasks()) for r in replicas) == PARTITIONS and all(r.tasks() for r in replicas)
        ),
        300,
        replicas,
    )
    t_ready = max(e[0] for r in replicas for e in r.events())
    wait(lambda: group_lag(boot, group, topics) == 0, 1800, replicas)
    t_done = time.time()
    for r in replicas:
        r.stop()
    return {
        "replicas": n_replicas,
        "contexts": contexts,
        "startup_s": round(t_ready - t_launch, 2),
        "processing_s": round(t_done - t_ready, 2),
        "contexts_per_s": round(contexts / (t_done - t_ready), 1),
    }


def two_replicas(boot, tmp, names, client: str, prefix: str) -> tuple[str, dict, list]:
    """A fresh group on empty topics and two replicas of ``client`` holding all its tasks."""
    group = f"{prefix}{os.getpid()}{int(time.time() * 1000) % 10**7}"
    topics = setup(boot, group, None)
    cfg = config(boot, group, topics, names, client)
    replicas = [Replica(tmp, f"{group}-r{i}", cfg) for i in range(2)]
    wait(
        lambda: (
            sum(len(r.tasks()) for r in replicas) == PARTITIONS and all(r.tasks() for r in replicas)
        ),
        300,
        replicas,
    )
    return group, topics, replicas


def cpu_run(boot, tmp, path, names, client: str, contexts: int) -> dict:
    """Two replicas of ``client`` decide the whole stream: contexts per CPU-second of both,
    from both holding their tasks (on empty topics) to the group's last commit, the stream
    published in between by this process (so no replica works before the window opens)."""
    group, topics, replicas = two_replicas(boot, tmp, names, client, "bc")
    t0, cpu0 = time.time(), sum(proc_stat(r.proc.pid)[0] for r in replicas)
    publish(boot, path, topics)
    wait(lambda: group_lag(boot, group, topics) == 0, 1800, replicas)
    t1, cpu1 = time.time(), sum(proc_stat(r.proc.pid)[0] for r in replicas)
    rss = [proc_stat(r.proc.pid)[1] for r in replicas]
    for r in replicas:
        r.stop()
    return {
        "client": client,
        "contexts": contexts,
        "s": round(t1 - t0, 2),
        "cpu_s": round(cpu1 - cpu0, 2),
        "contexts_per_cpu_s": round(contexts / (cpu1 - cpu0), 1),
        "contexts_per_s": round(contexts / (t1 - t0), 1),
        "rss_mb_at_end": rss,
        "load_average": os.getloadavg(),
    }


def proc_mem(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB, from /proc."""
    vals = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            vals[line.split(":")[0]] = int(line.split()[1]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def committed_records(bootstrap: str, group: str, topics: dict, client: str) -> int:
    """Input records (contexts and feedback) the group has committed, summed over partitions
    (the topics are fresh: an offset is a count; a partition without a commit counts 0)."""
    from streaming_dpbandit.settings import KafkaSettings
    from streaming_dpbandit.stream.kafka.seam import kafka_client

    settings = KafkaSettings(bootstrap_servers=bootstrap, client=client)
    with kafka_client(client).admin(settings) as admin:
        committed = admin.group_offsets(group)
    wanted = {topics["contexts"], topics["feedback"]}
    return sum(off for (t, _), off in committed.items() if t in wanted and off)


def memory_run(
    boot, tmp, path, names, client: str, records: int, sample_s: float, rate: float
) -> dict:
    """Two replicas of ``client`` decide the whole stream (published at ``rate`` records/s, 0:
    at once); every ``sample_s`` seconds each replica's resident memory against the input
    records published and committed by the group."""
    import threading

    group, topics, replicas = two_replicas(boot, tmp, names, client, "bm")
    t0 = time.time()
    series = []

    def sample() -> None:
        mem = [proc_mem(r.proc.pid) for r in replicas]
        cpu = [proc_stat(r.proc.pid)[0] for r in replicas]
        row = {
            "t_s": round(time.time() - t0, 1),
            "published_records": sent[0],
            "committed_records": committed_records(boot, group, topics, client),
            "rss_mb": [round(m[0], 1) for m in mem],
            "hwm_mb": [round(m[1], 1) for m in mem],
            "cpu_s": [round(c, 1) for c in cpu],
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        series.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    sent = [0]
    sample()
    pub = threading.Thread(target=publish, args=(boot, path, topics, rate, sent), daemon=True)
    pub.start()
    deadline = float(os.environ.get("DPBANDIT_BENCH_DEADLINE", "inf"))
    finished = False
    while time.time() < deadline:
        time.sleep(sample_s)
        for r in replicas:
            if r.proc.poll() is not None:
                raise RuntimeError(f"{r.name} exited: {r.log_path.read_text()[-2000:]}")
        sample()
        if not pub.is_alive() and series[-1]["committed_records"] >= records:
            finished = True
            break
    for r in replicas:
        r.stop()
    return {
        "client": client,
        "records_in_stream": records,
        "finished": finished,
        "published_all": not pub.is_alive(),
        "sample_s": sample_s,
        "publish_rate_per_s": rate or "unpaced",
        "series": series,
    }


def bench_cpu(boot, tmp, path, names, contexts, encodings, pairs) -> dict:
    """:func:`cpu_run` per encoding, the clients alternated (order reversed every pair)."""
    clients = ["kafka-python", "confluent-kafka"]
    out: dict = {}
    for enc in encodings:
        src = path if enc == "json" else binary_stream(path, tmp / f"stream-{enc}.jsonl")
        runs: dict = {c: [] for c in clients}
        for i in range(pairs):
            for c in clients if i % 2 == 0 else clients[::-1]:
                runs[c].append(cpu_run(boot, tmp, src, names, c, contexts))
                print(json.dumps(runs[c][-1]), file=sys.stderr, flush=True)
        med = {
            c: sorted(r["contexts_per_cpu_s"] for r in rs)[len(rs) // 2] for c, rs in runs.items()
        }
        out[enc] = {
            "runs": runs,
            "contexts_per_cpu_s_median": med,
            "confluent_over_kafka_python": med["confluent-kafka"] / med["kafka-python"],
        }
    return out


def rebalance_and_recovery(boot, tmp, path, names) -> dict:
    group = f"bsr{os.getpid()}"
    topics = setup(boot, group, path)
    cfg = config(boot, group, topics, names)
    r = [Replica(tmp, f"{group}-r{i}", cfg) for i in range(2)]
    wait(lambda: all(x.tasks() for x in r) and sum(len(x.tasks()) for x in r) == PARTITIONS, 300, r)
    time.sleep(3)
    # a third replica joins a running group
    t_join = time.time()
    r.append(Replica(tmp, f"{group}-r2", cfg))
    wait(lambda: all(x.tasks() for x in r) and sum(len(x.tasks()) for x in r) == PARTITIONS, 300, r)
    ev = [e for x in r for e in x.events() if e[0] >= t_join]
    first_revoke = min(e[0] for e in ev if e[1] == "revoked")
    last_assign = max(e[0] for e in ev if e[1] == "assigned")
    pause = last_assign - first_revoke
    time.sleep(3)
    # kill -9 one replica: its tasks move after the session timeout
    victim = r[1]
    lost = victim.tasks()
    t_kill = time.time()
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    alive = [r[0], r[2]]
    wait(lambda: sorted(alive[0].tasks() + alive[1].tasks()) == list(range(PARTITIONS)), 300, alive)
    ev = [e for x in alive for e in x.events() if e[0] >= t_kill]
    recovered = max(e[0] for e in ev if e[1] == "assigned")
    for x in alive:
        x.stop()
    victim.log.close()
    return {
        "rebalance_pause_s": round(pause, 2),
        "rebalance_join_to_done_s": round(last_assign - t_join, 2),
        "killed_tasks": lost,
        "recovery_s": round(recovered - t_kill, 2),
        "session_timeout_s": 6.0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bandits", type=int, default=48)
    ap.add_argument("--events", type=int, default=500, help="contexts per bandit")
    ap.add_argument("--replicas", default="1,2,3")
    ap.add_argument("--cpu", action="store_true", help="contexts per CPU-second, both clients")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--encodings", default="json,raw-f64")
    ap.add_argument("--memory", action="store_true", help="RSS of 2 replicas over the stream")
    ap.add_argument("--client", default="confluent-kafka", help="with --memory")
    ap.add_argument("--sample-s", type=float, default=10.0, help="with --memory")
    ap.add_argument(
        "--publish-rate", type=float, default=0.0, help="with --memory: records/s, 0 = unpaced"
    )
    args = ap.parse_args()
    boot = os.environ.get("DPBANDIT_BENCH_KAFKA")
    if not boot:
        sys.exit("set DPBANDIT_BENCH_KAFKA=host:port (a running broker)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    names = [f"b{i:03d}" for i in range(args.bandits)]
    path = tmp / "stream.jsonl"
    counts = write_multi_bandit_stream(
        path, names, args.events, FliphatPaperEnv(d=20, K=3, s_star=3)
    )
    out = {
        "bench": "scaling",
        "bandits": args.bandits,
        "events_per_bandit": args.events,
        "partitions": PARTITIONS,
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg()[0],
        "throughput": [],
    }
    if args.memory:
        enc = args.encodings.split(",")[0]
        src = path if enc == "json" else binary_stream(path, tmp / f"stream-{enc}.jsonl")
        path.unlink() if src != path else None
        out["date"] = time.strftime("%Y-%m-%d")
        out["encoding"] = enc
        out["counts"] = counts
        out["memory"] = memory_run(
            boot,
            tmp,
            src,
            names,
            args.client,
            sum(counts.values()),
            args.sample_s,
            args.publish_rate,
        )
        out["loadavg_end"] = os.getloadavg()[0]
        print(json.dumps(out, indent=2))
        return
    if args.cpu:
        out["date"] = time.strftime("%Y-%m-%d")
        out["cpu"] = bench_cpu(
            boot, tmp, path, names, counts["contexts"], args.encodings.split(","), args.pairs
        )
        out["loadavg_end"] = os.getloadavg()[0]
        print(json.dumps(out, indent=2))
        return
    for n in [int(x) for x in args.replicas.split(",")]:
        out["throughput"].append(throughput(boot, tmp, path, names, n, counts["contexts"]))
        print(json.dumps(out["throughput"][-1]), file=sys.stderr)
    out.update(rebalance_and_recovery(boot, tmp, path, names))
    out["loadavg_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
