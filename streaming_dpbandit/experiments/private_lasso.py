"""``dpbandit reproduce private-lasso``: the PrivateLASSO spec's qualitative targets (§12).

The paper has no experiments; the spec gives synthetic set-ups (Env-M, Env-NM, Env-S; §12.1) and
qualitative targets (§12.3). The spec's scale (T up to 2^22, ≥ 20 seeds per cell) is days of CPU
on this product's reference machine (2 cores), so the default ``full`` profile is reduced — the
reductions are listed in :data:`REDUCTIONS` and printed with the report — and ``quick`` is a
seconds-long version for the test suite. Sections:

comparison
    FLIPHAT vs PrivateLASSO-R vs the Lasso bandits (SA-Lasso, TH-Lasso) and uniform play at equal
    (ε, δ) on Env-M(sparse): regret at two horizons, three ε, two d (the issue-8 table), plus the
    oracle-support PrivateLASSO-R (T7) and the episodic mode (T3 report).
T1/T2
    increment slopes b̂ (OLS slope of log2 ΔR_j on j, seed-bootstrap 90% CI) with (Env-M) and
    without (Env-NM) a margin.
T3/T5
    regret non-increasing in ε (comparison runs); offline support recovery over N × ε (one
    forgetful boundary, and the episodic ρ_b), TPR monotone, FP ≤ (2/3)(c − s0) + 2 s.e.
T4
    regret against d on Env-S for the sparse methods and the private dense reference (see below).
T6
    the paper variant: golden selection behaviour offline, regret ≈ uniform play in the loop.

Private LinUCB. The spec's dense reference is the project's private LinUCB (Shariff & Sheffet 2018),
which is being built in parallel (issue 4) and is not in this branch. The stand-in is
``PrivateLASSO(support="full")``: PrivateLASSO-R's own Gaussian Gram mechanism (M3 + M5) on all d
coordinates with the whole ρ — private greedy least squares in R^d with forgetful blocks. It shares
LinUCB's d-dimensional private statistics (noise ∝ √d in operator norm) but has no optimism bonus.

Spec: docs/specs/privatelasso.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
from scipy import stats

from ..envs.private_lasso import MarginEnv, NoMarginEnv
from ..estimators.elastic_net import CertifiedElasticNet
from ..estimators.lasso import lasso_gram
from ..estimators.sparse_lasso import lasso_rows
from ..policies import policy_class
from ..policies.private_lasso import PrivateLASSO
from ..policies.private_lasso_paper import paper_constants, paper_svt
from ..privacy.accountant import Accountant
from ..privacy.statement import PAPER_LABEL
from ..privacy.svt import SparseVector
from .fliphat import TargetCheck, checks_table, not_assessed
from .report import format_table
from .runner import RunSpec, SimulationResult, simulate

__all__ = [
    "FULL",
    "QUICK",
    "REDUCTIONS",
    "Profile",
    "Report",
    "increment_slope",
    "loglog_slope",
    "run_reproduction",
]

DELTA = 1e-8
PAPER_DELTA = 1e-5
Z2 = 2.0  # "within 2 s.e." of the spec


@dataclasses.dataclass
class Profile:
    """One reproduction configuration."""

    name: str
    table_ds: tuple[int, ...]
    table_horizons: tuple[int, ...]
    table_epsilons: tuple[float, ...]
    table_seeds: dict[int, int]  # d -> seeds
    episodic_d: int | None  # d of the episodic and oracle rows (None: skip)
    shape_d: int
    shape_horizon: int
    shape_epsilon: float
    shape_seeds: int
    recovery_d: int
    recovery_ns: tuple[int, ...]
    recovery_epsilons: tuple[float, ...]
    recovery_seeds: int
    dim_ds: tuple[int, ...]
    dense_ds: tuple[int, ...]
    dim_horizon: int
    dim_epsilon: float
    dim_seeds: int
    paper_offline_d: int
    paper_offline_rows: int
    paper_offline_seeds: int
    paper_loop_d: int
    paper_loop_horizon: int
    paper_loop_seeds: int
    refresh_every: int = 64


FULL = Profile(
    name="full",
    table_ds=(1000, 10_000),
    table_horizons=(10_000, 100_000),
    table_epsilons=(2.0, 8.0, 32.0),
    table_seeds={1000: 5, 10_000: 3},
    episodic_d=1000,
    shape_d=1000,
    shape_horizon=2**18,
    shape_epsilon=2048.0,
    shape_seeds=4,
    recovery_d=10_000,
    recovery_ns=tuple(2**k for k in range(11, 19)),
    recovery_epsilons=(1.0, 4.0, 16.0, 64.0, 256.0),
    recovery_seeds=10,
    dim_ds=(50, 100, 200, 400, 1000, 10_000),
    dense_ds=(12, 25, 50, 100, 200, 400),
    dim_horizon=100_000,
    dim_epsilon=32.0,
    dim_seeds=3,
    paper_offline_d=1000,
    paper_offline_rows=2**15 - 1,
    paper_offline_seeds=2000,
    paper_loop_d=200,
    paper_loop_horizon=2**14,
    paper_loop_seeds=3,
)

#: Targets a reduced profile cannot reach (not assessed there): T2 (√T exponents), T4 (slopes
#: in d).
SIZE_BOUND_TARGETS = ("T2", "T4")

QUICK = Profile(
    name="quick",
    table_ds=(100,),
    table_horizons=(2**12,),
    table_epsilons=(16.0, 128.0, 1024.0),
    table_seeds={100: 3},
    episodic_d=100,
    shape_d=100,
    shape_horizon=2**14,
    shape_epsilon=4096.0,
    shape_seeds=3,
    recovery_d=1000,
    recovery_ns=tuple(2**k for k in range(10, 15)),
    recovery_epsilons=(16.0, 256.0),
    recovery_seeds=4,
    dim_ds=(25, 100, 400),
    dense_ds=(12, 25, 50),
    dim_horizon=2**13,
    dim_epsilon=1024.0,
    dim_seeds=2,
    paper_offline_d=200,
    paper_offline_rows=2**14 - 1,
    paper_offline_seeds=500,
    paper_loop_d=30,
    paper_loop_horizon=2**11,
    paper_loop_seeds=2,
    refresh_every=64,
)

REDUCTIONS = (
    "seeds: 3–10 per cell instead of ≥ 20 (2-core machine); s.e. and bootstrap CIs use them",
    "T1/T2: T = 2^18 for every policy (spec: 2^18 non-private, 2^22 private) and PrivateLASSO-R "
    "at ε = 2048 (spec: 8, 16), so that recovery happens early enough to leave ≥ 4 "
    "post-recovery doublings inside the horizon in Env-NM too (its bounds are 3× larger)",
    "T3: regret monotonicity from the comparison runs (T = 10⁴, 10⁵; ε = 2, 8, 32) instead of "
    "T = 2^21 over ε ∈ {1,…,32}; forgetful vs episodic at d = 1000 only",
    "T4: T = 10⁵ and ε = 32 (spec: 2^21, ε = 16); d up to 10⁴ (spec: 10⁵); the dense reference is "
    "private full-dimensional least squares (PrivateLASSO-R's Gram mechanism with S = [d]), not "
    "Shariff–Sheffet LinUCB",
    "T5: N = 2^11…2^18, ε ∈ {1, 4, 16, 64, 256, ∞}, 10 seeds (spec: N up to 2^21, ε up to 32, 50)",
    "T6(a): one data set with 2000 SVT noise seeds (spec: 200 seeds); the ⊤ fraction pools the "
    "queried coordinates of all seeds",
    "episodic mode refreshes θ̂ every 64 sealed leaves (spec default 1) to bound the run time",
)


# -- shared helpers
def _mean_se(x) -> tuple[float, float]:
    x = np.asarray(x, dtype=np.float64)
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else 0.0
    return float(x.mean()), se


def _fmt(m: float, se: float) -> str:
    return f"{m:,.0f} ± {2 * se:,.0f}"


def plr_params(env, horizon: int, epsilon: float, **kw) -> dict:
    return {
        "d": env.d,
        "s0": env.s0,
        "horizon": int(horizon),
        "epsilon": float(epsilon),
        "delta": DELTA,
        **env.public_bounds(),
        **kw,
    }


def fliphat_params(env, epsilon: float) -> dict:
    """FLIPHAT with the environment's public bounds (no oracle values): s = 2·s0,
    x_max = b_x, b_max = √s0·C_θ (ℓ1 bound implied by ‖θ‖₂ ≤ C_θ), R = C_r."""
    b = env.public_bounds()
    return {
        "d": env.d,
        "s": 2 * env.s0,
        "epsilon": float(epsilon),
        "delta": DELTA,
        "b_max": math.sqrt(env.s0) * b["theta_bound"],
        "x_max": b["clip_coord"],
        "reward_clip": b["reward_bound"],
    }


def baseline_params(env, refit_every: int = 200) -> tuple[dict, dict]:
    b = env.public_bounds()
    clip = {
        "clip_coord": b["clip_coord"],
        "clip_l2": b["clip_l2"],
        "reward_bound": b["reward_bound"],
    }
    return {"d": env.d, **clip}, {"d": env.d, "refit_every": refit_every, **clip}


def _value_at(result: SimulationResult, key: str, t: int) -> np.ndarray:
    g = result.grid_of(key)
    i = int(np.searchsorted(g, t))
    if i < g.size and g[i] == t:
        return result.curves[key][:, i]
    return result.curves[key][:, -1] if t >= g[-1] else result.curves[key][:, max(i - 1, 0)]


def _clip_total(result: SimulationResult, key: str) -> int:
    reps = result.counters_by_rep[key] if result.counters_by_rep else [result.counters[key]]
    return sum(v for c in reps for k, v in c.items() if "clipped" in k)


def recovery_boundary(result: SimulationResult, key: str, support: np.ndarray, share=0.8):
    """n_rec: the first boundary slot at which TPR = 1 in ≥ 80% of seeds (None if never)."""
    reps = result.records_of(key)
    by_boundary: dict[int, list[float]] = {}
    for recs in reps:
        for r in recs:
            if "boundary" not in r.params or r.release is None:
                continue
            S = set(r.release.get("support", []))
            tpr = len(S & set(support.tolist())) / support.size
            by_boundary.setdefault(int(r.params["boundary"]), []).append(tpr)
    for ell in sorted(by_boundary):
        vals = by_boundary[ell]
        if len(vals) == len(reps) and np.mean(np.asarray(vals) >= 1.0) >= share:
            return ell
    return None


def increment_slope(
    result: SimulationResult, key: str, js: list[int], n_boot: int = 1000, seed: int = 0
) -> tuple[float, float, float, list[float]]:
    """b̂: OLS slope of log2 ΔR_j on j, ΔR_j = R(2^{j+1}) − R(2^j) (seed-averaged, ≥ 1e−3).

    Returns (b̂, 5% and 95% seed-bootstrap quantiles, the increments). R(2^j) is read at the
    recorded round 2^j − 1 (the grid holds every 2^k − 1).
    """
    curves = np.stack([_value_at(result, key, (1 << j) - 1) for j in [*js, js[-1] + 1]], axis=1)

    def slope(c):
        inc = np.maximum(np.diff(c.mean(axis=0)), 1e-3)
        return float(np.polyfit(np.asarray(js, dtype=float), np.log2(inc), 1)[0]), inc

    b, inc = slope(curves)
    rng = np.random.default_rng(seed)
    n = curves.shape[0]
    boot = [slope(curves[rng.integers(0, n, n)])[0] for _ in range(n_boot)] if n > 1 else [b]
    lo, hi = np.quantile(boot, [0.05, 0.95])
    return b, float(lo), float(hi), inc.tolist()


def loglog_slope(x, y) -> float:
    """OLS slope of log y on log x.

    >>> round(loglog_slope([1, 10, 100], [2, 20, 200]), 6)
    1.0
    """
    return float(np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(y, float)), 1)[0])


# -- the report
@dataclasses.dataclass
class Report:
    """Tables, target checks and raw numbers of one reproduction run."""

    profile: str
    base_seed: int
    sections: list[dict]
    checks: list[TargetCheck]
    elapsed_s: float = 0.0
    curves: dict = dataclasses.field(default_factory=dict)

    def text(self) -> str:
        out = [
            f"PrivateLASSO reproduction — profile '{self.profile}', base seed {self.base_seed}, "
            f"{self.elapsed_s:.0f} s",
            "Reductions from spec §12 (this machine): ",
            *(f"  - {r}" for r in REDUCTIONS),
            "",
        ]
        for sec in self.sections:
            out.append(f"== {sec['title']} ==")
            if sec.get("note"):
                out.append(sec["note"])
            out.append(format_table(sec["headers"], sec["rows"]))
            out.append("")
        out.append("== targets ==")
        out.append(checks_table(self.checks))
        return "\n".join(out)

    def to_json(self) -> dict:
        return {
            "profile": self.profile,
            "base_seed": self.base_seed,
            "elapsed_s": self.elapsed_s,
            "reductions": list(REDUCTIONS),
            "sections": self.sections,
            "targets": [c.to_dict() for c in self.checks],
            "curves": self.curves,
        }

    def plot(self, path: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        panels = [k for k in self.curves if self.curves[k]]
        fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 4.5))
        axes = np.atleast_1d(axes)
        for ax, name in zip(axes, panels):
            for label, c in self.curves[name].items():
                ax.plot(c["t"], c["mean"], label=label, lw=1.4)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("slot t")
            ax.set_ylabel("cumulative pseudo-regret")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def _curve_dict(result: SimulationResult, keys) -> dict:
    out = {}
    for k in keys:
        m, _ = result.mean_se(k)
        out[k] = {"t": result.grid_of(k).tolist(), "mean": m.tolist()}
    return out


# -- section: comparison (issue-8 table, T3, T7)
def comparison(prof: Profile, jobs: int, base_seed: int, progress: bool, eps_override=None):
    epsilons = tuple(eps_override or prof.table_epsilons)
    rows, checks, results = [], [], {}
    for d in prof.table_ds:
        env = MarginEnv(d=d)
        sa, th = baseline_params(env)
        for T in prof.table_horizons:
            specs = []
            for eps in epsilons:
                specs.append(
                    RunSpec(
                        f"FLIPHAT ε={eps:g}", "fliphat", fliphat_params(env, eps), T, eps, DELTA
                    )
                )
                specs.append(
                    RunSpec(
                        f"PrivateLASSO-R ε={eps:g}",
                        "private-lasso",
                        plr_params(env, T, eps),
                        T,
                        eps,
                        DELTA,
                    )
                )
            if d == prof.episodic_d and T == max(prof.table_horizons):
                for eps in epsilons:
                    specs.append(
                        RunSpec(
                            f"PrivateLASSO-R episodic ε={eps:g}",
                            "private-lasso",
                            plr_params(
                                env, T, eps, mode="episodic", refresh_every=prof.refresh_every
                            ),
                            T,
                            eps,
                            DELTA,
                            group="episodic",
                        )
                    )
                mid = epsilons[len(epsilons) // 2]
                specs.append(
                    RunSpec(
                        f"oracle-support PrivateLASSO-R ε={mid:g}",
                        "private-lasso",
                        plr_params(
                            env, T, mid, support="oracle", oracle_support=env.support.tolist()
                        ),
                        T,
                        mid,
                        DELTA,
                        group="oracle",
                    )
                )
            specs.append(RunSpec("SA-Lasso (Lasso bandit)", "sa-lasso", sa, T))
            specs.append(RunSpec("TH-Lasso", "th-lasso", th, T))
            specs.append(RunSpec("uniform", "random", {"d": d}, T))
            seeds = prof.table_seeds[d]
            res = simulate(
                env, specs, seeds=seeds, base_seed=base_seed, jobs=jobs, progress=progress
            )
            results[(d, T)] = (env, res)
            fin = {s.key: _mean_se(res.finals[s.key]) for s in specs}
            row = [f"{d:,}", f"{T:,}", str(seeds)]
            for eps in epsilons:
                row += [_fmt(*fin[f"FLIPHAT ε={eps:g}"]), _fmt(*fin[f"PrivateLASSO-R ε={eps:g}"])]
            row += [
                _fmt(*fin["SA-Lasso (Lasso bandit)"]),
                _fmt(*fin["TH-Lasso"]),
                _fmt(*fin["uniform"]),
            ]
            rows.append(row)
            # T3: non-increasing in ε (adjacent pairs ordered or within 2 s.e.)
            for name in ("FLIPHAT", "PrivateLASSO-R"):
                bad = []
                for lo, hi in itertools.pairwise(epsilons):
                    a, b = fin[f"{name} ε={lo:g}"], fin[f"{name} ε={hi:g}"]
                    if b[0] > a[0] + Z2 * math.hypot(a[1], b[1]):
                        bad.append(f"ε={hi:g} above ε={lo:g}")
                checks.append(
                    TargetCheck(
                        "T3",
                        f"{name}, d={d:,}, T={T:,}",
                        "R(T) non-increasing in ε",
                        "holds" if not bad else "; ".join(bad),
                        "2 s.e.",
                        not bad,
                    )
                )
            # the simulator's assertion: clipping never triggers on these environments
            clipped = {s.key: _clip_total(res, s.key) for s in specs}
            checks.append(
                TargetCheck(
                    "sim",
                    f"d={d:,}, T={T:,}",
                    "no input is ever clipped (bounds are the envs' public bounds)",
                    "none clipped" if not any(clipped.values()) else str(clipped),
                    "0",
                    not any(clipped.values()),
                )
            )
            # the ledger never spends more than the configured budget
            over = []
            for s in specs:
                if s.policy == "private-lasso":
                    rho_max = policy_class(s.policy, s.params)(**s.params).rho
                    for recs in res.records_of(s.key):
                        sp = Accountant(recs).spend("default")
                        if sp.rho is not None and sp.rho > rho_max * (1 + 1e-12):
                            over.append(s.key)
            checks.append(
                TargetCheck(
                    "ledger",
                    f"d={d:,}, T={T:,}",
                    "ledger ρ ≤ ρ(ε, δ) for every PrivateLASSO-R run",
                    "holds" if not over else ", ".join(sorted(set(over))),
                    "exact",
                    not over,
                )
            )
            # T7: TH, SA ≤ oracle-support ≤ PrivateLASSO-R (within 2 s.e.)
            if d == prof.episodic_d and T == max(prof.table_horizons):
                mid = epsilons[len(epsilons) // 2]
                o = fin[f"oracle-support PrivateLASSO-R ε={mid:g}"]
                p = fin[f"PrivateLASSO-R ε={mid:g}"]
                bad = []
                for nm in ("TH-Lasso", "SA-Lasso (Lasso bandit)"):
                    b = fin[nm]
                    if b[0] > o[0] + Z2 * math.hypot(b[1], o[1]):
                        bad.append(f"{nm} above oracle")
                if o[0] > p[0] + Z2 * math.hypot(o[1], p[1]):
                    bad.append("oracle above PrivateLASSO-R")
                checks.append(
                    TargetCheck(
                        "T7",
                        f"d={d:,}, T={T:,}, ε={mid:g}",
                        "TH, SA ≤ oracle-support ≤ PrivateLASSO-R",
                        f"TH {_fmt(*fin['TH-Lasso'])}, SA {_fmt(*fin['SA-Lasso (Lasso bandit)'])}, "
                        f"oracle {_fmt(*o)}, PLR {_fmt(*p)}",
                        "2 s.e.",
                        not bad,
                        "; ".join(bad),
                    )
                )
                ep_rows = []
                for eps in epsilons:
                    f_ = fin[f"PrivateLASSO-R ε={eps:g}"]
                    e_ = fin[f"PrivateLASSO-R episodic ε={eps:g}"]
                    ep_rows.append(f"ε={eps:g}: forgetful {_fmt(*f_)} vs episodic {_fmt(*e_)}")
                checks.append(
                    TargetCheck(
                        "T3",
                        f"forgetful vs episodic, d={d:,}, T={T:,}",
                        "forgetful expected lower",
                        "; ".join(ep_rows),
                        "-",
                        None,
                    )
                )
    headers = ["d", "T", "seeds"]
    for eps in epsilons:
        headers += [f"FLIPHAT ε={eps:g}", f"PLR-R ε={eps:g}"]
    headers += ["SA-Lasso", "TH-Lasso", "uniform"]
    section = {
        "title": "comparison at equal (ε, δ = 1e-8) on Env-M(sparse): regret R(T) ± 2 s.e.",
        "note": "PLR-R = PrivateLASSO-R (forgetful, certified); FLIPHAT certified with public "
        "bounds; T_max = T for every private run; common random numbers within a seed.",
        "headers": headers,
        "rows": rows,
    }
    return section, checks, results


# -- section: T1/T2 increment slopes
def doubling_shapes(prof: Profile, jobs: int, base_seed: int, progress: bool):
    T, d, eps = prof.shape_horizon, prof.shape_d, prof.shape_epsilon
    top = T.bit_length() - 2  # last doubling j with 2^{j+1} ≤ T
    rows, checks, curves = [], [], {}
    slopes: dict[tuple[str, str], tuple[float, float, float, int, bool]] = {}
    for env in (MarginEnv(d=d), NoMarginEnv(d=d)):
        sa, th = baseline_params(env)
        specs = [
            RunSpec("SA-Lasso", "sa-lasso", sa, T),
            RunSpec("TH-Lasso", "th-lasso", th, T),
            RunSpec(
                f"PrivateLASSO-R ε={eps:g}", "private-lasso", plr_params(env, T, eps), T, eps, DELTA
            ),
        ]
        res = simulate(
            env, specs, seeds=prof.shape_seeds, base_seed=base_seed, jobs=jobs, progress=progress
        )
        tag = "Env-M" if isinstance(env, MarginEnv) else "Env-NM"
        curves[f"T1/T2 {tag}(sparse), d={d}"] = _curve_dict(res, [s.key for s in specs])
        for s in specs:
            if s.policy == "private-lasso":
                ell = recovery_boundary(res, s.key, env.support)
                start = (ell + 1) if ell is not None else top + 1
                js = list(range(start, top + 1))
                if len(js) < 2:
                    js = list(range(top - 1, top + 1))
                note = f"post-recovery (n_rec = 2^{ell})" if ell is not None else "never recovered"
            else:
                js = list(range(top - 4, top + 1))
                note = "last 5 doublings"
            b, lo, hi, inc = increment_slope(res, s.key, js)
            recovered = s.policy != "private-lasso" or ell is not None
            slopes[(tag, s.policy)] = (b, lo, hi, len(js), recovered)
            rows.append(
                [
                    tag,
                    s.key,
                    f"{js[0]}–{js[-1]}",
                    note,
                    f"{b:+.2f} [{lo:+.2f}, {hi:+.2f}]",
                    " ".join(f"{x:.3g}" for x in inc),
                    _fmt(*_mean_se(res.finals[s.key])),
                ]
            )
    for pol in ("sa-lasso", "th-lasso"):
        sl = slopes[("Env-M", pol)]
        checks.append(
            TargetCheck("T1", f"{pol}, Env-M", "b̂ ≤ 0.2", f"{sl[0]:+.2f}", "-", sl[0] <= 0.2)
        )
        sl = slopes[("Env-NM", pol)]
        checks.append(
            TargetCheck(
                "T2",
                f"{pol}, Env-NM",
                "b̂ ∈ [0.35, 0.65]",
                f"{sl[0]:+.2f}",
                "-",
                0.35 <= sl[0] <= 0.65,
            )
        )
    bm, bn = slopes[("Env-M", "private-lasso")], slopes[("Env-NM", "private-lasso")]
    # The targets are about the *post-recovery* window. When the support is not recovered
    # within T (the quick profile's horizons), there is no such window: the slope of the last
    # two doublings is then reported but not assessed (its bootstrap CI spans several units).
    unassessed = "support not recovered within T: no post-recovery window to assess"
    checks.append(
        TargetCheck(
            "T1",
            f"PrivateLASSO-R ε={eps:g}, Env-M",
            "b̂ ≤ 0.2 post-recovery",
            f"{bm[0]:+.2f} over {bm[3]} doublings",
            "-",
            bm[0] <= 0.2 if bm[4] else None,
            "" if bm[4] else unassessed,
        )
    )
    checks.append(
        TargetCheck(
            "T2",
            f"PrivateLASSO-R ε={eps:g}",
            "b̂_NM − b̂_M ≥ 0.3 post-recovery",
            f"{bn[0] - bm[0]:+.2f} ({bn[0]:+.2f} − {bm[0]:+.2f})",
            "-",
            bn[0] - bm[0] >= 0.3 if bm[4] and bn[4] else None,
            "" if bm[4] and bn[4] else unassessed,
        )
    )
    section = {
        "title": f"T1/T2 — per-doubling regret increments, d = {d}, T = 2^{T.bit_length() - 1}, "
        f"{prof.shape_seeds} seeds",
        "note": "b̂ = OLS slope of log2 ΔR_j on j with a seed-bootstrap 90% CI; √T gives 0.5, "
        f"polylog gives ≤ 0.2. Env-M's smallest positive gap for this θ is "
        f"{MarginEnv(d=d).min_gap():.2g} (a margin in name only at these horizons).",
        "headers": ["env", "policy", "window j", "window", "b̂ [90% CI]", "ΔR_j", "R(T) ± 2 s.e."],
        "rows": rows,
    }
    return section, checks, curves


# -- section: T5 support recovery (offline)
def support_recovery(prof: Profile, base_seed: int):
    d = prof.recovery_d
    env = MarginEnv(d=d)
    S_star = set(env.support.tolist())
    s0 = env.s0
    T_max = 2**22
    pols = {
        mode: PrivateLASSO(**plr_params(env, T_max, 1.0, mode=mode))
        for mode in ("forgetful", "episodic")
    }
    cap = pols["forgetful"].cap
    en: CertifiedElasticNet = pols["forgetful"].elastic_net()
    eps_all = [*prof.recovery_epsilons, math.inf]
    consts = {
        (m, e): PrivateLASSO(**plr_params(env, T_max, e, mode=m))
        for m in ("forgetful", "episodic")
        for e in prof.recovery_epsilons
    }
    tpr: dict[tuple[str, int, float], list[float]] = {
        (m, N, e): [] for m in ("forgetful", "episodic") for N in prof.recovery_ns for e in eps_all
    }
    fp: dict[tuple[str, int, float], list[float]] = {k: [] for k in tpr}
    for seed in range(prof.recovery_seeds):
        for N in prof.recovery_ns:
            rng = np.random.default_rng([base_seed, seed, N, 5])
            Z, y = env.records(rng, N)
            lam = pols["forgetful"].lambda_n(N)
            theta = np.abs(en.fit(Z, y, N=N, lam=lam).theta)
            # ε = ∞: TH-Lasso's thresholds on the same records
            lam_th = 0.02 * math.sqrt(2 * math.log(N) * math.log(d) / N)
            beta = np.abs(lasso_rows(Z, y, lam_th))
            S0 = np.nonzero(beta > 4 * lam_th)[0]
            S_inf = set(S0[beta[S0] > 4 * lam_th * math.sqrt(max(S0.size, 1))].tolist())
            for mode in pols:
                ell = N.bit_length()  # forgetful block of size N = 2^(ℓ−1); episodic history 2^ℓ
                for e in eps_all:
                    if math.isinf(e):
                        S = S_inf
                    else:
                        # one boundary on N records: the forgetful block (2^{ℓ−1}, 2^ℓ] or the
                        # episodic history [1, 2^{ℓ−1}] (ρ_b = ρ_sel/n_E); same N, same θ̃
                        k = consts[(mode, e)].boundary_constants(
                            ell if mode == "forgetful" else ell - 1
                        )
                        assert k["N"] == N and k["lambda_N"] == lam
                        g = np.random.default_rng([base_seed, seed, N, int(e * 1000), len(mode)])
                        svt = SparseVector(k["tau"], k["svt_sigma"], cap)
                        S = set(svt.run(theta, g, order=g.permutation(d)).selected.tolist())
                    tpr[(mode, N, e)].append(len(S & S_star) / s0)
                    fp[(mode, N, e)].append(len(S - S_star))
    rows, checks = [], []
    bound = (2.0 / 3.0) * (cap - s0)
    for mode in ("forgetful", "episodic"):
        grid = np.array([[np.mean(tpr[(mode, N, e)]) for N in prof.recovery_ns] for e in eps_all])
        se = np.array([[_mean_se(tpr[(mode, N, e)])[1] for N in prof.recovery_ns] for e in eps_all])
        for i, e in enumerate(eps_all):
            rows.append(
                [mode, "∞ (TH-Lasso)" if math.isinf(e) else f"{e:g}"]
                + [
                    f"{grid[i, j]:.2f}/{np.mean(fp[(mode, N, e)]):.1f}"
                    for j, N in enumerate(prof.recovery_ns)
                ]
            )
        reversals = []
        for i in range(len(eps_all)):
            for j in range(len(prof.recovery_ns) - 1):
                if grid[i, j + 1] < grid[i, j] - Z2 * math.hypot(se[i, j], se[i, j + 1]):
                    reversals.append(f"N ↓ at ε={eps_all[i]:g}, N={prof.recovery_ns[j + 1]}")
        for j in range(len(prof.recovery_ns)):
            for i in range(len(eps_all) - 1):
                if grid[i + 1, j] < grid[i, j] - Z2 * math.hypot(se[i, j], se[i + 1, j]):
                    reversals.append(f"ε ↓ at N={prof.recovery_ns[j]}, ε={eps_all[i + 1]:g}")
        # Spearman of TPR with the (N, ε) order over the grid's non-degenerate cells
        nn, ee = np.meshgrid(np.arange(len(prof.recovery_ns)), np.arange(len(eps_all)))
        rho_n = stats.spearmanr(nn.ravel() + 1e-6 * ee.ravel(), grid.ravel()).statistic
        checks.append(
            TargetCheck(
                "T5",
                f"{mode}: TPR monotone in N and ε",
                "no adjacent reversal beyond 2 s.e.",
                "holds" if not reversals else "; ".join(reversals[:3]),
                "2 s.e.",
                not reversals,
                f"Spearman(TPR, N) over the grid = {rho_n:.2f}",
            )
        )
        worst = max(
            (np.mean(fp[k]) - Z2 * _mean_se(fp[k])[1], k)
            for k in fp
            if k[0] == mode and not math.isinf(k[2])
        )
        checks.append(
            TargetCheck(
                "T5",
                f"{mode}: false positives",
                f"mean FP ≤ (2/3)(c − s0) = {bound:.2f} + 2 s.e. in every cell",
                f"max (mean − 2 s.e.) = {worst[0]:.2f} at N={worst[1][1]}, ε={worst[1][2]:g}",
                "2 s.e.",
                bool(worst[0] <= bound),
            )
        )
        # recovery point (guidance, not a criterion)
        for i, e in enumerate(eps_all):
            jr = next((j for j in range(len(prof.recovery_ns)) if grid[i, j] >= 0.99), None)
            if mode == "forgetful" and not math.isinf(e):
                checks.append(
                    TargetCheck(
                        "T5",
                        f"forgetful ε={e:g}: TPR ≈ 1 from N =",
                        "guidance: 2^13–2^14 at ε=32, 2^17–2^18 at ε=1",
                        "not within the grid"
                        if jr is None
                        else f"2^{prof.recovery_ns[jr].bit_length() - 1}",
                        "-",
                        None,
                    )
                )
    section = {
        "title": f"T5 — support recovery at one boundary, Env-S d = {d:,}, "
        f"{prof.recovery_seeds} seeds (mean TPR / mean FP)",
        "note": f"columns N = {', '.join(f'2^{N.bit_length() - 1}' for N in prof.recovery_ns)}; "
        f"ρ_sel from T_max = 2^22, δ = 1e-8; c = {cap}; FP bound (2/3)(c − s0) = {bound:.2f}.",
        "headers": ["mode", "ε"] + [f"2^{N.bit_length() - 1}" for N in prof.recovery_ns],
        "rows": rows,
    }
    return section, checks


# -- section: T4 dimension
def dimension(prof: Profile, jobs: int, base_seed: int, progress: bool, table_results: dict):
    T, eps = prof.dim_horizon, prof.dim_epsilon
    key_plr, key_dense = f"PrivateLASSO-R ε={eps:g}", f"dense reference ε={eps:g}"
    rows, checks = [], []
    R: dict[tuple[str, int], float] = {}
    for d in sorted(set(prof.dim_ds) | set(prof.dense_ds)):
        env = MarginEnv(d=d)
        sa, th = baseline_params(env)
        keys = {
            "plr": key_plr,
            "sa": "SA-Lasso (Lasso bandit)",
            "th": "TH-Lasso",
            "dense": key_dense,
        }
        found: dict[str, np.ndarray] = {}
        reuse = table_results.get((d, T))
        if reuse is not None and key_plr in reuse[1].finals:
            found.update({n: reuse[1].finals[keys[n]] for n in ("plr", "sa", "th")})
        specs = []
        if d in prof.dim_ds and not found:
            specs += [
                RunSpec(key_plr, "private-lasso", plr_params(env, T, eps), T, eps, DELTA),
                RunSpec(keys["sa"], "sa-lasso", sa, T),
                RunSpec(keys["th"], "th-lasso", th, T),
            ]
        if d in prof.dense_ds:
            specs.append(
                RunSpec(
                    key_dense,
                    "private-lasso",
                    plr_params(env, T, eps, support="full"),
                    T,
                    eps,
                    DELTA,
                )
            )
        if specs:
            res = simulate(
                env, specs, seeds=prof.dim_seeds, base_seed=base_seed, jobs=jobs, progress=progress
            )
            found.update({n: res.finals[k] for n, k in keys.items() if k in res.finals})
        row = [f"{d:,}"]
        for name in ("plr", "sa", "th", "dense"):
            if name in found:
                m, se = _mean_se(found[name])
                R[(name, d)] = m
                row.append(_fmt(m, se))
            else:
                row.append("-")
        row.append(f"{env.random_regret_per_round() * T:,.0f}")
        rows.append(row)
    for name, label in (("plr", "PrivateLASSO-R"), ("sa", "SA-Lasso"), ("th", "TH-Lasso")):
        ds = [d for d in prof.dim_ds if (name, d) in R]
        s = loglog_slope(ds, [R[(name, d)] for d in ds])
        checks.append(
            TargetCheck(
                "T4",
                f"{label}, d = {ds[0]}…{ds[-1]:,}",
                "log-log slope ≤ 0.25",
                f"{s:.2f}",
                "-",
                s <= 0.25,
            )
        )
    ds = [d for d in prof.dense_ds if ("dense", d) in R]
    rr = MarginEnv(d=ds[0]).random_regret_per_round() * T
    unsat = [d for d in ds if R[("dense", d)] < 0.5 * rr]
    stand_in = (
        "stand-in for private LinUCB (not in this branch): PrivateLASSO-R's Gram mechanism, S = [d]"
    )
    if len(unsat) >= 3:
        s = loglog_slope(unsat, [R[("dense", d)] for d in unsat])
        checks.append(
            TargetCheck(
                "T4",
                f"dense reference, unsaturated d = {unsat}",
                "log-log slope ≥ 0.5",
                f"{s:.2f}",
                "-",
                s >= 0.5,
                stand_in,
            )
        )
    else:
        checks.append(
            TargetCheck(
                "T4",
                "dense reference",
                "≥ 3 unsaturated points (R < 0.5·R_random)",
                f"only {unsat}",
                "-",
                False,
                stand_in,
            )
        )
    section = {
        "title": f"T4 — regret against d on Env-S, T = {T:,}, ε = {eps:g}, {prof.dim_seeds} seeds "
        "(d in the comparison grid reuses its runs)",
        "note": "dense reference = private full-dimensional least squares (PrivateLASSO-R with "
        "S = [d]), the stand-in for private LinUCB.",
        "headers": ["d", "PrivateLASSO-R", "SA-Lasso", "TH-Lasso", "dense reference", "uniform"],
        "rows": rows,
    }
    return section, checks


# -- section: T6 the paper variant
def paper_variant(prof: Profile, jobs: int, base_seed: int, progress: bool):
    rows, checks = [], []
    # (a) offline, the §4.3 configuration (T = 2^16, δ = 1e−5, s0 = 5, C_r = C_X = C_θ = 1)
    d = prof.paper_offline_d
    env = MarginEnv(d=d, base="dense")
    n = prof.paper_offline_rows
    t = n + 1
    rng = np.random.default_rng([base_seed, 46])
    G = np.zeros((d + 1, d + 1))
    for i in range(0, n, 4096):
        m = min(4096, n - i)
        X, y = env.records(rng, m)
        W = np.c_[X.toarray(), np.clip(y, -1.0, 1.0)]  # C_r = 1 in the golden configuration
        G += W.T @ W
    lam = math.sqrt(2 * math.log(t) * math.log(d) / t)
    theta = lasso_gram(G[:d, :d], G[:d, d], float(G[d, d]), n, lam / (2 * n), tol=1e-6)
    S0 = np.nonzero(np.abs(theta) > 4 * lam)[0]
    golden = {
        0.1: (4.992e6, 3.022e5, 3.478e5),
        1.0: (4.992e5, -0.3876, -0.4462),
        10.0: (4.992e4, -3022.0, -3479.0),
    }  # spec §4.3 (d = 1000, t = 2^15)
    for eps in (0.1, 1.0, 10.0):
        k = paper_constants(2**16, PAPER_DELTA, d, 5, eps, reward_bound=1.0, clip_l2=math.sqrt(d))
        passed = queried = 0
        pvals = []
        for seed in range(prof.paper_offline_seeds):
            g = np.random.default_rng([base_seed, 47, seed, int(eps * 10)])
            _, q, ok = paper_svt(theta, S0, k.threshold(lam), k.xi, k.cap, g)
            passed += int(ok.sum())
            queried += q.size
            sel, rej = np.abs(theta[q[ok]]), np.abs(theta[q[~ok]])
            if sel.size and rej.size:
                pvals.append(stats.mannwhitneyu(sel, rej, alternative="two-sided").pvalue)
            else:
                pvals.append(1.0)
        f = passed / max(1, queried)
        share = float(np.mean(np.asarray(pvals) > 0.01))
        rows.append(
            [
                f"{eps:g}",
                f"{k.epsilon1:.3e}",
                f"{k.xi:.3e}",
                f"{k.gamma:.4g}",
                f"{k.threshold(lam):.4g}",
                f"{k.k_w:.2g}",
                f"{S0.size}",
                f"{f:.3f} of {queried}",
                f"{share:.2f}",
            ]
        )
        if d == 1000 and t == 2**15:
            xi, gamma, thr = golden[eps]
            ok_gold = all(
                abs(a / b - 1) < 1e-3
                for a, b in ((k.xi, xi), (k.gamma, gamma), (k.threshold(lam), thr))
            )
            checks.append(
                TargetCheck(
                    "T6a",
                    f"ε={eps:g}: constants",
                    f"ξ={xi:.4g}, Γ={gamma:.4g}, threshold={thr:.4g} (§4.3)",
                    f"ξ={k.xi:.4g}, Γ={k.gamma:.4g}, threshold={k.threshold(lam):.4g}",
                    "0.1%",
                    ok_gold,
                )
            )
        se = math.sqrt(0.25 / max(1, queried))
        checks.append(
            TargetCheck(
                "T6a",
                f"ε={eps:g}: ⊤ among queried coordinates of S0",
                "≈ 1/2 whatever |θ̂_i| ([0.47, 0.53]); MW p > 0.01 in ≥ 90% of seeds",
                f"{f:.3f} ± {2 * se:.3f} over {queried} queries; MW p > 0.01 in {100 * share:.0f}%",
                "[0.47, 0.53] ± 2 s.e.",
                queried > 0 and 0.47 - 2 * se <= f <= 0.53 + 2 * se and share >= 0.9,
                f"|S0| = {S0.size} (the spec expected S0 to be large; with n ≫ d the near-OLS "
                "θ̂ puts only true coordinates above 4λ_t)",
            )
        )
    # (b) in the loop: Env-M(dense), ε = 1, δ = 1e−5
    d2, T = prof.paper_loop_d, prof.paper_loop_horizon
    env2 = MarginEnv(d=d2, base="dense")
    params = plr_params(
        env2, T, 1.0, delta=PAPER_DELTA, calibration="paper", allow_invalid_privacy=True
    )
    specs = [
        RunSpec("PrivateLASSO (paper)", "private-lasso", params, T, 1.0, PAPER_DELTA),
        RunSpec("uniform", "random", {"d": d2}, T),
    ]
    res = simulate(
        env2, specs, seeds=prof.paper_loop_seeds, base_seed=base_seed, jobs=jobs, progress=progress
    )
    rp = _mean_se(res.finals["PrivateLASSO (paper)"])
    rr = _mean_se(res.finals["uniform"])
    ratio = rp[0] / rr[0]
    valid = all(not r.dp_valid for recs in res.records_of("PrivateLASSO (paper)") for r in recs)
    checks.append(
        TargetCheck(
            "T6b",
            f"Env-M(dense) d={d2}, T=2^{T.bit_length() - 1}, ε=1",
            "R_paper/R_random ∈ [0.9, 1.1]",
            f"{ratio:.3f} ({_fmt(*rp)} vs {_fmt(*rr)})",
            "±10%",
            0.9 <= ratio <= 1.1,
            f"every release dp_valid=false: {valid}",
        )
    )
    section = {
        "title": f"T6 — the paper's PrivateLASSO (calibration='paper': {PAPER_LABEL})",
        "note": f"(a) offline §4.3 configuration: d = {d}, {n} records of Env-M(dense), boundary "
        f"t = {t} (λ_t = {lam:.5f}), {prof.paper_offline_seeds} SVT seeds per ε",
        "headers": ["ε", "ε1", "ξ", "Γ", "threshold", "k_W", "|S0|", "⊤ fraction", "MW p>0.01"],
        "rows": rows,
    }
    return section, checks


# -- driver
def run_reproduction(
    seeds: int | None = None,
    epsilons=None,
    horizon: int | None = None,
    quick: bool = False,
    jobs: int = 1,
    base_seed: int = 0,
    progress: bool = True,
    sections: tuple[str, ...] = ("comparison", "shapes", "recovery", "dimension", "paper"),
) -> Report:
    """Run the reproduction; ``seeds`` overrides every section's seed count, ``horizon`` the
    comparison's largest horizon, ``epsilons`` the comparison's ε values."""
    import time

    prof = QUICK if quick else FULL
    if seeds is not None:
        prof = dataclasses.replace(
            prof,
            table_seeds={d: seeds for d in prof.table_ds},
            shape_seeds=seeds,
            recovery_seeds=seeds,
            dim_seeds=seeds,
            paper_loop_seeds=seeds,
        )
    if horizon is not None:
        prof = dataclasses.replace(
            prof, table_horizons=tuple(sorted({min(t, horizon) for t in prof.table_horizons}))
        )
    start = time.perf_counter()
    secs, checks, curves = [], [], {}
    table_results = {}
    if "comparison" in sections:
        sec, chk, table_results = comparison(prof, jobs, base_seed, progress, epsilons)
        secs.append(sec)
        checks += chk
        for (d, T), (_, res) in table_results.items():
            if T == max(prof.table_horizons):
                keys = [s.key for s in res.specs if s.group == ""]
                curves[f"comparison d={d:,}, T={T:,}"] = _curve_dict(res, keys)
    if "shapes" in sections:
        sec, chk, cv = doubling_shapes(prof, jobs, base_seed, progress)
        secs.append(sec)
        checks += chk
        curves.update(cv)
    if "recovery" in sections:
        sec, chk = support_recovery(prof, base_seed)
        secs.append(sec)
        checks += chk
    if "dimension" in sections:
        sec, chk = dimension(prof, jobs, base_seed, progress, table_results)
        secs.append(sec)
        checks += chk
    if "paper" in sections:
        sec, chk = paper_variant(prof, jobs, base_seed, progress)
        secs.append(sec)
        checks += chk
    if quick or horizon is not None:
        # T2 (the √T exponents) and T4 (slopes in d) need the full profile's horizons: a reduced
        # run measures and shows them; every other target is checked at any size
        why = f"profile '{prof.name}'" + ("" if horizon is None else f", horizon ≤ {horizon:,}")
        checks = [
            not_assessed(c, f"needs the full profile's horizons; {why}")
            if c.target in SIZE_BOUND_TARGETS and c.passed is not None
            else c
            for c in checks
        ]
    return Report(prof.name, base_seed, secs, checks, time.perf_counter() - start, curves)
