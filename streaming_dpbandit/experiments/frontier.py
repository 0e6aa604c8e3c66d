"""``dpbandit reproduce frontier``: the privacy–utility frontier of the certified policies.

For a small set of public settings — the FLIPHAT paper's sparse high-dimensional environment,
dense low-dimensional linear bandits (d = 5 and d = 20, Shariff & Sheffet's unit-action
environment) and the DP-matroid synthetic slate instance — and ε ∈ {0.5, 1, 2, 5}: the regret at
T = 2·10⁴ and T = 10⁵ of every certified private policy that applies, next to the non-private
baseline and the uniform policy on the same streams (common random numbers: within a repetition
every run sees the same contexts and reward noise; ``runner.simulate`` and
``matroid_runner.simulate_slates``). Every run is configured for the largest horizon of the
profile; the regret at a smaller T is read off the same curve.

Every private run uses its policy's certified calibration (the default) with public parameters
only: bounds that follow from the environment's published description (‖θ‖, ‖x‖, reward range),
never its hidden parameter — except ``b_max`` of the sparse setting, the FLIPHAT paper's
``‖β*‖₁`` bound, which the paper treats as known (stated in ``docs/frontier.md``); the sparse
setting also runs FLIPHAT with a loose public bound, ``b_max = 10`` (row ``fliphat b_max=10``),
to show what the oracle bound is worth.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .report import format_table
from .runner import REPRODUCTION_NOISE_BACKEND, RunSpec, simulate

__all__ = [
    "PRIVATE_POLICIES",
    "PROFILES",
    "SETTINGS",
    "FrontierProfile",
    "frontier_table",
    "run_frontier",
]

EPSILONS = (0.5, 1.0, 2.0, 5.0)
DELTA = 1e-6
#: The loose public bound on ‖β*‖₁ of the sparse setting's second FLIPHAT run (issue 35).
LOOSE_B_MAX = 10.0


@dataclasses.dataclass(frozen=True)
class FrontierProfile:
    """Horizons at which regret is reported, repetitions and the ε grid."""

    name: str
    horizons: tuple[int, ...]
    seeds: int
    epsilons: tuple[float, ...] = EPSILONS
    settings: tuple[str, ...] | None = None  # None: every setting
    #: None: every certified policy; else only these (baselines and uniform always run)
    private_policies: tuple[str, ...] | None = None


#: The certified policies of the settings (``--private-policies`` chooses among them).
PRIVATE_POLICIES = ("fliphat", "dp-linucb", "dpucb-mat", "dpts-mat")


PROFILES = {
    "full": FrontierProfile("full", (20_000, 100_000), 20),
    "medium": FrontierProfile("medium", (20_000,), 20),
    # CI: every setting and policy, two budgets, a short horizon, few repetitions
    "quick": FrontierProfile("quick", (2_000,), 4, (1.0, 5.0)),
}


def _linear_specs(setting: str, env, epsilons, horizon: int) -> list[RunSpec]:
    d = env.d
    specs = [RunSpec("uniform", "random", {"d": d}, horizon, group="uniform")]
    if setting == "sparse":
        specs.append(RunSpec("lasso-bandit", "lasso-bandit", {"d": d}, horizon, group="baseline"))
        fl = {"d": d, "s": 10, "b_max": round(env.b_max, 6)}
        # ‖x‖₂ of an AR(0.1) N(0, Σ) context concentrates at √d (unit variances): clip at √d + 3;
        # ‖β*‖₂ ≤ ‖β*‖₁ ≤ b_max; |xᵀβ*| has s.d. ≤ ~1.2·‖β*‖₂: rewards clipped at 2·b_max
        lin = {"d": d, "L": math.sqrt(d) + 3.0, "S": env.b_max, "B_tilde": 2.0 * env.b_max}
    else:
        # unit actions, ‖θ*‖₂ = 1, rewards ±1: public bounds of the environment's description
        specs.append(
            RunSpec(
                "linucb",
                "linucb",
                {"d": d, "reg": 1.0, "alpha": 1.0 / horizon, "batch_size": 256},
                horizon,
                group="baseline",
            )
        )
        fl = {"d": d, "s": d, "b_max": math.sqrt(d), "x_max": 1.0, "reward_clip": 1.0}
        lin = {"d": d}
    for eps in epsilons:
        specs.append(
            RunSpec(
                f"fliphat ε={eps:g}",
                "fliphat",
                {**fl, "epsilon": float(eps), "delta": DELTA},
                horizon,
                float(eps),
                DELTA,
                group="private",
            )
        )
        if setting == "sparse":  # the same policy with a loose public bound (issue 35)
            specs.append(
                RunSpec(
                    f"fliphat b_max={LOOSE_B_MAX:g} ε={eps:g}",
                    "fliphat",
                    {**fl, "b_max": LOOSE_B_MAX, "epsilon": float(eps), "delta": DELTA},
                    horizon,
                    float(eps),
                    DELTA,
                    group="private",
                )
            )
        specs.append(
            RunSpec(
                f"dp-linucb ε={eps:g}",
                "dp-linucb",
                {
                    **lin,
                    "epsilon": float(eps),
                    "delta": DELTA,
                    "n_cap": horizon,
                    "batch_size": 256,
                    "release_records": False,
                },
                horizon,
                float(eps),
                DELTA,
                group="private",
            )
        )
    return specs


def _env(setting: str):
    from ..envs import FliphatPaperEnv, MatroidSyntheticEnv, ShariffSheffetEnv

    if setting == "sparse":
        return FliphatPaperEnv()  # d = 400, K = 3, s* = 5 (the paper's)
    if setting == "dense-d5":
        return ShariffSheffetEnv(d=5)  # K = 25 (the DP-LinUCB paper's)
    if setting == "dense-d20":
        return ShariffSheffetEnv(d=20, K=20)
    if setting == "slate":
        return MatroidSyntheticEnv()
    raise KeyError(setting)


#: setting -> one-line public description
SETTINGS = {
    "sparse": "sparse high-dimensional: FLIPHAT paper environment, d = 400, K = 3, s* = 5",
    "dense-d5": "dense low-dimensional: unit actions, d = 5, K = 25, gap 0.1, rewards ±1",
    "dense-d20": "dense low-dimensional: unit actions, d = 20, K = 20, gap 0.1, rewards ±1",
    "slate": "slate: DP-matroid synthetic linear matroid, 7 items, rank 3, Bernoulli rewards",
}


def _keep(specs: list, private_policies: tuple[str, ...] | None) -> list:
    if private_policies is None:
        return specs
    return [s for s in specs if s.group != "private" or s.policy in private_policies]


def _summaries_linear(setting, epsilons, horizons, seeds, jobs, progress, base_seed, only=None):
    env = _env(setting)
    specs = _keep(_linear_specs(setting, env, epsilons, max(horizons)), only)
    res = simulate(env, specs, seeds, base_seed=base_seed, jobs=jobs, progress=progress)
    rows = []
    for s in specs:
        for T in horizons:
            v = res.value_at(s.key, T)
            rows.append(_row(setting, s.key, s.policy, s.group, s.epsilon, T, v))
    curves = {
        s.key: dict(zip(("mean", "se"), map(np.ndarray.tolist, res.mean_se(s.key)))) for s in specs
    }
    return rows, {"t": res.grid.tolist(), "curves": curves, "env": res.env}


def _summaries_slate(setting, epsilons, horizons, seeds, jobs, progress, base_seed, only=None):
    from .dp_matroid import uninformed_return
    from .matroid_runner import MatroidRunSpec, log_grid, simulate_slates

    env = _env(setting)
    T = max(horizons)
    specs = [MatroidRunSpec("omm", "omm", {}, T, None, "baseline")]
    for eps in epsilons:
        for algo in ("dpucb-mat", "dpts-mat"):
            specs.append(
                MatroidRunSpec(
                    f"{algo} ε={eps:g}", algo, {"epsilon": float(eps)}, T, eps, "private"
                )
            )
    specs = _keep(specs, only)
    grid = np.unique(np.r_[log_grid(T), list(horizons)])
    res = simulate_slates(env, specs, seeds, base_seed, jobs, grid, progress)
    rows = []
    gap = env.optimal_return() - uninformed_return(env)
    for T_ in horizons:
        # the uniform policy (greedy over a uniformly random order): its exact expectation
        rows.append(_row(setting, "uniform", "uniform", "uniform", None, T_, np.array([gap * T_])))
    for s in specs:
        for T_ in horizons:
            rows.append(
                _row(setting, s.key, s.policy, s.group, s.epsilon, T_, res.at(s.key, "regret", T_))
            )
    curves = {
        s.key: {
            "mean": res.regret[s.key].mean(axis=0).tolist(),
            "se": (res.regret[s.key].std(axis=0, ddof=1) / math.sqrt(seeds)).tolist()
            if seeds > 1
            else [0.0] * grid.size,
        }
        for s in specs
    }
    curves["uniform"] = {"mean": (gap * grid).tolist(), "se": [0.0] * grid.size}
    return rows, {"t": grid.tolist(), "curves": curves, "env": env.describe()}


def _row(setting, key, policy, group, eps, T, v: np.ndarray) -> dict:
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0
    run = key.split(" ε=")[0] if eps is not None else policy  # "fliphat", "fliphat b_max=10"
    return {
        "setting": setting,
        "key": key,
        "policy": policy,
        "run": run,
        "group": group,
        "epsilon": eps,
        "T": int(T),
        "regret": float(v.mean()),
        "se": se,
        "n": int(v.size),
    }


def run_frontier(
    profile: FrontierProfile,
    jobs: int = 1,
    progress: bool = True,
    base_seed: int = 0,
) -> dict:
    """Run every setting of the profile; returns ``{"rows": [...], "settings": {...}}``."""
    out_rows, per_setting = [], {}
    names = profile.settings or tuple(SETTINGS)
    for setting in names:
        fn = _summaries_slate if setting == "slate" else _summaries_linear
        rows, extra = fn(
            setting,
            profile.epsilons,
            profile.horizons,
            profile.seeds,
            jobs,
            progress,
            base_seed,
            profile.private_policies,
        )
        out_rows += rows
        per_setting[setting] = {"description": SETTINGS[setting], **extra}
    return {
        "profile": dataclasses.asdict(profile),
        "delta": DELTA,
        # every private run is built from parameters (RunSpec, MatroidRunSpec): the
        # reproductions' backend, named in the JSON and the table heading (issue 31 §5)
        "noise_backend": REPRODUCTION_NOISE_BACKEND,
        "rows": out_rows,
        "settings": per_setting,
    }


def frontier_table(result: dict, setting: str) -> str:
    """One setting: a row per policy, a column per (T, ε); 'mean ± s.e.' of the regret."""
    rows = [r for r in result["rows"] if r["setting"] == setting]
    horizons = sorted({r["T"] for r in rows})
    eps = sorted({r["epsilon"] for r in rows if r["epsilon"] is not None})
    policies = list(dict.fromkeys(_run(r) for r in rows))
    headers = ["policy", "T"] + [f"ε={e:g}" for e in eps] + ["non-private"]
    body = []
    for pol in policies:
        for T in horizons:
            cells = {r["epsilon"]: r for r in rows if _run(r) == pol and r["T"] == T}
            line = [pol, f"{T:,}"]
            for e in eps:
                line.append(_cell(cells.get(e)))
            line.append(_cell(cells.get(None)))
            body.append(line)
    return format_table(headers, body)


def _run(r: dict) -> str:
    """A row's run label (the policy, or e.g. ``fliphat b_max=10``; older JSON: the policy)."""
    return str(r.get("run", r["policy"]))


