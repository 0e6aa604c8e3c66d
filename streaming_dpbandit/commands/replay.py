"""``dpbandit replay``: policies replayed on a logged stream (off-policy estimates, intervals).

Single-arm policies go through :func:`~streaming_dpbandit.replay.evaluate.replay_log`; slate
policies through the queue replay of :mod:`streaming_dpbandit.replay.slates`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .options import (
    json_default,
    known_params,
    parse_kv,
    plot_target,
    policy_config,
    policy_names,
    reject_unknown_params,
    user_level_config,
    writable,
)

__all__ = ["run"]


def run(args) -> int:
    from ..replay.build import make_reader
    from ..replay.errors import LogFormatError
    from ..replay.evaluate import replay_log
    from ..replay.report import plot_replay, replay_table

    writable(args.json, "--json")
    plot_target(args.plot)
    wanted = [e.strip() for e in args.estimator.split(",") if e.strip()]
    allowed = ("replay", "ips", "snips", "dm", "dr")
    bad = [e for e in wanted if e not in allowed]
    if bad or not wanted:
        raise ConfigError(
            f"unknown estimator {', '.join(bad) or repr(args.estimator)}; "
            f"choose from {', '.join(allowed)}"
        )
    names = [n.strip() for item in args.policy for n in item.split(",") if n.strip()]
    from ..config import CONFIGS
    from ..policies import is_slate

    slate = [n for n in names if n in CONFIGS and is_slate(n)]
    if slate:
        if len(slate) != len(names):
            raise ConfigError(
                f"slate policies ({', '.join(slate)}) and single-arm policies read different "
                "logs: replay them separately"
            )
        return _run_slates(args, names, wanted)
    log_params = parse_kv(args.log_param, "--log-param")
    featuriser = _featuriser(args.config, log_params) if args.config else None
    try:
        reader = make_reader(
            args.log,
            args.format,
            mapping=parse_kv(args.map, "--map") if args.map else None,
            params=log_params,
            start=args.start,
            end=args.end,
            featuriser=featuriser,
        ).open()
        specs = _replay_specs(args, reader)
        result = replay_log(
            reader,
            specs,
            estimators=[e for e in wanted if e != "replay"],
            method="replay" in wanted,
            level=args.level,
            bootstrap=args.bootstrap,
            seed=args.seed,
            chunk_size=args.chunk_size,
            max_events=args.max_events,
            warmup=args.warmup,
            progress=not args.no_progress,
        )
    except LogFormatError as err:
        raise ConfigError(str(err)) from None
    except (ValueError, RuntimeError, OSError) as err:
        raise ConfigError(
            f"{type(err).__name__}: {err}" if isinstance(err, OSError) else str(err)
        ) from None
    log = result.log
    where = log.get("path") or f"kafka://{log.get('bootstrap')}"
    t = result.timing
    print(
        f"{log['format']} log {where}: {result.events:,} events, K = {log['n_arms']}, "
        f"d = {log['d']}, {result.positions} position(s); {t['total_s']:.1f} s "
        f"({t['events_per_s_evaluation_pass']:,.0f} events/s in the evaluation pass)"
    )
    join = log.get("join")
    if join:
        print("join: " + ", ".join(f"{k} {v}" for k, v in sorted(join.items())))
    print(replay_table(result))
    if args.json:
        out = result.to_json()
        Path(args.json).write_text(json.dumps(out, indent=1, default=json_default))
        print(f"wrote {args.json}")
    if args.plot:
        plot_replay(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _featuriser(config: str, log_params: dict):
    """The featuriser of the log's bandit in the settings file ``config`` (the one the service
    hashed the contexts' feature objects with): ``--log-param bandit=ID``, or the only bandit."""
    from ..settings import load_service_settings

    bandits = load_service_settings(config).bandits
    name = log_params.get("bandit")
    if not bandits:
        raise ConfigError(f"{config}: no bandits configured (--config gives the log's bandit)")
    if name is None:
        if len(bandits) != 1:
            raise ConfigError(
                f"{config} configures {len(bandits)} bandits: name the log's with "
                "--log-param bandit=ID"
            )
        name = next(iter(bandits))
    if name not in bandits:
        raise ConfigError(f"{config}: no bandit {name!r} is configured")
    bs = bandits[name]
    if not hasattr(bs.policy, "d"):
        raise ConfigError(f"{config}: bandit {name!r} has no feature dimension to hash into")
    return bs.featuriser()


