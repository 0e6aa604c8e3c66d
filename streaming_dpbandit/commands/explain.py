"""``dpbandit explain``: a policy's public calibration constants, as JSON."""

from __future__ import annotations

import json

from ..errors import ConfigError
from .options import json_default, parse_kv, policy_config, user_level_config

__all__ = ["run"]


def run(args) -> int:
    from ..config import CONFIGS

    if args.policy not in CONFIGS:
        raise ConfigError(
            f"unknown policy {args.policy!r}; choose from {', '.join(sorted(CONFIGS))}"
        )
    params = parse_kv(args.policy_param)
    fields = CONFIGS[args.policy].model_fields
    if "d" in fields and fields["d"].is_required() and "d" not in params:
        raise ConfigError(f"{args.policy} needs the context dimension: --policy-param d=...")
    cfg = policy_config(args.policy, params)
    ul = user_level_config(args, cfg)
    policy = cfg.build() if ul is None else ul.build(cfg)
    print(json.dumps(policy.explain(args.horizon), indent=1, default=json_default))
    return 0
