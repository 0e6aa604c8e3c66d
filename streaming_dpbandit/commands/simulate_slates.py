"""``dpbandit simulate`` on a matroid environment: the private slate policies, event level or
behind a user bound (``--max-contributions-per-user``; docs/privacy/user-level-slates.md)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .options import (
    known_params,
    parse_kv,
    policy_config,
    policy_names,
    reject_unknown_params,
    user_level_config,
    writable,
)

__all__ = ["run_slates"]


def run_slates(args) -> int:
    """Slate policies (dpucb-mat, dpts-mat) on ``--env`` (a matroid environment)."""
    from ..envs import MATROID_REGISTRY
    from ..experiments.user_level_slates import SlateRun, run_slates

    writable(args.json, "--json")
    if args.plot:
        raise ConfigError("--plot is not available for slate simulations (use --json)")
    if args.env_param:
        raise ConfigError(f"{args.env} takes no --env-param")
    from ..config import CONFIGS
    from ..policies import is_slate

    slate = [n for n in CONFIGS if is_slate(n)]
    names = policy_names(
        args.policy,
        lambda n: None if n in slate else f"{args.env} serves slates: use {' or '.join(slate)}",
    )
    env = MATROID_REGISTRY[args.env]()
    ul = user_level_config(args)
    if ul is None and args.users is not None:
        raise ConfigError("--users needs --max-contributions-per-user")
    user = parse_kv(args.policy_param)
    reject_unknown_params(user, names)
    runs = []
    for name in names:
        for eps in args.epsilon or [1.0]:
            params = {**known_params(name, user), "calibration": args.calibration}
            cfg = policy_config(
                name, {**params, "matroid": env.matroid.describe(), "epsilon": float(eps)}
            )
            if ul is not None:
                user_level_config(args, cfg)  # refused (one line) without a group calibration
            params.pop("matroid", None)
            k = None if ul is None else ul.max_contributions_per_user
            key = f"{name} ε={float(eps):g}" + ("" if k is None else f" k={k}")
            runs.append(SlateRun(key, name, float(eps), k, params))
    horizon = args.horizon or 10_000
    n_users = args.users or 2000
    rows = run_slates(args.env, runs, horizon, n_users, args.seeds, args.seed, args.jobs)
    print(f"{args.env}: {args.seeds} repetitions, T = {horizon:,}")
    width = max(len(r["key"]) for r in rows)
    print(f"{'policy'.ljust(width)}  final pseudo-regret (mean ± se)  learned from")
    for r in rows:
        se = r["regret_se"]
        reg = f"{r['regret_mean']:,.1f}" + ("" if se is None else f" ± {se:,.1f}")
        print(f"{r['key'].ljust(width)}  {reg:<31}  {r['admitted']:.0%}")
    for r in rows:
        if r["user_level"]:
            print(f"note: {r['key']}: {r['user_level']}")
    if ul is not None:
        print(
            f"note: {n_users:,} returning users (Zipf 1.1); at most "
            f"{ul.max_contributions_per_user} slates of one user learned from over the run"
        )
    if args.json:
        out = {"env": args.env, "horizon": horizon, "seeds": args.seeds, "results": rows}
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return 0
