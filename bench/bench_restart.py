"""Restart time to the first decision (issue 19, item 4). Prints one JSON document.

A ``dpbandit serve`` in single mode decides a live stream from ``dpbandit loadgen`` (the
docker stack's FLIPHAT bandit, ``--rate`` contexts/s). Once the service is deciding, it is
stopped — ``kill -9`` or SIGTERM — and started again; the figure is the time from the new
process's start to the first decision it publishes (the decisions topic's end offsets grow
again: nothing else writes there, the old process being dead), and the group's share of it,
from the snapshot restore logged just before the consumer starts to the partitions assignment.
Each variant has a consumer group of its own:

* ``static`` — the defaults: static membership (``group.instance.id``), 10 s session;
* ``dynamic`` — ``kafka.static_membership: false``: a dynamic member, 10 s session;
* ``--old PATH`` — the service of another source tree (e.g. ``git archive`` of an older
  commit), with its own defaults (before issue 19: dynamic, kafka-python's 45 s session).

Usage: python bench/bench_restart.py --kafka HOST:PORT [--trials 3] [--rate 100] [--old PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

BANDIT = {
    "policy": {
        "policy": "fliphat",
        "d": 100,
        "s": 10,
        "epsilon": 1.0,
        "delta": 1.0e-6,
        "b_max": 3.436219,
        # no release within the bench: a first release waits up to a feedback window for the
        # rewards of its episode, which would be timed as restart time
        "first_episode_len": 10_000_000,
        "swap_delay": 1000,
    },
    "feedback_window": 30,
    "reward_bounds": [-20, 20],
}


def config(bootstrap: str, name: str, group: str, state: Path, **kafka) -> dict:
    return {
        "mode": "service",
        "kafka": {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "topics": {
                "contexts": f"{name}.contexts",
                "feedback": f"{name}.feedback",
                "decisions": f"{name}.decisions",
                "dead_letter": f"{name}.dead-letter",
            },
            "create_topics": True,
            "partitions": 3,
            **kafka,
        },
        "simulation": {
            "env": "fliphat-paper",
            "env_params": {"d": 100, "K": 3, "s_star": 5},
            "bandit_id": "shop",
            "feedback_delay_mean": 0.5,
            "feedback_probability": 0.95,
            "seed": 1,
        },
        "bandits": {"shop": BANDIT},
        "snapshots": {"directory": str(state), "interval_s": 2},
        "metrics": {"enabled": False},
        "progress": False,
        "idle_timeout_s": 3600,
    }


class Decisions:
    """Sum of the decisions topic's end offsets (a group-less consumer)."""

    def __init__(self, bootstrap: str, topic: str):
        from kafka import KafkaConsumer, TopicPartition

        self.c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        deadline = time.time() + 60
        while not self.c.partitions_for_topic(topic):
            if time.time() > deadline:
                raise RuntimeError(f"no partitions of {topic}")
            self.c.topics()
            time.sleep(0.3)
        self.tps = [TopicPartition(topic, p) for p in sorted(self.c.partitions_for_topic(topic))]

    def count(self) -> int:
        return sum(self.c.end_offsets(self.tps).values())


def serve(cfg_path: Path, pythonpath: str, log) -> subprocess.Popen:
    # run from the tree itself: ``python -m`` puts the working directory first on sys.path,
    # so started from another tree it would run that tree's package whatever PYTHONPATH says
    return subprocess.Popen(
        [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(cfg_path)],
        stdout=log,
        stderr=log,
        cwd=pythonpath,
        env=dict(os.environ, PYTHONPATH=pythonpath, OPENBLAS_NUM_THREADS="1"),
    )


def wait_deciding(dec: Decisions, since: int, proc, timeout: float) -> float | None:
    """Seconds until the decisions topic grows past ``since`` (None: not within timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"dpbandit serve exited with {proc.returncode}")
        if dec.count() > since:
            return time.monotonic() - t0
        time.sleep(0.05)
    return None


def _stamp(line: str) -> float:
    from datetime import datetime

    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def join_seconds(log_path: Path, start_line: int, stopped: float) -> tuple:
    """(restore → assigned, stop → assigned) of the restarted process, from its log lines
    after ``start_line``: the snapshot restore is logged just before the consumer starts, so
    the first is the group's share of the restart; the second counts from the old process's
    death (``stopped``, wall clock), whatever the new one did meanwhile (starting Python)."""
    lines = log_path.read_text().splitlines()[start_line:]
    restored = [x for x in lines if "restored snapshot" in x]
    assigned = [x for x in lines if "partitions assigned: [(" in x]
    if not restored or not assigned:
        return None, None
    return _stamp(assigned[0]) - _stamp(restored[0]), _stamp(assigned[0]) - stopped


def _median(xs) -> float:
    return statistics.median([x if x is not None else float("inf") for x in xs])


def variant(bootstrap, name, label, pythonpath, kafka_over, trials, work, timeout) -> dict:
    group = f"{name}-{label}"
    cfg_path = work / f"{label}.yaml"
    cfg_path.write_text(
        yaml.safe_dump(config(bootstrap, name, group, work / f"state-{label}", **kafka_over))
    )
    log = open(work / f"{label}.log", "a")
    dec = Decisions(bootstrap, f"{name}.decisions")
    out = {}
    proc = serve(cfg_path, pythonpath, log)
    try:
        out["cold_start_s"] = wait_deciding(dec, dec.count(), proc, timeout)
        for how, sig in (("kill_9", signal.SIGKILL), ("sigterm", signal.SIGTERM)):
            times, joins, since_stop = [], [], []
            for _ in range(trials):
                time.sleep(1.5)  # deciding for a while
                proc.send_signal(sig)
                proc.wait(60)
                stopped = time.time()
                before = dec.count()
                log.flush()
                start_line = len((work / f"{label}.log").read_text().splitlines())
                proc = serve(cfg_path, pythonpath, log)
                times.append(wait_deciding(dec, before, proc, timeout))
                join, total = join_seconds(work / f"{label}.log", start_line, stopped)
                joins.append(join)
                since_stop.append(total)
            out[how] = {
                "restart_to_first_decision_s": times,
                "median_s": _median(times),
                "restore_to_partitions_assigned_s": joins,
                "median_join_s": _median(joins),
                "stop_to_partitions_assigned_s": since_stop,
            }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kafka", required=True)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--old", help="source tree of the service to compare (its defaults)")
    ap.add_argument("--timeout", type=float, default=90.0)
    args = ap.parse_args()
    name = f"restart{int(time.time())}"
    work = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    # the load generator: the new tree's (it is not what is measured)
    gen_cfg = work / "loadgen.yaml"
    gen_cfg.write_text(yaml.safe_dump(config(args.kafka, name, "loadgen", work / "unused")))
    gen_log = open(work / "loadgen.log", "w")
    gen = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streaming_dpbandit.cli",
            "loadgen",
            "--config",
            str(gen_cfg),
            "--rate",
            str(args.rate),
        ],
        stdout=gen_log,
        stderr=gen_log,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    results = {"rate": args.rate, "trials": args.trials, "work": str(work)}
    try:
        time.sleep(3.0)  # topics created, contexts flowing
        variants = [("static", str(ROOT), {}), ("dynamic", str(ROOT), {"static_membership": False})]
        if args.old:
            variants.insert(0, ("old", args.old, {}))
        for label, path, over in variants:
            results[label] = variant(
                args.kafka, name, label, path, over, args.trials, work, args.timeout
            )
            print(label, json.dumps(results[label]), file=sys.stderr, flush=True)
    finally:
        gen.send_signal(signal.SIGTERM)
        gen.wait(60)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
