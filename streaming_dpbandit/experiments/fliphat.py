"""``dpbandit reproduce fliphat``: the FLIPHAT paper's public reproduction (spec §13).

Configuration (spec §13.1): d = 400, K = 3, s* = 5, AR(0.1) Gaussian contexts, N(0, 0.1²)
noise, δ = 0.01, ε ∈ {0.5, 1, 2, 5}; FLIPHAT with the ``paper`` calibration (reproduction only,
not a valid DP guarantee), s = 10, η = 1e-4, oracle b_max = C = ‖β*‖₁, x_max = √(2 ln d)
without clipping, M_ℓ = ⌊M0·ln(1 + n·b_max²)⌋ with ``allow_zero``: M0 = 0.15 for the T1 cells at
T = 10⁴ and M0 = 0.16 for the regret curves at T = 2·10⁴, next to the random policy and the
sparsity-agnostic Lasso bandit. All runs of a repetition share one stream (common random
numbers) and draw independent DP noise.

Targets (spec §13.3): T1 regret at 10⁴ (±10% per cell), T3 random-policy regret (±2%),
T5 where each curve flattens (±1 episode), T6 ordering in ε and between the baselines;
T4 (Lasso ≈ 510, read off the paper's figure) is reported for information.

Spec: docs/specs/fliphat.md.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from ..envs.fliphat_paper import FliphatPaperEnv
from .report import episode_slopes, format_table
from .runner import RunSpec, SimulationResult, simulate

__all__ = [
    "PAPER_T1",
    "TargetCheck",
    "check_targets",
    "checks_table",
    "paper_fliphat_params",
    "reproduction_specs",
    "run_reproduction",
]

PAPER_EPSILONS = (0.5, 1.0, 2.0, 5.0)
PAPER_T1 = {0.5: 9944.0, 1.0: 5491.0, 2.0: 2851.0, 5.0: 1253.0}
PAPER_FLATTEN = {0.5: 8192, 1.0: 4096, 2.0: 2048, 5.0: 1024}
PAPER_LASSO_T4 = 510.0
PAPER_DELTA = 0.01
T1_HORIZON = 10_000
CURVE_HORIZON = 20_000
T1_TOLERANCE = 0.10
T3_TOLERANCE = 0.02
T4_TOLERANCE = 0.25
#: Flattening: the first episode whose mean slope falls below this share of the random slope.
FLATTEN_SHARE = 0.5
#: z for the "up to Monte-Carlo error" comparisons at every recorded round (many tests).
Z_EVERY_T = 4.0
#: z for the strict comparisons at the named rounds.
Z_STRICT = 2.0


def paper_fliphat_params(env: FliphatPaperEnv, epsilon: float, m0: float, delta: float) -> dict:
    """FLIPHAT parameters of the reproduction profile (spec §13.1)."""
    return {
        "d": env.d,
        "s": 10,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "eta": 1e-4,
        "b_max": env.b_max,
        "l1_radius": env.b_max,
        "x_max": math.sqrt(2.0 * math.log(env.d)),
        "calibration": "paper",
        "clip_contexts": False,
        "m_schedule": "log",
        "m0": m0,
        "m_guard": "allow_zero",
        "first_episode_len": 1,
    }


def reproduction_specs(
    env: FliphatPaperEnv, epsilons, horizon: int = CURVE_HORIZON, delta: float = PAPER_DELTA
) -> list[RunSpec]:
    t1h = min(T1_HORIZON, horizon)
    specs = []
    for eps in epsilons:
        specs.append(
            RunSpec(
                f"T1 fliphat ε={eps:g}",
                "fliphat",
                paper_fliphat_params(env, eps, 0.15, delta),
                t1h,
                float(eps),
                delta,
                "T1",
            )
        )
    for eps in epsilons:
        specs.append(
            RunSpec(
                f"fliphat ε={eps:g}",
                "fliphat",
                paper_fliphat_params(env, eps, 0.16, delta),
                horizon,
                float(eps),
                delta,
                "curve",
            )
        )
    specs.append(RunSpec("random", "random", {"d": env.d}, horizon, group="baseline"))
    specs.append(RunSpec("lasso-bandit", "lasso-bandit", {"d": env.d}, horizon, group="baseline"))
    return specs


#: Note prefix (and result column) of a target that a reduced run cannot reach: it is neither
#: a pass nor a failure, and does not change the exit status.
NOT_ASSESSED = "not assessed at this size"


@dataclasses.dataclass
class TargetCheck:
    """One target: expected vs measured; ``passed`` is None for informational rows (and for
    targets :data:`NOT_ASSESSED` at a reduced size, whose note starts with that phrase)."""

    target: str
    cell: str
    expected: str
    measured: str
    tolerance: str
    passed: bool | None
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _published(env: FliphatPaperEnv, delta: float) -> bool:
    ref = FliphatPaperEnv()
    same = all(
        getattr(env, k) == getattr(ref, k) for k in ("d", "s_star", "K", "sigma", "noise", "rho")
    )
    return same and delta == PAPER_DELTA


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else 0.0


def check_targets(
    result: SimulationResult, env: FliphatPaperEnv, epsilons, delta: float, mc_widen: float = 0.0
) -> list[TargetCheck]:
    """Compare a reproduction with the spec's targets.

    ``mc_widen`` > 0 widens the T1 tolerance by that many standard errors (reduced-seed CI runs,
    spec §15); the CLI uses 0, the exact ±10%.
    """
    checks: list[TargetCheck] = []
    published = _published(env, delta)
    eps_sorted = sorted(float(e) for e in epsilons)
    t1 = {s.epsilon: s for s in result.specs if s.group == "T1"}
    curve = {s.epsilon: s for s in result.specs if s.group == "curve"}
    horizon = max(s.horizon for s in result.specs)
    # T1
    for eps in eps_sorted:
        spec = t1[eps]
        m, se = _mean_se(result.finals[spec.key])
        exp = PAPER_T1.get(eps) if published and spec.horizon == T1_HORIZON else None
        if exp is None:
            checks.append(
                TargetCheck(
                    "T1",
                    f"ε={eps:g}, T={spec.horizon}",
                    "n/a (unpublished cell)",
                    f"{m:,.0f} ± {se:,.0f}",
                    "-",
                    None,
                )
            )
            continue
        tol = T1_TOLERANCE * exp + mc_widen * se
        checks.append(
            TargetCheck(
                "T1",
                f"ε={eps:g}, T=10⁴",
                f"{exp:,.0f}",
                f"{m:,.0f} ± {se:,.0f}",
                f"±{tol:,.0f}" + (f" (10% + {mc_widen:g} s.e.)" if mc_widen else " (10%)"),
                abs(m - exp) <= tol,
                f"{100 * (m - exp) / exp:+.1f}%",
            )
        )
    # T3: random policy, E[R(T)] = T·E[max of K normals]·√(β*ᵀΣβ*)
    m, se = _mean_se(result.finals["random"])
    exp = env.random_regret_per_round() * horizon
    t3 = TargetCheck(
        "T3",
        f"random, T={horizon}",
        f"{exp:,.0f}",
        f"{m:,.0f} ± {se:,.0f}",
        "±2%",
        abs(m - exp) <= T3_TOLERANCE * exp,
        f"{100 * (m - exp) / exp:+.2f}%",
    )
    if Z_EVERY_T * se > T3_TOLERANCE * exp and abs(m - exp) <= T3_TOLERANCE * exp + Z_EVERY_T * se:
        # too few repetitions for ±2% to be decided (the Monte-Carlo error is larger); a miss
        # beyond ±2% + 4 s.e. is still a failure at any size
        t3 = not_assessed(t3, f"Monte-Carlo s.e. {100 * se / exp:.1f}% of the target")
    checks.append(t3)
    # T4 (informational): read off the paper's figure; the exact configuration gives ≈ 390.
    m, se = _mean_se(result.finals["lasso-bandit"])
    if horizon == CURVE_HORIZON and published:
        checks.append(
            TargetCheck(
                "T4",
                "Lasso bandit, T=2·10⁴",
                f"≈{PAPER_LASSO_T4:,.0f} (figure)",
                f"{m:,.0f} ± {se:,.0f}",
                f"±{T4_TOLERANCE:.0%}",
                None,
                "informational: spec §13.3 expects ≈390 from the exact configuration",
            )
        )
    # T5: flattening episode
    random_slope = env.random_regret_per_round()
    for eps in eps_sorted:
        slopes = episode_slopes(result, curve[eps].key)
        flat = next((start for start, sl in slopes if sl < FLATTEN_SHARE * random_slope), None)
        exp = PAPER_FLATTEN.get(eps) if published else None
        desc = ", ".join(f"{s}:{sl:.2f}" for s, sl in slopes if s >= 256)
        measured = "never" if flat is None else f"{flat:,}"
        if exp is None or exp > horizon:
            checks.append(
                TargetCheck(
                    "T5", f"ε={eps:g} flattens after", "n/a", measured, "-", None, f"slopes {desc}"
                )
            )
            continue
        ok = flat is not None and exp // 2 <= flat <= exp * 2
        checks.append(
            TargetCheck(
                "T5",
                f"ε={eps:g} flattens after",
                f"{exp:,}",
                measured,
                "±1 episode",
                ok,
                f"episode slopes {desc}",
            )
        )
    # T6: ordering in ε (paired: common random numbers) and between the baselines
    grid = result.grid
    named = [t for t in (T1_HORIZON, CURVE_HORIZON) if t <= horizon and t in set(grid.tolist())]

    def paired(a_key, b_key):
        """mean and s.e. of (a − b) at every recorded round of the curve horizon."""
        a, b = result.curves[a_key], result.curves[b_key]
        n = min(a.shape[1], b.shape[1])
        diff = a[:, :n] - b[:, :n]
        se = (
            diff.std(axis=0, ddof=1) / math.sqrt(diff.shape[0])
            if diff.shape[0] > 1
            else 0 * diff[0]
        )
        return diff.mean(axis=0), se, grid[:n]

    problems = []
    for lo, hi in itertools.pairwise(eps_sorted):
        mean, se, g = paired(curve[lo].key, curve[hi].key)  # R_lo − R_hi, should be ≥ 0
        bad = g[mean < -Z_EVERY_T * se - 1e-9]
        if bad.size:
            problems.append(f"R(ε={hi:g}) > R(ε={lo:g}) at t={int(bad[0])}")
        for t in named:
            i = int(np.searchsorted(g, t))
            if not mean[i] > Z_STRICT * se[i]:
                problems.append(f"R(ε={hi:g}) not strictly below R(ε={lo:g}) at t={t}")
    for eps in eps_sorted:
        for low, high, what in (
            ("lasso-bandit", curve[eps].key, "above Lasso"),
            (curve[eps].key, "random", "below random"),
        ):
            mean, se, g = paired(high, low)  # should be ≥ 0
            bad = g[mean < -Z_EVERY_T * se - 1e-9]
            if bad.size:
                problems.append(f"ε={eps:g} not {what} at t={int(bad[0])}")
            if T1_HORIZON in named:
                i = int(np.searchsorted(g, T1_HORIZON))
                if not mean[i] > Z_STRICT * se[i]:
                    problems.append(f"ε={eps:g} not strictly {what} at t=10⁴")
    t6 = TargetCheck(
        "T6",
        "ordering in ε and between baselines",
        "non-increasing in ε; Lasso < FLIPHAT < random",
        "holds" if not problems else "; ".join(problems[:3]),
        f"{Z_EVERY_T:g} s.e. at every t, strict ({Z_STRICT:g} s.e.) at 10⁴/2·10⁴",
        not problems,
    )
    if horizon < T1_HORIZON or not published:
        # the paper states the ordering for its configuration at 10⁴ and 2·10⁴ rounds
        t6 = not_assessed(t6, f"the paper's configuration at T ≥ 10⁴; this run T = {horizon}")
    checks.append(t6)
    return checks


def not_assessed(c: TargetCheck, why: str) -> TargetCheck:
    """``c`` relabelled as beyond this run's size: measured and shown, neither pass nor fail."""
    note = f"{NOT_ASSESSED} ({why})"
    if c.passed is False and c.note:
        note += f"; measured: {c.note}"
    return dataclasses.replace(c, passed=None, note=note)


