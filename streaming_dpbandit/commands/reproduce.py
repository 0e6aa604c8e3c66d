"""``dpbandit reproduce``: the papers' experiments, with their targets checked.

Exit status 1 (``EXIT_TARGET_FAILED``) when a target is missed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..errors import ConfigError
from .options import EXIT_TARGET_FAILED, build_env, json_default, parse_kv, plot_target, writable

__all__ = ["run"]


def run(args) -> int:
    if args.name == "dp-linucb":
        return _dp_linucb(args)
    if args.name == "private-lasso":
        return _private_lasso(args)
    if args.name == "dp-matroid":
        return _dp_matroid(args)
    if args.name == "ldp-glb":
        return _ldp_glb(args)
    if args.name == "frontier":
        return _frontier(args)
    from ..experiments.fliphat import CURVE_HORIZON, PAPER_EPSILONS, checks_table, run_reproduction
    from ..experiments.report import plot_curves, simulation_table
    from ..privacy.statement import PAPER_LABEL

    writable(args.json, "--json")
    plot_target(args.plot)
    env_params = parse_kv(args.env_param, "--env-param")
    build_env("fliphat-paper", env_params)  # validate early, with a clear error

    args.seeds = args.seeds or 20
    args.epsilon = args.epsilon or list(PAPER_EPSILONS)
    result, checks = run_reproduction(
        epsilons=args.epsilon or PAPER_EPSILONS,
        horizon=args.horizon or CURVE_HORIZON,
        seeds=args.seeds or 20,
        env_params=env_params,
        **_parallel(args),
    )
    print(
        f"FLIPHAT reproduction: {args.seeds} repetitions, {result.elapsed_s:.1f} s "
        f"(calibration 'paper': {PAPER_LABEL})"
    )
    print(simulation_table(result))
    print()
    print(checks_table(checks))
    if args.json:
        out = result.to_json()
        out["targets"] = [c.to_dict() for c in checks]
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        from ..experiments.runner import SimulationResult

        shown = [s for s in result.specs if s.group != "T1"]
        sub = SimulationResult(
            result.env,
            shown,
            result.grid,
            {s.key: result.curves[s.key] for s in shown},
            result.finals,
            result.records,
            result.counters,
            result.seeds,
            result.base_seed,
            result.elapsed_s,
        )
        plot_curves(sub, args.plot, title=f"FLIPHAT reproduction ({args.seeds} repetitions)")
        print(f"wrote {args.plot}")
    failed = [c for c in checks if c.passed is False]
    return EXIT_TARGET_FAILED if failed else 0


def _dp_linucb(args) -> int:
    from ..experiments import dp_linucb as rep
    from ..experiments.report import plot_curves, simulation_table
    from ..privacy.gram_calibration import LABELS

    writable(args.json, "--json")
    plot_target(args.plot)
    env_params = parse_kv(args.env_param, "--env-param")
    unknown = set(env_params) - {"d", "gap"}
    if unknown:
        raise ConfigError(f"--env-param {', '.join(sorted(unknown))}: dp-linucb takes d and gap")
    d = env_params.get("d", rep.PAPER_D)
    gaps = [env_params["gap"]] if "gap" in env_params else list(rep.PAPER_GAPS)
    for gap in gaps:
        build_env("dp-linucb-paper", {"d": d, "gap": gap})  # validate early
    horizon = args.horizon or rep.PAPER_HORIZON
    results, checks = rep.run_reproduction(
        d=d,
        horizon=horizon,
        seeds=args.seeds or rep.PAPER_SEEDS,
        gaps=gaps,
        epsilons=args.epsilon or rep.PAPER_SWEEP,
        batch_size=args.batch_size,
        **_parallel(args),
    )
    print(
        f"DP-LinUCB reproduction (Shariff & Sheffet, Experiment 2/3): d = {d}, n = {horizon:,}, "
        f"{args.seeds or rep.PAPER_SEEDS} repetitions, release every {args.batch_size} rounds"
    )
    print(f"calibration '{rep.PROFILE}': {LABELS[rep.PROFILE]}")
    for gap, res in results.items():
        print(f"\nΔ = {gap:g} ({res.elapsed_s:.1f} s)")
        print(simulation_table(res))
    print()
    print(rep.checks_table(checks))
    if args.json:
        out = {
            "gaps": {str(g): r.to_json() for g, r in results.items()},
            "targets": [c.to_dict() for c in checks],
        }
        Path(args.json).write_text(json.dumps(out, indent=1, default=json_default))
        print(f"wrote {args.json}")
    if args.plot:
        for gap, res in results.items():
            path = args.plot if len(results) == 1 else args.plot.replace(".png", f"-gap{gap:g}.png")
            plot_curves(res, path, title=f"DP-LinUCB reproduction, Δ = {gap:g}")
            print(f"wrote {path}")
    failed = [c for c in checks if c.passed is False]
    return EXIT_TARGET_FAILED if failed else 0


def _report_outcome(report, args) -> int:
    """Print a reproduction report, write its --json and --plot; exit code from its checks."""
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1, default=json_default))
        print(f"wrote {args.json}")
    if args.plot:
        report.plot(args.plot)
        print(f"wrote {args.plot}")
    failed = [c for c in report.checks if c.passed is False]
    return EXIT_TARGET_FAILED if failed else 0


def _fixed_setup(args, what: str) -> dict:
    """Checks of a reproduction whose set-ups are fixed; the options every such run takes."""
    writable(args.json, "--json")
    plot_target(args.plot)
    if args.env_param:
        raise ConfigError(f"reproduce {args.name} takes no --env-param ({what})")
    return {"seeds": args.seeds, "horizon": args.horizon, **_parallel(args)}


def _parallel(args) -> dict:
    """How a reproduction runs its repetitions: processes, base seed, progress bar."""
    return {"jobs": args.jobs, "base_seed": args.seed, "progress": not args.no_progress}


def _private_lasso(args) -> int:
    from ..experiments.private_lasso import run_reproduction

    options = _fixed_setup(args, "its set-ups are fixed")
    report = run_reproduction(epsilons=args.epsilon, quick=args.quick, **options)
    return _report_outcome(report, args)


def _dp_matroid(args) -> int:
    from ..experiments.dp_matroid import FULL, MOVIELENS_ENV, QUICK, run_reproduction

    options = _fixed_setup(args, "the instances are fixed")
    ml = args.movielens or os.environ.get(MOVIELENS_ENV)
    if ml and not (Path(ml, "ratings.dat").is_file() and Path(ml, "movies.dat").is_file()):
        raise ConfigError(f"--movielens: no ratings.dat and movies.dat in {ml}")
    profile = QUICK if args.quick else FULL
    report = run_reproduction(profile, epsilons=args.epsilon, movielens_dir=ml, **options)
    return _report_outcome(report, args)


def _frontier(args) -> int:
    import dataclasses

    from ..experiments.frontier import (
        PRIVATE_POLICIES,
        PROFILES,
        SETTINGS,
        frontier_table,
        plot_frontier,
        run_frontier,
    )

    writable(args.json, "--json")
    writable(args.plot, "--plot")
    if args.env_param:
        raise ConfigError("reproduce frontier takes no --env-param (the settings are fixed)")
    profile = PROFILES["quick" if args.quick else "full"]
    over: dict = {}
    if args.settings:
        names = [x.strip() for x in args.settings.split(",") if x.strip()]
        bad = [x for x in names if x not in SETTINGS]
        if bad or not names:
            raise ConfigError(
                f"--settings: unknown {bad or args.settings!r}; choose from {', '.join(SETTINGS)}"
            )
        over["settings"] = tuple(names)
    if args.private_policies:
        pols = [x.strip() for x in args.private_policies.split(",") if x.strip()]
        bad = [x for x in pols if x not in PRIVATE_POLICIES]
        if bad or not pols:
            raise ConfigError(
                f"--private-policies: unknown {bad or args.private_policies!r}; choose from "
                f"{', '.join(PRIVATE_POLICIES)}"
            )
        over["private_policies"] = tuple(pols)
    if args.seeds:
        over["seeds"] = args.seeds
    if args.horizon:
        over["horizons"] = (args.horizon,)
    if args.epsilon:
        over["epsilons"] = tuple(args.epsilon)
    profile = dataclasses.replace(profile, **over)
    result = run_frontier(profile, **_parallel(args))
    for name in result["settings"]:
        print(
            f"\n{SETTINGS[name]} — regret, mean ± s.e. over {profile.seeds} repetitions "
            f"(δ = {result['delta']:g}; {result['noise_backend']} noise backend)"
        )
        print(frontier_table(result, name))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=json_default))
        print(f"wrote {args.json}")
    if args.plot:
        stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
        for name in result["settings"]:
            plot_frontier(result, name, f"{stem}-{name}.png")
            print(f"wrote {stem}-{name}.png")
    return 0


def _ldp_glb(args) -> int:
    from ..experiments.ldp_glb import FULL, QUICK, run_reproduction

    options = _fixed_setup(args, "its set-ups are fixed")
    if args.epsilon:
        raise ConfigError("reproduce ldp-glb runs the paper's ε ∈ {1, 0.5}; --epsilon is fixed")
    exps = None
    if args.experiments is not None:
        exps = tuple(x.strip().upper() for x in args.experiments.split(",") if x.strip())
        if not exps or set(exps) - {"E1", "E2", "E3"}:
            raise ConfigError("--experiments takes a comma-separated subset of E1,E2,E3")
    if args.data is not None and not Path(args.data).is_file():
        raise ConfigError(f"--data: no such file {args.data}")
    profile = QUICK if args.quick else FULL
    report = run_reproduction(
        profile, data_path=args.data, experiments=exps, engine=args.engine, **options
    )
    return _report_outcome(report, args)
