"""What the secure noise backend costs in ``dpbandit simulate`` (issue 31 §5). Prints one JSON
document (and writes it with ``--json``).

For each private policy, one ``dpbandit simulate`` command run with ``--policy-param
noise_backend=fast`` and with ``noise_backend=secure``, each in a fresh process, alternated, the
order reversed every pair (``--pairs`` pairs): the process's wall seconds and CPU seconds (user +
system, from ``getrusage`` of the child), the final regret of the run (``--json`` of simulate),
the per-pair ratios secure/fast and their medians. Process start-up and imports are on both
sides. DP-LinUCB's ``tree_impl="auto"`` resolves to BLT on the fast backend and to the binary
tree on the secure one (the exact BLT encoding is O(steps) per step); the ``dp-linucb-binary``
case runs the binary tree on both, to separate the sampler's cost from the mechanism's.

Usage: python bench/bench_secure_simulate.py [--pairs 3] [--horizon 10000] [--only a,b]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DPBANDIT = [sys.executable, "-m", "streaming_dpbandit.cli"]

#: case → (simulate arguments, the run key in simulate's JSON)
CASES: dict[str, tuple[list[str], str]] = {
    "fliphat": (["--env", "fliphat-paper", "--policy", "fliphat", "--delta", "0.01"], "fliphat"),
    "dp-linucb": (["--env", "dp-linucb-paper", "--policy", "dp-linucb"], "dp-linucb"),
    "dp-linucb-binary": (
        ["--env", "dp-linucb-paper", "--policy", "dp-linucb", "--policy-param", "tree_impl=binary"],
        "dp-linucb",
    ),
    "private-lasso": (["--env", "privatelasso-m", "--policy", "private-lasso"], "private-lasso"),
    "dpucb-mat": (["--env", "dp-matroid-synthetic", "--policy", "dpucb-mat"], "dpucb-mat"),
    "dpts-mat": (["--env", "dp-matroid-synthetic", "--policy", "dpts-mat"], "dpts-mat"),
    "ldp-glb": (["--env", "ldp-glb-single", "--policy", "ldp-glb"], "ldp-glb"),
}


def final_regret(doc: dict, key: str) -> float | None:
    """The mean final regret of the run whose key starts with ``key`` (either JSON shape)."""
    runs = doc.get("runs") or doc.get("results") or []
    if isinstance(runs, dict):
        runs = [{"key": k, **v} for k, v in runs.items()]
    for r in runs:
        name = str(r.get("key") or r.get("policy") or "")
        if name.startswith(key):
            fr = r.get("final_regret", r.get("regret_mean"))
            if isinstance(fr, dict):
                return float(fr.get("mean"))
            if fr is not None:
                return float(fr)
    return None


def one(case: str, backend: str, horizon: int, seed: int) -> dict:
    args, key = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sim.json"
        cmd = [
            *DPBANDIT,
            "simulate",
            *args,
            "--epsilon",
            "1",
            "--horizon",
            str(horizon),
            "--seeds",
            "1",
            "--seed",
            str(seed),
            "--jobs",
            "1",
            "--no-progress",
            "--policy-param",
            f"noise_backend={backend}",
            "--json",
            str(out),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        doc = json.loads(out.read_text())
    return {"wall_s": wall, "cpu_s": cpu, "final_regret": final_regret(doc, key)}


def bench_case(case: str, pairs: int, horizon: int, seed: int) -> dict:
    runs: dict[str, list[dict]] = {"fast": [], "secure": []}
    for i in range(pairs):
        order = ("fast", "secure") if i % 2 == 0 else ("secure", "fast")
        for backend in order:
            runs[backend].append(one(case, backend, horizon, seed))
            print(f"{case} pair {i + 1} {backend}: {runs[backend][-1]}", file=sys.stderr)
    out: dict = {"command": CASES[case][0], "runs": runs}
    for m in ("wall_s", "cpu_s"):
        ratios = [s[m] / f[m] for f, s in zip(runs["fast"], runs["secure"])]
        out[f"secure_over_fast_{m}_per_pair"] = ratios
        out[f"secure_over_fast_{m}_median"] = statistics.median(ratios)
        for b in ("fast", "secure"):
            out[f"{b}_{m}_median"] = statistics.median(r[m] for r in runs[b])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--horizon", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    doc: dict = {
        "protocol": f"dpbandit simulate --seeds 1 --seed {args.seed} --jobs 1 --epsilon 1 "
        f"--horizon {args.horizon}, fast and secure in fresh processes, {args.pairs} pairs, "
        "order reversed every pair; CPU = user + system seconds of the process",
        "load_average_at_start": os.getloadavg(),
        "cases": {},
    }
    for case in args.only.split(","):
        doc["cases"][case] = bench_case(case, args.pairs, args.horizon, args.seed)
    doc["load_average_at_end"] = os.getloadavg()
    text = json.dumps(doc, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
