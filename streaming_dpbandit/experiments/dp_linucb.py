"""``dpbandit reproduce dp-linucb``: Shariff & Sheffet's Experiment 2/3 (DP-LinUCB spec §12.3).

Configuration (spec §12.2–§12.3): the paper's environment (§12.1: K = d² fresh unit actions,
optimal projection 0.75, gap Δ, bounded ±1 rewards, so L = S = B̃ = σ = 1), d = 5,
n = 5·10⁷, (ε, δ) = (1, 0.1), α = 1/(2n), every release padded to m terms, the
``authors_code_2018`` calibration profile (reproduction only, labelled), 35 runs per cell; the
non-private baseline is LinUCB with ρ = 1 and α = 1/n. Mechanisms GAUSS, WISHART_SHIFTED and
WISHART_UNSHIFTED at ε = 1 for Δ ∈ {0, 0.1}; an ε sweep {0.5, 1, 2, 4, 8, 16} at Δ = 0.1 for
GAUSS and WISHART_SHIFTED. Beyond the paper (spec §11): the padded tree and the square-root
factorisation, both ``certified``, at ε = 1 with common random numbers. All runs of a repetition
see the same actions and reward coins and draw independent DP noise; releases are refreshed
every ``batch_size`` rounds (default 256, a post-processing; see docs/dp-linucb.md for what
batching does to regret). Every private run of repetition 0 tracks the spec §9 ratios.

Targets (spec §12.3, issue 4):

R1  non-private ≪ Gaussian ≪ Wishart-shifted at ε = 1 (paired, and ≥ 2× each);
    shifted vs unshifted Wishart (spec: shifted not worse at Δ = 0.1, 95% CI; clearly better at
    Δ = 0) is checked only at the paper's horizon — at reduced horizons it is reported for
    information (measured at n = 2²¹ it is *reversed*: docs/dp-linucb.md);
R2  regret decreases in ε: the mean decreases at every step of the sweep, no step shows a
    significant (2 s.e., paired) increase and the smallest ε is strictly worse than the largest
    (at the flat, large-ε end consecutive cells are within noise at a few repetitions); the
    log-log slope against 1/ε is information (checked ≥ 0.5 at the paper's horizon);
R3  Gaussian beats Wishart-shifted by ≥ 2× at every ε of the sweep;
F   the square-root factorisation is no worse than the tree at equal (ε, δ) (95% CI);
B   every release of every private run of repetition 0 is positive definite after the shift and
    inside [ρ_min, ρ_max], ‖h‖_{H⁻¹} ≤ γ (count of non-PD releases reported).

Spec: docs/specs/dp_linucb_tree.md.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..envs.shariff_sheffet import ShariffSheffetEnv
from .fliphat import NOT_ASSESSED, TargetCheck, checks_table, not_assessed
from .runner import RunSpec, SimulationResult, simulate

__all__ = [
    "PAPER_HORIZON",
    "check_targets",
    "checks_table",
    "reproduction_specs",
    "run_reproduction",
]

PAPER_D = 5
PAPER_HORIZON = 50_000_000
#: Smallest horizon at which R1–R3 are judged (spec §12.3's CI smoke size, where they hold:
#: tests/experiments/test_reproduction.py); below it they are "not assessed at this size".
R_TARGETS_HORIZON = 1 << 19
PAPER_SEEDS = 35
PAPER_DELTA = 0.1
PAPER_SWEEP = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
PAPER_GAPS = (0.0, 0.1)
PROFILE = "authors_code_2018"
SEVERAL = 2.0
Z95 = 1.96
Z_STRICT = 2.0


def _dp(d, horizon, eps, delta, batch_size, **extra) -> dict:
    return {
        "d": d,
        "epsilon": float(eps),
        "delta": delta,
        "n_cap": horizon,
        "calibration": PROFILE,
        "batch_size": batch_size,
        "track_bounds": True,
        "release_records": False,  # epoch records carry the cost; 5·10⁷/256 records per run
        **extra,
    }


def reproduction_specs(
    d: int,
    horizon: int,
    gap: float,
    epsilons=PAPER_SWEEP,
    delta: float = PAPER_DELTA,
    batch_size: int = 256,
    include_unshifted: bool = True,
) -> list[RunSpec]:
    """The runs of one gap: mechanisms at ε = 1, the sweep (Δ > 0 only), tree vs factorisation."""
    specs = [
        RunSpec(
            "non-private",
            "linucb",
            {"d": d, "reg": 1.0, "alpha": 1.0 / horizon, "batch_size": batch_size},
            horizon,
            group="baseline",
        )
    ]
    eps_list = sorted({1.0, *map(float, epsilons)}) if gap > 0 else [1.0]
    for eps in eps_list:
        for key, extra in (("gauss", {}), ("wishart-shifted", {"noise": "wishart"})):
            specs.append(
                RunSpec(
                    f"{key} ε={eps:g}",
                    "dp-linucb",
                    _dp(d, horizon, eps, delta, batch_size, **extra),
                    horizon,
                    eps,
                    delta,
                    group="sweep" if eps != 1.0 else "mechanisms",
                )
            )
    if include_unshifted:
        specs.append(_unshifted(d, horizon, delta, batch_size))
    for impl in ("binary", "sqrt_toeplitz"):
        specs.append(
            RunSpec(
                f"{'tree' if impl == 'binary' else 'sqrt-toeplitz'} certified ε=1",
                "dp-linucb",
                _dp(d, horizon, 1.0, delta, batch_size, calibration="certified", tree_impl=impl),
                horizon,
                1.0,
                delta,
                group="factorisation",
            )
        )
    return specs


def _unshifted(d, horizon, delta, batch_size) -> RunSpec:
    return RunSpec(
        "wishart-unshifted ε=1",
        "dp-linucb",
        _dp(d, horizon, 1.0, delta, batch_size, noise="wishart", shift=False),
        horizon,
        1.0,
        delta,
        group="mechanisms",
    )


def _paired(result: SimulationResult, a: str, b: str) -> tuple[float, float]:
    """Mean and s.e. of final(b) − final(a) over repetitions (common random numbers)."""
    diff = result.finals[b] - result.finals[a]
    se = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else 0.0
    return float(diff.mean()), se


def _fmt(result, key) -> str:
    f = result.finals[key]
    se = f.std(ddof=1) / math.sqrt(f.size) if f.size > 1 else 0.0
    return f"{f.mean():,.0f} ± {se:,.0f}"


def check_targets(result: SimulationResult, gap: float, epsilons, full: bool) -> list[TargetCheck]:
    checks: list[TargetCheck] = []
    mean = {k: float(v.mean()) for k, v in result.finals.items()}
    # R1: ordering at ε = 1
    chain = ["non-private", "gauss ε=1", "wishart-shifted ε=1"]
    problems, ratios = [], []
    for a, b in itertools.pairwise(chain):
        diff, se = _paired(result, a, b)
        ratio = mean[b] / max(mean[a], 1e-12)
        ratios.append(f"{b}/{a} = {ratio:.1f}×")
        if not (diff > Z_STRICT * se and ratio >= SEVERAL):
            problems.append(f"{b} not ≫ {a}")
    checks.append(
        TargetCheck(
            "R1",
            f"Δ={gap:g}: non-private ≪ Gaussian ≪ Wishart-shifted (ε=1)",
            f"each ≥ {SEVERAL:g}× and paired > {Z_STRICT:g} s.e.",
            ", ".join(_fmt(result, k) for k in chain),
            "; ".join(ratios),
            not problems,
            "; ".join(problems),
        )
    )
    if "wishart-unshifted ε=1" not in result.finals:
        return checks + _later_checks(result, gap, epsilons, full, mean)
    diff, se = _paired(result, "wishart-unshifted ε=1", "wishart-shifted ε=1")
    ok = diff <= Z95 * se if gap > 0 else diff < -Z_STRICT * se
    checks.append(
        TargetCheck(
            "R1",
            f"Δ={gap:g}: Wishart shifted vs unshifted (ε=1)",
            "shifted not worse (95% CI)" if gap > 0 else "shifted < unshifted",
            f"shifted − unshifted = {diff:,.0f} ± {se:,.0f}",
            "95% CI",
            ok if full else None,
            ""
            if full
            else "information only below the paper's horizon (spec §12.3 states it for "
            "n = 5·10⁷); see docs/dp-linucb.md",
        )
    )
    return checks + _later_checks(result, gap, epsilons, full, mean)


def _later_checks(result, gap, epsilons, full, mean) -> list[TargetCheck]:
    checks: list[TargetCheck] = []
    # R2 and R3: the ε sweep
    eps_sorted = sorted({1.0, *map(float, epsilons)})
    if gap > 0 and len(eps_sorted) < 2:
        checks.append(
            TargetCheck(
                "R2",
                f"Δ={gap:g}: Gaussian regret against ε",
                "decreasing in ε",
                "one ε only",
                "-",
                None,
                f"{NOT_ASSESSED}: the ε sweep needs at least two values of --epsilon",
            )
        )
    elif gap > 0:
        problems = []
        for lo, hi in itertools.pairwise(eps_sorted):
            d_, s_ = _paired(result, f"gauss ε={hi:g}", f"gauss ε={lo:g}")  # R(lo) − R(hi)
            if not d_ > 0:
                problems.append(f"mean R(ε={hi:g}) ≥ R(ε={lo:g})")
            elif d_ < -Z_STRICT * s_:
                problems.append(f"R(ε={hi:g}) significantly above R(ε={lo:g})")
        d_, s_ = _paired(result, f"gauss ε={eps_sorted[-1]:g}", f"gauss ε={eps_sorted[0]:g}")
        if not d_ > Z_STRICT * s_:
            problems.append(f"R(ε={eps_sorted[-1]:g}) not strictly below R(ε={eps_sorted[0]:g})")
        finals = np.array([mean[f"gauss ε={e:g}"] for e in eps_sorted])
        slope = float(np.polyfit(np.log(1.0 / np.array(eps_sorted)), np.log(finals), 1)[0])
        checks.append(
            TargetCheck(
                "R2",
                f"Δ={gap:g}: Gaussian regret decreases in ε",
                "mean decreasing at every step, never a significant increase, "
                "first ≫ last (paired)",
                ", ".join(f"ε={e:g}: {mean[f'gauss ε={e:g}']:,.0f}" for e in eps_sorted),
                f"{Z_STRICT:g} s.e.",
                not problems,
                "; ".join(problems),
            )
        )
        checks.append(
            TargetCheck(
                "R2",
                f"Δ={gap:g}: log-log slope of R(n) against 1/ε (Gaussian)",
                "of order 1 (≥ 0.5)",
                f"{slope:.2f}",
                "≥ 0.5",
                (slope >= 0.5) if full else None,
                "" if full else "information only: runs that have not levelled off flatten it",
            )
        )
        problems = []
        ratio_of = {
            e: mean[f"wishart-shifted ε={e:g}"] / max(mean[f"gauss ε={e:g}"], 1e-12)
            for e in eps_sorted
        }
        for e in eps_sorted:
            g, w = f"gauss ε={e:g}", f"wishart-shifted ε={e:g}"
            d_, s_ = _paired(result, g, w)
            if not (d_ > Z_STRICT * s_ and mean[w] >= SEVERAL * mean[g]):
                problems.append(f"ε={e:g}: ratio {mean[w] / max(mean[g], 1e-12):.1f}×")
        checks.append(
            TargetCheck(
                "R3",
                f"Δ={gap:g}: Gaussian beats Wishart-shifted at every ε",
                f"≥ {SEVERAL:g}× (paired)",
                ", ".join(f"ε={e:g}: {r:.1f}×" for e, r in ratio_of.items()),
                f"{Z_STRICT:g} s.e.",
                not problems,
                "; ".join(problems),
            )
        )
    # F: factorisation vs tree
    diff, se = _paired(result, "tree certified ε=1", "sqrt-toeplitz certified ε=1")
    checks.append(
        TargetCheck(
            "F",
            f"Δ={gap:g}: sqrt-Toeplitz factorisation vs padded tree (certified, ε=1)",
            "factorisation no worse (95% CI)",
            f"{_fmt(result, 'sqrt-toeplitz certified ε=1')} vs "
            f"{_fmt(result, 'tree certified ε=1')}",
            "95% CI",
            diff <= Z95 * se,
            f"factorisation − tree = {diff:,.0f} ± {se:,.0f}",
        )
    )
    # B: bounds over every release of repetition 0
    bad, total, worst = [], 0, {"min": math.inf, "max": 0.0, "h": 0.0}
    for spec in result.specs:
        c = result.counters.get(spec.key, {})
        if "sim_releases_checked" not in c:
            continue
        total += int(c["sim_releases_checked"])
        worst["min"] = min(worst["min"], float(c["sim_min_lambda_min_over_rho_min"]))
        worst["max"] = max(worst["max"], float(c["sim_max_lambda_max_over_rho_max"]))
        worst["h"] = max(worst["h"], float(c["sim_max_h_norm_over_gamma"]))
        if c["sim_non_pd_H"] or c["sim_min_lambda_min_over_rho_min"] < 1:
            bad.append(spec.key)
        elif c["sim_max_lambda_max_over_rho_max"] > 1 or c["sim_max_h_norm_over_gamma"] > 1:
            bad.append(spec.key)
    non_pd = sum(int(result.counters[s.key].get("sim_non_pd_H", 0)) for s in result.specs)
    checks.append(
        TargetCheck(
            "B",
            f"Δ={gap:g}: every release, repetition 0 ({total:,} releases)",
            "PD; λmin/ρmin ≥ 1, λmax/ρmax ≤ 1, ‖h‖_H⁻¹/γ ≤ 1",
            f"non-PD: {non_pd}; min λmin/ρmin {worst['min']:.3f}; max λmax/ρmax "
            f"{worst['max']:.3f}; max ‖h‖/γ {worst['h']:.3f}",
            "every release",
            not bad,
            "; ".join(bad),
        )
    )
    return checks


def run_reproduction(
    d: int = PAPER_D,
    horizon: int = PAPER_HORIZON,
    seeds: int = PAPER_SEEDS,
    gaps=PAPER_GAPS,
    epsilons=PAPER_SWEEP,
    delta: float = PAPER_DELTA,
    batch_size: int = 256,
    jobs: int = 1,
    base_seed: int = 0,
    progress: bool = True,
    include_unshifted: bool = True,
) -> tuple[dict[float, SimulationResult], list[TargetCheck]]:
    """Simulate every gap's runs and compare them with the targets."""
    full = d == PAPER_D and horizon >= PAPER_HORIZON
    results: dict[float, SimulationResult] = {}
    checks: list[TargetCheck] = []
    for gap in gaps:
        env = ShariffSheffetEnv(d=d, gap=float(gap))
        specs = reproduction_specs(
            d, horizon, float(gap), epsilons, delta, batch_size, include_unshifted
        )
        res = simulate(env, specs, seeds=seeds, base_seed=base_seed, jobs=jobs, progress=progress)
        results[float(gap)] = res
        got = check_targets(res, float(gap), epsilons, full)
        if not full and horizon < R_TARGETS_HORIZON:
            # R1–R3 are the paper's orderings; they are checked from the spec's CI size (n = 2¹⁹,
            # where they hold) up; a smaller run shows them. B and F (properties of the
            # mechanisms) are checked at any size
            why = f"checked from n = 2^19; this run: n = {horizon:,}"
            got = [
                not_assessed(c, why) if c.target.startswith("R") and c.passed is not None else c
                for c in got
            ]
        checks += got
    return results, checks
