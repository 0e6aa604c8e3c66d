"""Terminal tables and plots for simulation results."""

from __future__ import annotations

from ..privacy.accountant import format_of_record
from ..utils.tables import format_table, table_width
from .runner import SimulationResult

__all__ = [
    "episode_slopes",
    "format_table",
    "plot_curves",
    "simulation_table",
    "table_width",
]


def simulation_table(result: SimulationResult) -> str:
    rows = []
    # the table shows the accountant of record, which may be the PLD accountant
    for row in result.summary():
        pr = row["privacy"]
        f = row["final_regret"]
        if pr["private"]:
            spent = format_of_record(pr["of_record"])
            calib = pr["calibration"] + ("" if pr["dp_valid"] else " (not DP-valid)")
            rel = str(pr["releases"])
            noise = pr.get("noise_backend", "-")
        else:
            spent, calib, rel, noise = "non-private", "-", "-", "-"
        rows.append(
            [
                row["key"],
                str(row["horizon"]),
                f"{f['mean']:,.1f} ± {f['se']:,.1f}",
                spent,
                rel,
                calib,
                noise,
            ]
        )
    return format_table(
        ["run", "T", "regret R(T) ± s.e.", "privacy spent", "releases", "calibration", "noise"],
        rows,
    )


def plot_curves(result: SimulationResult, path: str, title: str = "") -> None:
    """Cumulative pseudo-regret curves with 95% bands, written to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for spec in result.specs:
        t = result.grid_of(spec.key)
        mean, se = result.mean_se(spec.key)
        ax.plot(t, mean, label=spec.key, lw=1.6)
        ax.fill_between(t, mean - 1.96 * se, mean + 1.96 * se, alpha=0.2)
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative pseudo-regret R(t)")
    labels = {
        (s.policy, s.params.get("calibration")) for s in result.specs if s.epsilon is not None
    }
    note = ""
    if ("fliphat", "paper") in labels:
        note = "\n(calibration 'paper': reproduction only, not a valid DP guarantee)"
    elif any(cal not in (None, "certified") for _, cal in labels):
        shown = sorted({cal for _, cal in labels if cal is not None and cal != "certified"})
        note = f"\n(labelled calibration options: {', '.join(shown)})"
    ax.set_title(
        (title or f"{result.env.get('name', '')}: {result.seeds} repetitions") + note, fontsize=10
    )
    ax.grid(alpha=0.3)
    from matplotlib.patches import Patch

    handles, _ = ax.get_legend_handles_labels()
    handles.append(
        Patch(
            color="grey",
            alpha=0.3,
            label=f"shaded: 95% band of the mean (±1.96 s.e., {result.seeds} seeds)",
        )
    )
    ax.legend(handles=handles, fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def episode_slopes(result: SimulationResult, key: str) -> list[tuple[int, float]]:
    """Mean regret slope over each doubling episode [2^k, 2^{k+1} − 1] within the horizon."""
    g = result.grid_of(key)
    mean, _ = result.mean_se(key)
    pos = {int(t): float(m) for t, m in zip(g, mean)}
    out = []
    k = 1
    while (1 << k) - 1 in pos:
        start = 1 << k
        end = min((1 << (k + 1)) - 1, int(g[-1]))
        if end < start:
            break
        prev = pos[start - 1]
        cur = pos.get(end)
        if cur is None:
            break
        out.append((start, (cur - prev) / (end - start + 1)))
        k += 1
    return out
