"""Start-up benchmark (issue 24): fresh processes, this tree against another checkout.

Times, in fresh interpreters, ``import streaming_dpbandit``, ``dpbandit --help`` and
``dpbandit simulate`` of one FLIPHAT repetition (d = 400, K = 3, T = 10⁴, the default certified
profile and the paper-as-authors profile of bench_fliphat.py; no ``--json``). With ``--old-tree``
(e.g. ``git worktree add /tmp/old <commit>``, or ``git archive <commit> | tar -x -C /tmp/old``)
every command alternates between the two trees, run by run; medians of wall and CPU (user + sys)
seconds. Prints one JSON document.

Usage: python bench/bench_startup.py [--old-tree DIR] [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIM = ["-m", "streaming_dpbandit.cli", "simulate", "--policy", "fliphat", "--seeds", "1",
       "--jobs", "1", "--no-progress", "--horizon", "10000"]  # fmt: skip
PAPER = ["--calibration", "paper", "--policy-param", "clip_contexts=false",
         "--policy-param", "m_schedule=log", "--policy-param", "m0=0.15",
         "--policy-param", "m_guard=allow_zero"]  # fmt: skip
COMMANDS = {
    "import streaming_dpbandit": ["-c", "import streaming_dpbandit"],
    "dpbandit --help": ["-m", "streaming_dpbandit.cli", "--help"],
    "dpbandit simulate fliphat (certified), T=1e4": SIM,
    "dpbandit simulate fliphat (paper-as-authors), T=1e4": SIM + PAPER,
}


def run(tree: Path, args: list[str]) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, check=True, capture_output=True, cwd="/")
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-tree", type=Path, help="another checkout to compare with")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    trees = {"new": ROOT} | ({"old": args.old_tree} if args.old_tree else {})
    out = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
        },
        "protocol": f"{args.runs} runs per command and tree in fresh processes, trees alternated "
        "run by run (the first tree alternates too); medians of wall and of CPU (user + sys) s",
        "results": {},
    }
    for name, cmd in COMMANDS.items():
        samples: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
        for i in range(args.runs):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for k in order:
                samples[k].append(run(trees[k], cmd))
        row = {}
        for k, v in samples.items():
            row[k] = {
                "median_wall_s": round(statistics.median(w for w, _ in v), 3),
                "median_cpu_s": round(statistics.median(c for _, c in v), 3),
            }
        if "old" in row:
            row["old_over_new_wall"] = round(
                row["old"]["median_wall_s"] / row["new"]["median_wall_s"], 2
            )
            row["old_over_new_cpu"] = round(
                row["old"]["median_cpu_s"] / row["new"]["median_cpu_s"], 2
            )
        out["results"][name] = row
    out["machine"]["load_average_at_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