def _cell(r) -> str:
    if r is None:
        return "-"
    if r["n"] > 1 and r["se"] == 0.0 and r["policy"] == "uniform":
        return f"{r['regret']:,.0f}"
    return f"{r['regret']:,.0f} ± {r['se']:,.0f}" if r["n"] > 1 else f"{r['regret']:,.0f}"


def plot_frontier(result: dict, setting: str, path: str) -> None:
    """Regret at the largest T against ε, one line per policy, baselines as horizontal lines."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["rows"] if r["setting"] == setting]
    T = max(r["T"] for r in rows)
    rows = [r for r in rows if r["T"] == T]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for pol in dict.fromkeys(_run(r) for r in rows if r["epsilon"] is not None):
        pts = sorted((r["epsilon"], r["regret"], r["se"]) for r in rows if _run(r) == pol)
        e, m, s = map(np.array, zip(*pts))
        ax.errorbar(e, m, yerr=2 * s, marker="o", capsize=3, label=f"{pol} (certified)")
    styles = iter(["--", ":"])
    for r in rows:
        if r["epsilon"] is None:
            what = "uniform random" if r["group"] == "uniform" else f"{r['policy']} (non-private)"
            ax.axhline(r["regret"], ls=next(styles, "-."), color="grey", label=what)
    ax.set_xscale("log")
    ax.set_yscale("log")
    eps = sorted({r["epsilon"] for r in rows if r["epsilon"] is not None})
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel(f"ε (δ = {result['delta']:g})")
    ax.set_ylabel(f"regret at T = {T:,} (mean ± 2 s.e.)")
    ax.set_title(result["settings"][setting]["description"], fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def best_private(result: dict, setting: str, T: int, eps: float) -> dict | None:
    """The certified private run of lowest mean regret at (T, ε)."""
    rows = [
        r
        for r in result["rows"]
        if r["setting"] == setting
        and r["T"] == T
        and r["epsilon"] == eps
        and r["group"] == "private"
    ]
    return min(rows, key=lambda r: r["regret"]) if rows else None
