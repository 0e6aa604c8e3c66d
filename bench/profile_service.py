"""Where the service's CPU per context goes (issue 32), single mode through a real broker.

Three steps, so that a sampling profiler sees only the service's loop:

* ``prepare``: record bench_service.py's stream (FLIPHAT at d = 100) in ``--encoding``, create
  fresh topics and publish it (records stamped with their recorded timestamps); writes a
  ``--work`` JSON naming the topics and counts;
* ``run``: the service catching up on those topics with ``--client``, exactly as
  bench_service.py's ``service_throughput`` (its CPU per context is printed, and the noise
  backend the policy drew from) — run it under a profiler, e.g.
  ``py-spy record --nonblocking --function --format raw -o prof.txt -- python
  bench/profile_service.py run``;
* ``summarize``: the collapsed stacks of ``prof.txt`` restricted to ``Service.run``, shares by
  stage (inclusive) and the top self frames; prints JSON.

    python bench/profile_service.py prepare --kafka HOST:PORT --work /tmp/prof.json
    py-spy record --nonblocking --function --rate 250 --format raw -o /tmp/prof-1.txt -- \\
        python bench/profile_service.py run --work /tmp/prof.json > /tmp/run-1.txt  # and 2, 3
    python bench/profile_service.py summarize --stacks /tmp/prof-?.txt --runs /tmp/run-?.txt \\
        --work /tmp/prof.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Stages of the loop, the first whose key is in any frame of a stack (so noise drawn inside a
#: re-estimation counts as noise): (label, substrings of a frame, any of which matches)
STAGES = [
    ("noise draws (the secure backend; the fast one)", ("privacy/secure_noise", "privacy/noise")),
    (
        "stream clock and event-time checks (issue 31)",
        ("record_clock", "StageContext.time_limit", "event_time_limit", "too_old ("),
    ),
    ("snapshot persisted at a release (persist before use)", ("Service.snapshot",)),
    ("re-estimation at an episode boundary (refit, peeling; minus noise)", ("refit",)),
    ("ledger append", ("ledger",)),
    ("encode decision messages (JSON)", ("decision_encoder",)),
    ("publish: producer send", ("Producer.send",)),
    ("poll: consumer fetch", ("KafkaTransport.poll",)),
    ("parse contexts (binary decode, rows)", ("ContextStage.parse",)),
    ("parse feedback", ("parse_feedback",)),
    ("feedback join and watermarks", ("JoinStore", "on_feedback", "after_decisions")),
    ("decide (scores, argmax)", ("decide_messages",)),
    ("learning from joined rows", ("flush_learning", "learn")),
]
#: Outside the bench's timing window: the accountant's import before the first poll, the
#: final snapshot after the stop
OUTSIDE = ("load_pld", "Service.finish")


def prepare(args) -> None:
    import bench_service as bs

    path = Path(tempfile.mkdtemp()) / f"stream-{args.encoding}.jsonl"
    bs.record(path, args.events, args.encoding)
    tag = f"prof{int(time.time())}"
    topics = {
        "contexts": f"{tag}.contexts",
        "feedback": f"{tag}.feedback",
        "decisions": f"{tag}.decisions",
        "dead_letter": f"{tag}.dead-letter",
    }
    bs.create(args.kafka, topics.values())
    counts = bs.produce(args.kafka, path, topics)
    Path(args.work).write_text(
        json.dumps(
            {"kafka": args.kafka, "topics": topics, "counts": counts, "encoding": args.encoding}
        )
    )
    print(json.dumps(counts))


def run(args) -> None:
    import bench_service as bs

    w = json.loads(Path(args.work).read_text())
    cpu: list = []
    t0 = time.time()
    rate = bs.service_throughput(
        w["kafka"],
        w["topics"],
        w["counts"]["contexts"],
        w["counts"]["feedback"],
        client=args.client,
        cpu_out=cpu,
    )
    st = bs.settings(tempfile.mkdtemp())
    policy = st.bandits["shop"].policy
    print(
        json.dumps(
            {
                "client": args.client,
                "contexts_per_s": round(rate, 1),
                "service_cpu_us_per_context": round(cpu[0], 2),
                "noise_backend_setting": getattr(policy, "noise_backend", None),
                "wall_s": round(time.time() - t0, 1),
                "load_average": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


def last_json(path: str) -> dict:
    """The last JSON line of a file (a run step's output, py-spy's lines around it)."""
    lines = [x for x in Path(path).read_text().splitlines() if x.startswith("{")]
    return json.loads(lines[-1])


def summarize(args) -> None:
    """py-spy's raw format (one ``frame;frame;...;leaf count`` line per distinct stack; record
    with ``--function``): the samples under ``Service.run`` inside the timing window, by stage,
    each stage's share turned into µs per context with the runs' mean CPU per context."""
    stage: Counter = Counter()
    leaf: Counter = Counter()
    outside = 0
    for path in args.stacks:
        for line in Path(path).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            if not any(f.startswith("Service.run (") for f in frames):
                continue
            n = int(count)
            if any(f.startswith(OUTSIDE) for f in frames):
                outside += n
                continue
            inside = frames[[f.startswith("Service.run (") for f in frames].index(True) + 1 :]
            label = next(
                (lab for lab, keys in STAGES if any(k in f for f in inside for k in keys)),
                "the stages' own per-record loops, queues, grouping",
            )
            stage[label] += n
            leaf[frames[-1].split(" (")[0]] += n
    total = sum(stage.values())
    runs = [last_json(p) for p in args.runs or []]
    cpu = sum(r["service_cpu_us_per_context"] for r in runs) / len(runs) if runs else None
    out: dict = {
        "samples_in_window": total,
        "samples_outside_window": outside,
        "runs": runs,
        "service_cpu_us_per_context_mean": cpu,
        "stages": [
            {
                "stage": k,
                "share": round(v / total, 3),
                "us_per_context": round(v / total * cpu, 1) if cpu else None,
            }
            for k, v in stage.most_common()
        ],
        "top_self_functions": [[f, round(v / total, 3)] for f, v in leaf.most_common(args.top)],
    }
    if args.work:
        out["stream"] = json.loads(Path(args.work).read_text())
    print(json.dumps(out, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--kafka", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--encoding", default="raw-f64")
    r = sub.add_parser("run")
    r.add_argument("--work", required=True)
    r.add_argument("--client", default="confluent-kafka")
    s = sub.add_parser("summarize")
    s.add_argument("--stacks", nargs="+", required=True)
    s.add_argument("--runs", nargs="*", help="the run steps' outputs")
    s.add_argument("--work")
    s.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    {"prepare": prepare, "run": run, "summarize": summarize}[args.step](args)


if __name__ == "__main__":
    main()
