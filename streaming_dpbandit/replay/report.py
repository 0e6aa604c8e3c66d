"""Terminal table and plot of a replay."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..privacy.accountant import ACCOUNTANT_NAMES
from ..utils.tables import format_table
from .result import ReplayResult

__all__ = ["plot_replay", "replay_table"]


def _num(v: float | None, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.{digits}g}"


def _ci(ci: Sequence[float | None] | None) -> str:
    if not ci or ci[0] is None:
        return "-"
    return f"[{_num(ci[0])}, {_num(ci[1])}]"


def _spent(p: dict[str, Any]) -> str:
    if not p.get("private"):
        return "non-private"
    rec = p.get("of_record")
    if rec is None:  # slate replays report their certified ε (pure) only
        eps, delta, by = p.get("epsilon_certified", p.get("basic_epsilon")), 0.0, "pure ε"
    else:
        eps, delta = rec["epsilon"], rec["delta"]
        by = ACCOUNTANT_NAMES.get(rec["accountant"], rec["accountant"])
    noise = f"; {p['noise_backend']} noise" if p.get("noise_backend") else ""
    text = f"ε={_num(eps, 3)}, δ={_num(delta, 2)} ({by}; {p.get('releases', 0)} rel.{noise})"
    if not p.get("dp_valid", True):
        text += " NOT DP-valid"
    return text


def _rows(result: ReplayResult) -> tuple[list[list[str]], list[str]]:
    rows: list[list[str]] = []
    notes: list[str] = []
    op = result.on_policy
    rows.append(
        [
            "logged policy",
            "on-policy",
            _num(op["value"]),
            _ci(op["ci_normal"]),
            _ci(op["ci_bootstrap"]),
            str(op["n"]),
            "-",
            "-",
        ]
    )
    for run in result.runs:
        if run["note"]:
            notes.append(f"{run['key']}: {run['note']}")
        if run.get("replay_skipped"):
            notes.append(f"{run['key']}: replay method skipped: {run['replay_skipped']}")
        ref = run.get("reference")
        if ref:
            rows.append(
                [
                    run["key"],
                    ref.get("label", "reference"),
                    _num(ref["value"]),
                    _ci(ref.get("ci_normal")),
                    "-",
                    str(ref.get("events", "-")),
                    "-",
                    "-",
                ]
            )
        rp = run["replay"]
        if rp is not None:
            e = rp["estimate"]
            dg = e["diagnostics"]
            rows.append(
                [
                    run["key"],
                    "replay",
                    _num(e["value"]),
                    _ci(e["ci_normal"]),
                    _ci(e["ci_bootstrap"]),
                    f"{dg['matched']} of {dg['events']}",
                    "-",
                    _spent(rp["privacy"]),
                ]
            )
            if dg.get("warning"):
                notes.append(f"{run['key']} replay: {dg['warning']}")
            label = rp["privacy"].get("label")
            if label:
                notes.append(f"{run['key']}: calibration is {label}")
        off = run["offpolicy"]
        if off is not None:
            w = off["weights"]
            for name, e in off["estimates"].items():
                rows.append(
                    [
                        run["key"],
                        name,
                        _num(e["value"]),
                        _ci(e["ci_normal"]),
                        _ci(e["ci_bootstrap"]),
                        str(e["n"]),
                        f"{w['ess']:,.0f}" if name != "dm" else "-",
                        _spent(off["privacy"]) + " (frozen)",
                    ]
                )
            for name, e in off["estimates"].items():
                if e["diagnostics"].get("warning"):
                    notes.append(f"{run['key']} {name}: {e['diagnostics']['warning']}")
            if w.get("warning"):
                notes.append(f"{run['key']}: {w['warning']}")
            if "warmup" in off:
                wu = off["warmup"]
                notes.append(
                    f"{run['key']}: frozen after learning from {wu['matched']} matched of the "
                    f"first {wu['events']} events (replay method)"
                )
    return rows, notes


def replay_table(result: ReplayResult) -> str:
    """The results as a plain-text table, with per-position values and notes."""
    lvl = f"{result.level:.0%}"
    rows, notes = _rows(result)
    out = [
        format_table(
            [
                "run",
                "estimator",
                "value",
                f"{lvl} CI (normal)",
                f"{lvl} CI (bootstrap)",
                "events",
                "ESS",
                "privacy spent",
            ],
            rows,
        )
    ]
    if result.positions > 1:
        heads = ["run", "estimator"] + [f"position {p + 1}" for p in range(result.positions)]
        prow: list[list[str]] = []

        def per(e: dict[str, Any]) -> list[str]:
            cells = []
            for p in range(result.positions):
                pp = e["per_position"][p] if p < len(e["per_position"]) else None
                cells.append("-" if pp is None else f"{_num(pp['value'])} ± {_num(pp['se'], 2)}")
            return cells

        prow.append(["logged policy", "on-policy", *per(result.on_policy)])
        for run in result.runs:
            if run["replay"] is not None:
                prow.append([run["key"], "replay", *per(run["replay"]["estimate"])])
            if run["offpolicy"] is not None:
                for name, e in run["offpolicy"]["estimates"].items():
                    prow.append([run["key"], name, *per(e)])
        out += ["", "per position (value ± s.e.):", format_table(heads, prow)]
    if result.reward_model is not None:
        rm = result.reward_model
        notes.append(
            f"reward model (DM/DR): out-of-fold R² = {_num(rm['r2_out_of_fold'], 3)}, "
            f"MSE = {_num(rm['mse_out_of_fold'], 3)}"
        )
    if any(run["offpolicy"] and "dm" in run["offpolicy"]["estimates"] for run in result.runs):
        notes.append("dm: interval conditional on the reward model: its bias is not covered")
    if any(run["replay"] for run in result.runs):
        notes.append(
            "replay: mean reward per matched round of the policy learning online "
            "(Li et al. 2011); privacy = the releases it made, composed by the accountant"
        )
    if notes:
        out.append("")
        out += [f"note: {n}" for n in dict.fromkeys(notes)]
    return "\n".join(out)


def plot_replay(result: ReplayResult, path: str, title: str = "") -> None:
    """Running estimates with their normal intervals, one panel per policy configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result.runs
    n = max(1, len(runs))
    cols = 1 if n == 1 else 2
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(7.5 * cols, 3.8 * rows), dpi=110, squeeze=False, sharey=True
    )
    op = result.on_policy
    # a value cannot leave the rewards' range (a click rate is in [0, 1]): clip the bands to it
    rlo, rhi = result.log.get("reward_range") or (-math.inf, math.inf)
    for ax, run in zip(axes.flat, runs):
        curves = []
        if run["replay"] is not None:
            curves.append(("replay", run["replay"]["estimate"]["curve"]))
        if run["offpolicy"] is not None:
            curves += [(k, e["curve"]) for k, e in run["offpolicy"]["estimates"].items()]
        for name, c in curves:
            if not c["events"]:
                continue
            lo = [math.nan if v is None else max(v, rlo) for v in c["lo"]]
            hi = [math.nan if v is None else min(v, rhi) for v in c["hi"]]
            val = [math.nan if v is None else v for v in c["value"]]
            ax.plot(c["events"], val, lw=1.4, label=name)
            ax.fill_between(c["events"], lo, hi, alpha=0.18)
        if op["value"] is not None:
            ax.axhline(op["value"], color="k", ls="--", lw=1, label="logged policy")
        ref = run.get("reference")
        if ref and ref.get("value") is not None:
            ax.axhline(ref["value"], color="purple", ls=":", lw=1.4, label=ref.get("label"))
            ci = ref.get("ci_normal")
            if ci and ci[0] is not None:
                ax.axhspan(ci[0], ci[1], color="purple", alpha=0.07)
        ax.set_title(run["key"], fontsize=9)
        ax.set_xlabel("events of the log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(runs) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel(f"estimated value ({result.level:.0%} interval)")
    where = result.log.get("path") or result.log.get("bootstrap", "")
    bands = f"shaded: {result.level:.0%} normal intervals"
    if math.isfinite(rlo) and math.isfinite(rhi):
        bands += f", clipped to the logged reward range [{rlo:g}, {rhi:g}]"
    fig.suptitle(
        (title or f"{result.log.get('format')} log {where}: {result.events:,} events")
        + f"\n{bands}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
