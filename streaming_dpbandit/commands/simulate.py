"""``dpbandit simulate``: policies on a simulated environment (regret table, JSON, plot)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .options import (
    build_env,
    known_params,
    parse_kv,
    plot_target,
    policy_config,
    policy_fields,
    policy_names,
    reject_unknown_params,
    user_level_config,
    writable,
)

__all__ = ["run"]

_SLATES = (
    "{name} serves slates over a matroid: use --env dp-matroid-synthetic, `dpbandit reproduce "
    "dp-matroid`, or `dpbandit serve` with a slate bandit (docs/dp-matroid.md)"
)


def run(args) -> int:
    from ..envs import MATROID_REGISTRY
    from ..experiments.report import plot_curves, simulation_table
    from ..experiments.runner import simulate
    from ..policies import is_slate

    if args.env in MATROID_REGISTRY:  # slates (docs/privacy/user-level-slates.md)
        from .simulate_slates import run_slates

        return run_slates(args)
    writable(args.json, "--json")
    plot_target(args.plot)
    env = build_env(args.env, parse_kv(args.env_param, "--env-param"))
    ul = user_level_config(args)
    if ul is not None:  # users who come back (Zipf popularity): rows carry user ids
        from ..experiments.user_level import ReturningUsers

        env = ReturningUsers(env, n_users=args.users or 2000)
    elif args.users is not None:
        raise ConfigError("--users needs --max-contributions-per-user")
    horizon = args.horizon or 10_000
    names = policy_names(
        args.policy, lambda name: _SLATES.format(name=name) if is_slate(name) else None
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
            if ul is not None:
                notes.append(f"{name} is not private: it runs without a user bound (a baseline)")
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
            if ul is not None:
                user_level_config(args, cfg)  # refused (one line) without a group calibration
            spec, statement = _run_spec(name, cfg, horizon, eps, ul)
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


def _run_spec(name, cfg, horizon, eps=None, ul=None):
    """The run of a validated configuration (its policy built once, for its public parameters
    and privacy statement; each repetition builds its own from ``cfg``); with ``ul`` (a
    :class:`~streaming_dpbandit.config.UserLevelConfig`) at the group calibration behind the
    per-user bound."""
    from ..experiments.runner import RunSpec

    pol = cfg.build()
    params = pol.public_params()
    params.pop("seed", None)
    if eps is None:
        return RunSpec(name, name, params, horizon, config=cfg), pol.privacy
    key = f"{name} ε={eps:g}"
    if ul is not None:
        wrapped = ul.build(cfg)
        params = {**params, **ul.model_dump(), "inner_epsilon": wrapped.policy.epsilon}
        spec = RunSpec(
            f"{key} k={ul.max_contributions_per_user}",
            name,
            params,
            horizon,
            eps,
            cfg.delta,
            config=cfg,
            user_level=ul,
        )
        return spec, wrapped.privacy
    spec = RunSpec(key, name, params, horizon, eps, cfg.delta, config=cfg)
    return spec, pol.privacy
