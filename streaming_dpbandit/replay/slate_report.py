"""Report of a slate replay (``dpbandit replay`` with slate policies): table, JSON, plot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .slates import SlateLog, SlateReplayResult

__all__ = ["plot_slate_replay", "slate_replay_json", "slate_replay_table"]

#: How to read the table's estimates (printed under it).
READING = (
    "queue replay: each item's logged rewards are read in decision order; the estimate is "
    "the policy's online per-round return (learning included) under the matroid bandit "
    "model (items independent, i.i.d. over rounds); se is per round, a scale, not an interval"
)


def slate_replay_table(results: Sequence[SlateReplayResult], log: SlateLog) -> str:
    """One row per policy run (:class:`~.slates.SlateReplayResult`), then the log's own.

    ``log`` is the :class:`~.slates.SlateLog` replayed. Columns are padded to their widest
    cell; the reading of the estimates follows the table.
    """
    head = [
        "policy",
        "rounds",
        "return/round",
        "± se",
        "ε certified",
        "releases",
        "noise",
        "stopped",
    ]
    rows = [head]
    for r in results:
        p = r.privacy
        rows.append(
            [
                r.label,
                f"{r.rounds:,}",
                f"{r.mean_return:.4f}",
                f"{r.se:.4f}",
                f"{p.get('epsilon_certified', 0):g}",
                str(p.get("releases", 0)),
                str(p.get("noise_backend") or "-"),
                r.stop,
            ]
        )
    rows.append(
        [
            "log (on-policy)",
            f"{log.decisions:,}",
            f"{log.on_policy_return:.4f}",
            f"{log.on_policy_se:.4f}",
            "",
            "",
            "",
            "",
        ]
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join([*lines, READING])


def slate_replay_json(results: Sequence[SlateReplayResult], log: SlateLog) -> dict[str, Any]:
    """The log's description and every run's result, as plain JSON data."""
    return {
        "log": {
            **log.info,
            "decisions": log.decisions,
            "on_policy_return": log.on_policy_return,
            "on_policy_se": log.on_policy_se,
            "rewards_per_item": log.tapes.lengths.tolist(),
        },
        "results": [r.to_json() for r in results],
    }


def plot_slate_replay(results: Sequence[SlateReplayResult], log: SlateLog, path: str) -> None:
    """Mean return per round against replayed rounds, one line per run, and the log's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        ax.plot(r.curve_rounds, r.curve_return, label=r.label)
    ax.axhline(log.on_policy_return, color="grey", ls="--", label="log (on-policy)")
    ax.set_xscale("log")
    ax.set_xlabel("replayed rounds")
    ax.set_ylabel("mean return per round")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
