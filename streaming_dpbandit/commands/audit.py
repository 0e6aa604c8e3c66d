"""``dpbandit audit``: the end-to-end privacy audits (docs/privacy/audits.md).

Runs every registered mechanism's real calibration and its mutants
(:mod:`~streaming_dpbandit.experiments.end_to_end_audits`), prints the table and writes the JSON
report. Exit status 1 (``EXIT_TARGET_FAILED``) when an outcome is not the expected one: a real
calibration with a lower bound above its claim, or a mutant that is not caught.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import time
from pathlib import Path

from .. import __version__
from ..errors import ConfigError
from .options import EXIT_TARGET_FAILED, json_default, writable

__all__ = ["run"]


def _commit() -> str | None:
    """The git commit of the running code, when it runs from a checkout (else None)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run(args) -> int:
    from ..experiments import end_to_end_audits as e2e
    from ..experiments.report import format_table

    writable(args.json, "--json")
    names = None
    if args.mechanism:
        names = [x.strip() for x in args.mechanism.split(",") if x.strip()]
        bad = [x for x in names if x not in e2e.MECHANISMS]
        if bad or not names:
            raise ConfigError(
                f"--mechanism: unknown {bad[0] if bad else args.mechanism!r}; choose from "
                f"{', '.join(e2e.MECHANISMS)}"
            )
    profile = "quick" if args.quick else "full"
    t0 = time.perf_counter()
    results = e2e.run_audits(profile, names, progress=not args.no_progress)
    elapsed = time.perf_counter() - t0
    rows = [
        [
            r.mechanism,
            r.variant,
            f"{r.result.claimed_epsilon:.4g}",
            f"{r.result.claimed_delta:g}",
            f"{r.result.epsilon_lb:.3f}",
            "CAUGHT" if r.caught else "pass",
            "ok" if r.ok else "UNEXPECTED",
            f"{r.result.n:,}",
        ]
        for r in results
    ]
    conf = f"{1 - e2e.ALPHA:.0%}"
    print(
        f"End-to-end privacy audits ({profile} profile, noise backend 'fast'): ε lower bound "
        f"at {conf} confidence against the claimed (ε, δ); {elapsed:.1f} s"
    )
    print(
        format_table(
            [
                "mechanism",
                "variant",
                "claimed ε",
                "δ",
                f"ε lower bound ({conf})",
                "result",
                "expected",
                "runs/side",
            ],
            rows,
        )
    )
    if args.json:
        report = {
            "command": "dpbandit audit" + (" --quick" if args.quick else ""),
            "profile": profile,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "version": __version__,
            "commit": _commit(),
            "python": platform.python_version(),
            "alpha": e2e.ALPHA,
            "confidence": 1 - e2e.ALPHA,
            "noise_backend": "fast",
            "elapsed_s": elapsed,
            "all_ok": all(r.ok for r in results),
            "mechanisms": {n: e2e.MECHANISMS[n].title for n in (names or list(e2e.MECHANISMS))},
            "results": [r.to_dict() for r in results],
        }
        Path(args.json).write_text(json.dumps(report, indent=1, default=json_default))
        print(f"wrote {args.json}")
    bad = [r for r in results if not r.ok]
    for r in bad:
        what = "flagged" if r.caught else "not caught"
        print(
            f"UNEXPECTED: {r.mechanism} {r.variant} {what} (ε lower bound "
            f"{r.result.epsilon_lb:.3f}, claimed {r.result.claimed_epsilon:.4g})"
        )
    return EXIT_TARGET_FAILED if bad else 0
