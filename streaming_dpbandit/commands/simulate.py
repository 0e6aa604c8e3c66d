"""``dpbandit simulate``: policies on a simulated environment (regret table, JSON, plot)."""

from __future__ import annotations

import json
from pathlib import Path

from .options import (
    build_env,
    known_params,
    parse_kv,
    plot_target,
    policy_config,
    policy_fields,
    policy_names,
    reject_unknown_params,
    writable,
)

__all__ = ["run"]

_SLATES = (
    "{name} serves slates over a matroid: use `dpbandit reproduce dp-matroid`, or "
    "`dpbandit serve` with a slate bandit (docs/dp-matroid.md)"
)


def run(args) -> int:
    from ..experiments.report import plot_curves, simulation_table
    from ..experiments.runner import simulate
    from ..policies import SLATE_POLICIES

    writable(args.json, "--json")
    plot_target(args.plot)
    env = build_env(args.env, parse_kv(args.env_param, "--env-param"))
    horizon = args.horizon or 10_000
    names = policy_names(
        args.policy, lambda name: _SLATES.format(name=name) if name in SLATE_POLICIES else None
    )
    user = parse_kv(args.policy_param)
    # public facts of the environment that policies may take as constructor parameters
    env_facts = {
        "horizon": horizon,
        "s0": getattr(env, "s0", None),
        "n_arms": getattr(env, "K", None),
    }
    if hasattr(env, "public_bounds"):
        env_facts.update(env.public_bounds())
    env_facts = {k: v for k, v in env_facts.items() if v is not None}
    if args.calibration == "paper":
        env_facts["allow_invalid_privacy"] = True  # simulate is simulation mode; labelled below
    specs, notes, labels = [], [], {}
    for name in names:
        base = known_params(
            name,
            {
                "d": getattr(env, "d", None),
                "calibration": args.calibration,
                "delta": args.delta,
                "n_cap": horizon,
                **env_facts,
            },
        )
        cfg0 = policy_config(name, {**base, **known_params(name, user)})
        if not cfg0.private:
            specs.append(_run_spec(name, cfg0, horizon)[0])
            continue
        params = dict(base)
        if "b_max" not in user and hasattr(env, "b_max") and "b_max" in policy_fields(name):
            params["b_max"] = env.b_max
            notes.append(
                f"{name}: b_max set to the environment's ‖β*‖₁ = {env.b_max:.6g} "
                "(oracle, as in the paper's experiments)"
            )
        for eps in args.epsilon or [1.0]:
            cfg = policy_config(name, {**params, **known_params(name, user), "epsilon": eps})
            spec, statement = _run_spec(name, cfg, horizon, eps)
            if statement.effective_label:
                labels[f"{name} calibration '{statement.calibration}'"] = statement.effective_label
            specs.append(spec)
    reject_unknown_params(user, names)
    result = simulate(
        env,
        specs,
        seeds=args.seeds,
        base_seed=args.seed,
        jobs=args.jobs,
        progress=not args.no_progress,
    )
    print(f"{env.name}: {args.seeds} repetitions, T = {horizon:,}, {result.elapsed_s:.1f} s")
    print(simulation_table(result))
    for note in dict.fromkeys(notes):
        print(f"note: {note}")
    for what, label in labels.items():
        print(f"note: {what} is {label}")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        plot_curves(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _run_spec(name, cfg, horizon, eps=None):
    """The run of a validated configuration (its policy built once, for its public parameters
    and privacy statement; each repetition builds its own from ``cfg``)."""
    from ..experiments.runner import RunSpec

    pol = cfg.build()
    params = pol.public_params()
    params.pop("seed", None)
    if eps is None:
        return RunSpec(name, name, params, horizon, config=cfg), pol.privacy
    spec = RunSpec(f"{name} ε={eps:g}", name, params, horizon, eps, cfg.delta, config=cfg)
    return spec, pol.privacy