def result_label(c: TargetCheck) -> str:
    """PASS, FAIL, "not assessed" (a target beyond a reduced run's reach) or info."""
    if c.passed is None and c.note.startswith(NOT_ASSESSED):
        return "not assessed"
    return {True: "PASS", False: "FAIL", None: "info"}[c.passed]


def checks_table(checks: list[TargetCheck]) -> str:
    rows = [
        [
            c.target,
            c.cell,
            c.expected,
            c.measured,
            c.tolerance,
            result_label(c),
            c.note,
        ]
        for c in checks
    ]
    return format_table(
        ["target", "cell", "expected", "measured", "tolerance", "result", "note"], rows
    )


def run_reproduction(
    epsilons=PAPER_EPSILONS,
    horizon: int = CURVE_HORIZON,
    seeds: int = 20,
    env_params: dict | None = None,
    jobs: int = 1,
    base_seed: int = 0,
    delta: float = PAPER_DELTA,
    progress: bool = True,
    mc_widen: float = 0.0,
) -> tuple[SimulationResult, list[TargetCheck]]:
    env = FliphatPaperEnv(**(env_params or {}))
    specs = reproduction_specs(env, epsilons, horizon, delta)
    result = simulate(env, specs, seeds=seeds, base_seed=base_seed, jobs=jobs, progress=progress)
    return result, check_targets(result, env, epsilons, delta, mc_widen)
