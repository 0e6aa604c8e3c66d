"""Issue 23's "behaviour unchanged" benchmark: the service before the restructuring against the
service of this tree, alternated on one broker. Prints one JSON document.

The same recorded stream (FLIPHAT, d = 100, K = 3, the ``bench_service.py`` stream, JSON and
base64-float64 features: the encodings both trees read) is produced once to one set of topics
per encoding. Then, ``--pairs`` times, each tree's own ``bench/bench_service.py`` measures its
service catching up on those topics (``service_throughput``: a fresh consumer group, the
service as ``dpbandit serve`` runs it) in a fresh process, old and new alternated and the order
swapped every pair (old→new, new→old, …), because this machine drifts 30 % between runs. The
same is done for the in-process replay of the recorded stream held in memory
(``replay_rate``: no broker, best of 3 inside each run). Reported: each run's contexts/s, the
per-pair ratios new/old, their median and range, and each process's CPU seconds.

Usage: python bench/bench_restructure.py --old-tree DIR [--kafka HOST:PORT] [--pairs N]
       [--events N] [--out FILE]

``DIR`` is an export of the tree before the restructuring, e.g.
``git archive fcc737e | tar -x -C /tmp/old`` (the commit issue 23 was measured against). Without
``--kafka`` a broker is started with ``scripts/kafka.sh``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # dpbandit_testing, the helpers beside the package

import bench_service as bs  # noqa: E402

from dpbandit_testing.stream_helpers import kafka_topics  # noqa: E402

ENCODINGS = ("json", "f64")

# Run in a fresh interpreter inside one tree: that tree's bench module and package.
CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
import bench_service as bs
from pathlib import Path
cpu0 = time.process_time()
if {kind!r} == "kafka":
    rate = bs.service_throughput({bootstrap!r}, {topics!r}, {n_contexts}, {n_feedback})
else:
    rate = bs.replay_rate(Path({path!r}), {n_contexts})
print(json.dumps({{"rate": rate, "cpu_s": time.process_time() - cpu0}}))
"""


def run_in(tree: Path, kind: str, **kw) -> dict:
    code = CHILD.format(bench=str(tree / "bench"), kind=kind, **kw)
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    if res.returncode != 0:
        raise SystemExit(f"bench_restructure: a run in {tree} failed: {res.stderr.strip()[-400:]}")
    out: dict = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def alternate(trees: dict[str, Path], pairs: int, kind: str, **kw) -> dict:
    def one(side: str) -> dict:
        got = run_in(trees[side], kind, **kw)
        print(f"  {kind} {side}: {got['rate']:,.0f}/s", file=sys.stderr)
        return got

    runs = bs.alternated(["old", "new"], pairs, one)
    old = [r["rate"] for r in runs["old"]]
    new = [r["rate"] for r in runs["new"]]
    ratios = [n / o for n, o in zip(new, old)]
    return {
        "old_contexts_per_s": old,
        "new_contexts_per_s": new,
        "old_cpu_s": [r["cpu_s"] for r in runs["old"]],
        "new_cpu_s": [r["cpu_s"] for r in runs["new"]],
        "old_median": float(np.median(old)),
        "new_median": float(np.median(new)),
        "ratio_new_over_old_per_pair": ratios,
        "ratio_median": float(np.median(ratios)),
        "ratio_range": [min(ratios), max(ratios)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-tree", required=True, type=Path)
    ap.add_argument("--kafka", help="bootstrap of an existing broker")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if not (args.old_tree / "bench" / "bench_service.py").is_file():
        print(f"bench_restructure: no bench/bench_service.py in {args.old_tree}", file=sys.stderr)
        raise SystemExit(2)
    trees = {"old": args.old_tree.resolve(), "new": ROOT}
    tmp = Path(tempfile.mkdtemp())
    out: dict = {
        "protocol": (
            "each tree's own bench_service.py functions in a fresh process per run; old and new "
            "alternated, order swapped every pair; same recorded stream, same topics"
        ),
        "events": args.events,
        "pairs": args.pairs,
        "old_tree": str(trees["old"]),
        "load_average_at_start": os.getloadavg(),
        "inprocess": {},
        "kafka": {},
    }
    paths = {}
    for enc in ENCODINGS:
        paths[enc] = tmp / f"stream-{enc}.jsonl"
        bs.record(paths[enc], args.events, enc)
        n_ctx = sum(
            1 for x in paths[enc].read_text().splitlines() if json.loads(x)["topic"] == "contexts"
        )
        out["inprocess"][enc] = alternate(
            trees,
            args.pairs,
            "inprocess",
            bootstrap="",
            topics={},
            n_contexts=n_ctx,
            n_feedback=0,
            path=str(paths[enc]),
        )
    env = None
    bootstrap = args.kafka
    if bootstrap is None:
        bootstrap, env = bs.start_broker()
    try:
        for enc in ENCODINGS:
            topics = kafka_topics(f"r23{enc}{int(time.time())}")
            bs.create(bootstrap, topics.values())
            counts = bs.produce(bootstrap, paths[enc], topics)
            out["kafka"][enc] = alternate(
                trees,
                args.pairs,
                "kafka",
                bootstrap=bootstrap,
                topics=topics,
                n_contexts=counts["contexts"],
                n_feedback=counts["feedback"],
                path="",
            )
    finally:
        if env is not None:
            bs.stop_broker(env)
    out["load_average_at_end"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