def _run_slates(args, names: list[str], wanted: list[str]) -> int:
    """Slate policies: the queue method on per-item reward tapes (replay/slates.py)."""
    import numpy as np

    from ..replay.errors import LogFormatError
    from ..replay.ledger import InMemoryLedger
    from ..replay.slate_report import plot_slate_replay, slate_replay_json, slate_replay_table
    from ..replay.slates import queue_replay, read_slate_log

    if [e for e in wanted if e != "replay"] and args.estimator != "replay,ips,snips,dr":
        raise ConfigError(
            "slate policies are evaluated by the queue replay only: IPS/SNIPS/DM/DR need slate "
            "propensities, which the service does not publish (docs/events.md)"
        )
    if args.format not in (None, "service-jsonl", "csv") or args.start or args.end:
        raise ConfigError("slate replay reads service-jsonl or csv files (no kafka ranges yet)")
    if args.warmup:
        raise ConfigError("--warmup does not apply to slate replay (policies learn throughout)")
    if args.config:
        raise ConfigError("--config (a featuriser of feature objects) does not apply to slates")
    user = parse_kv(args.policy_param)
    reject_unknown_params(user, names)
    if "matroid" not in user:
        raise ConfigError(
            'slate policies need --policy-param \'matroid={"type": "uniform", '
            '"n_items": L, "k": K}\' (or a partition, graphic or linear matroid)'
        )
    if args.calibration not in ("certified", "paper"):
        raise ConfigError(f"{names[0]}: calibration must be certified or paper")
    writable(args.json, "--json")
    plot_target(args.plot)
    log_params = parse_kv(args.log_param, "--log-param")
    bad = set(log_params) - {"bandit", "bandit_id", "feedback_window", "default_reward"}
    if bad:
        raise ConfigError(f"--log-param {', '.join(sorted(bad))} does not apply to slate logs")
    ul = user_level_config(args)  # user level: each user's first k decisions feed the tapes
    runs = []
    for name in names:
        for eps in args.epsilon or [user.get("epsilon", 1.0)]:
            params = {**known_params(name, user), "epsilon": eps, "calibration": args.calibration}
            cfg = policy_config(name, params)
            if ul is None:
                runs.append((f"{name} ε={float(eps):g}", cfg.build(seed=args.seed)))
                continue
            user_level_config(args, cfg)  # refused (one line) without a group calibration
            label = f"{name} ε={float(eps):g} k={ul.max_contributions_per_user}"
            runs.append((label, ul.build(cfg, seed=args.seed)))
    L = runs[0][1].L
    if any(pol.L != L for _, pol in runs):
        raise ConfigError("the policies' matroids have different catalogues")
    try:
        log = read_slate_log(
            args.log,
            args.format,
            n_items=L,
            mapping=parse_kv(args.map, "--map") if args.map else None,
            item_ids=user.get("items"),
            bandit_id=log_params.get("bandit_id", log_params.get("bandit")),
            feedback_window=float(log_params.get("feedback_window", 60.0)),
            default_reward=float(log_params.get("default_reward", runs[0][1].default_reward)),
            user_bound=None if ul is None else _slate_log_bound(ul, args.seed),
        )
    except LogFormatError as err:
        raise ConfigError(str(err)) from None
    info = log.info
    print(
        f"{info['format']} slate log {info['path']}: {log.decisions:,} decisions, "
        f"{info['served_items']:,} served items (L = {L}); rewards per item: min "
        f"{int(log.tapes.lengths.min())}, median {float(np.median(log.tapes.lengths)):g}, "
        f"max {int(log.tapes.lengths.max())}"
    )
    extra = {k: v for k, v in info.items() if k not in ("format", "path", "served_items")}
    print("read: " + ", ".join(f"{k} {v}" for k, v in sorted(extra.items())))
    results = []
    for label, pol in runs:
        log.tapes.rewind()
        results.append(
            queue_replay(
                pol,
                log.tapes,
                label=label,
                max_rounds=args.max_events,
                ledger=InMemoryLedger(),
                curve_points=np.unique(np.geomspace(10, max(10, log.decisions), 40).astype(int)),
            )
        )
    print(slate_replay_table(results, log))
    for r in results:  # user level: ε certified above is the whole-run figure per user
        if "user_level" in r.privacy:
            print(f"note: {r.label}: {r.privacy['user_level']['statement']}")
    if args.json:
        out = slate_replay_json(results, log)
        Path(args.json).write_text(json.dumps(out, indent=1, default=json_default))
        print(f"wrote {args.json}")
    if args.plot:
        plot_slate_replay(results, log, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _slate_log_bound(ul, seed):
    """The bound a slate log is read under: each user's first k decisions feed the tapes (one
    window, E refused for slates; docs/privacy/user-level-slates.md)."""
    from ..privacy.user_bound import UserContributionBound

    key = None if seed is None else int(seed) ^ 0x5EED
    return UserContributionBound(ul.max_contributions_per_user, None, ul.max_users, key)


def _replay_specs(args, reader) -> list:
    """One PolicySpec per policy (and per ε for private policies), validated."""
    from ..replay.build import action_table, make_reader
    from ..replay.evaluate import PolicySpec

    names = policy_names(args.policy)
    user = parse_kv(args.policy_param)
    ul = user_level_config(args)
    reject_unknown_params(user, names, {"from_log", "from_format", "from_param"})
    specs = []
    for name in names:
        base = {
            "d": reader.d,
            "n_arms": reader.n_arms,
            "calibration": args.calibration,
            "n_cap": args.max_events or 1 << 20,
        }
        if args.delta is not None:
            base["delta"] = args.delta
        params = {**known_params(name, base), **known_params(name, user)}
        note = None
        source = None
        if name == "table":
            if "from_log" in user:
                if "probabilities" in user:
                    raise ConfigError("table: give probabilities or from_log, not both")
                src = make_reader(
                    str(user["from_log"]),
                    user.get("from_format"),
                    params=parse_kv(_as_list(user.get("from_param")), "from_param"),
                )
                tab, source = action_table(src, args.level)
                source["log"] = str(user["from_log"])
                params["probabilities"] = tab.tolist()
                note = (
                    f"action frequencies of {user['from_log']} ({source['events']:,} events); "
                    f"that log's on-policy value {source['value']:.4g} "
                    f"[{source['ci_normal'][0]:.4g}, {source['ci_normal'][1]:.4g}]"
                )
                source["label"] = "source log (on-policy)"
            elif "probabilities" not in user:
                raise ConfigError(
                    "table needs --policy-param probabilities=[[...]] or from_log=PATH"
                )
        cfg0 = policy_config(name, params)
        if cfg0.private:
            for eps in args.epsilon or [params.get("epsilon", 1.0)]:
                cfg = policy_config(name, {**params, "epsilon": eps})
                pol = cfg.build()
                label = pol.privacy.effective_label
                key = f"{name} ε={eps:g}"
                if ul is not None:  # refused (one line) without a group calibration
                    user_level_config(args, cfg)
                    key += f" k={ul.max_contributions_per_user}"
                specs.append(
                    PolicySpec(
                        key,
                        name,
                        pol.public_params(),
                        float(eps),
                        cfg.delta,
                        note=(
                            f"calibration '{pol.privacy.calibration}' is {label}" if label else note
                        ),
                        config=cfg,
                        user_level=ul,
                    )
                )
        else:
            spec = PolicySpec(name, name, cfg0.build().public_params(), note=note, reference=source)
            specs.append(spec)
    for spec in specs:
        spec.params.pop("seed", None)
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise ConfigError("the same policy configuration is given twice")
    return specs


def _as_list(v):
    if v is None:
        return None
    return [x for x in str(v).split(";") if x]
