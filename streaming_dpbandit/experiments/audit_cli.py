"""The command line of the audit modules (``python -m streaming_dpbandit.experiments.audits``
and its siblings): run every audit, print a table or JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["audit_main"]


def audit_main(
    description: str,
    run_all: Callable[[bool], Sequence[Any]],
    argv: list[str] | None = None,
    delta: str | None = "g",
    quick_help: str | None = "a quarter of the runs",
) -> int:
    """Parse ``--json`` and ``--quick``, run ``run_all(quick)`` and print its results: one
    row per audit (``delta``: the format of the claimed δ's column, None for pure-ε audits)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help=quick_help)
    args = p.parse_args(argv)
    results = run_all(args.quick)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
        return 0
    from ..utils.tables import format_table

    head = ["audit", "claimed ε", *(["δ"] if delta else []), "ε lower bound", "result"]
    rows = [
        [
            r.name,
            f"{r.claimed_epsilon:.4g}",
            *([format(r.claimed_delta, delta)] if delta else []),
            f"{r.epsilon_lb:.3f}",
            "pass" if r.passed else "VIOLATION",
            f"{r.n:,}",
        ]
        for r in results
    ]
    print(format_table([*head, "runs/side"], rows))
    return 0
