"""Terminal tables and plots for simulation results."""

from __future__ import annotations

from ..privacy.accountant import format_of_record
from .runner import SimulationResult

__all__ = ["episode_slopes", "format_table", "plot_curves", "simulation_table"]


#: Width of a table written anywhere but a terminal (a file, a pipe); ``COLUMNS`` overrides.
NON_TERMINAL_WIDTH = 200
#: No column is wrapped narrower than this.
MIN_COLUMN = 8


def table_width() -> int:
    """The terminal's width (``COLUMNS`` if set), or :data:`NON_TERMINAL_WIDTH` without one."""
    import shutil

    return max(40, shutil.get_terminal_size((NON_TERMINAL_WIDTH, 24)).columns)


def format_table(headers: list[str], rows: list[list[str]], width: int | None = None) -> str:
    """Plain-text table (``tabulate``), right-aligned, that fits ``width`` columns (default: the
    terminal's, :func:`table_width`): the widest columns are wrapped (at spaces where they can
    be) until the table fits or every column is :data:`MIN_COLUMN` wide.

    >>> print(format_table(["a", "bb"], [["1", "22"], ["333", "4"]]))
      a    bb
    ---  ----
      1    22
    333     4
    >>> print(format_table(["policy", "note"], [["fliphat", "a long note that wraps"]], width=24))
      policy         note
    --------  -----------
     fliphat  a long note
               that wraps
    """
    from tabulate import tabulate

    width = table_width() if width is None else width
    opts = {"tablefmt": "simple", "disable_numparse": True, "stralign": "right"}
    text = tabulate(rows, headers, **opts)
    if max(map(len, text.splitlines()), default=0) <= width:
        return text
    caps = [
        max([len(h), *(len(line) for r in rows for line in str(r[i]).splitlines())])
        for i, h in enumerate(headers)
    ]
    # tabulate pads every column by 2 (its MIN_PADDING) and separates them by 2 spaces
    budget = width - 4 * len(headers) + 2
    while sum(caps) > budget and max(caps) > MIN_COLUMN:
        caps[caps.index(max(caps))] -= 1
    # Wrapped here, not with tabulate's ``maxcolwidths``: tabulate 0.10 re-parses wrapped cells
    # as numbers despite ``disable_numparse`` (``int('1,500')`` raised in the service summary).
    import textwrap

    def wrap(cell, cap: int) -> str:
        return "\n".join(
            textwrap.fill(line, cap, break_on_hyphens=False) or line
            for line in str(cell).splitlines() or [""]
        )

    return tabulate(
        [[wrap(c, caps[i]) for i, c in enumerate(r)] for r in rows],
        [wrap(h, caps[i]) for i, h in enumerate(headers)],
        **opts,
    )


def _fmt_eps(v) -> str:
    return "-" if v is None else f"{v:g}"


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
        else:
            spent, calib, rel = "non-private", "-", "-"
        rows.append(
            [
                row["key"],
                str(row["horizon"]),
                f"{f['mean']:,.1f} ± {f['se']:,.1f}",
                spent,
                rel,
                calib,
            ]
        )
    return format_table(
        ["run", "T", "regret R(T) ± s.e.", "privacy spent", "releases", "calibration"], rows
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
        shown = sorted({cal for _, cal in labels if cal not in (None, "certified")})
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
