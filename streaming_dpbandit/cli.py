"""The ``dpbandit`` command line.

Subcommands: ``simulate``, ``reproduce``, ``budget``, ``explain``. Bad options and configs give
one clear error line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .config import ConfigError, parse_kv, policy_config

__all__ = ["main"]

EXIT_USAGE = 2
EXIT_TARGET_FAILED = 1


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _epsilons(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not vals or any(not v > 0 for v in vals):
        raise argparse.ArgumentTypeError("every ε must be a positive number")
    return vals


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _delta(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"δ must be in (0, 1), got {text!r}")
    return v


def _writable(path: str | None, what: str) -> None:
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{what}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{what}: directory {parent} is not writable")


def _build_env(name: str, params: dict):
    from .envs import REGISTRY

    cls = REGISTRY.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown environment {name!r}; choose from {', '.join(sorted(REGISTRY))}"
        )
    try:
        return cls(**params)
    except TypeError as err:
        raise ConfigError(f"invalid --env-param for {name}: {err}") from None
    except ValueError as err:
        raise ConfigError(f"invalid --env-param for {name}: {err}") from None


def _add_sim_options(p: argparse.ArgumentParser, reproduce: bool = False) -> None:
    p.add_argument(
        "--epsilon",
        type=_epsilons,
        default=None,
        help="comma-separated ε values (one run per ε for private policies; reproduce: the "
        "reproduction's own values by default)",
    )
    p.add_argument("--horizon", type=_positive_int, default=None, help="rounds per run (T)")
    p.add_argument(
        "--seeds",
        type=_positive_int,
        default=None if reproduce else 5,
        help="number of independent repetitions (reproduce: fliphat 20; private-lasso: its "
        "profile's per-section counts)",
    )
    p.add_argument("--seed", type=int, default=0, help="base seed of the repetitions")
    p.add_argument(
        "--jobs",
        type=_positive_int,
        default=os.cpu_count() or 1,
        help="parallel processes (default: all cores)",
    )
    p.add_argument(
        "--env-param",
        action="append",
        metavar="KEY=VALUE",
        help="environment parameter (repeatable), e.g. d=2000, K=8, noise=uniform",
    )
    p.add_argument("--json", metavar="FILE", help="write results as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="write the regret curves as a PNG plot")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dpbandit", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"dpbandit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("simulate", help="simulate policies on an environment (regret table/plot)")
    p.add_argument("--env", default="fliphat-paper", help="environment (default: fliphat-paper)")
    p.add_argument(
        "--policy",
        required=True,
        action="append",
        help="policy name; repeat or comma-separate to compare several",
    )
    p.add_argument(
        "--policy-param",
        action="append",
        metavar="KEY=VALUE",
        help="policy parameter (repeatable); applies to every policy that has it",
    )
    p.add_argument("--delta", type=_delta, default=0.01, help="δ of private policies")
    p.add_argument(
        "--calibration",
        choices=["certified", "paper"],
        default="certified",
        help="noise calibration of private policies (paper: reproduction only)",
    )
    _add_sim_options(p)

    p = sub.add_parser("reproduce", help="reproduce a paper's published experiment")
    p.add_argument("name", choices=["fliphat", "private-lasso"], help="which reproduction")
    _add_sim_options(p, reproduce=True)
    p.add_argument(
        "--quick",
        action="store_true",
        help="private-lasso: the reduced configuration (minutes instead of hours)",
    )

    p = sub.add_parser("budget", help="print a ledger's privacy spend and statement")
    p.add_argument("ledger", help="path of a ledger file")
    p.add_argument(
        "--delta",
        type=_delta,
        default=None,
        help="also report ε at this δ (PLD accountant); default: each bandit's δ",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = sub.add_parser("explain", help="print a policy's calibration constants as JSON")
    p.add_argument("--policy", required=True)
    p.add_argument("--policy-param", action="append", metavar="KEY=VALUE")
    p.add_argument(
        "--horizon",
        type=_positive_int,
        default=1 << 20,
        help="list the releases up to this round (default 2^20)",
    )
    return parser


# -- simulate ----------------------------------------------------------------------------------
def _cmd_simulate(args) -> int:
    from .experiments.report import plot_curves, simulation_table
    from .experiments.runner import RunSpec, simulate
    from .privacy.statement import PAPER_LABEL

    _writable(args.json, "--json")
    _writable(args.plot, "--plot")
    env = _build_env(args.env, parse_kv(args.env_param, "--env-param"))
    horizon = args.horizon or 10_000
    names = [n.strip() for item in args.policy for n in item.split(",") if n.strip()]
    from .config import _CONFIGS

    for name in names:
        if name not in _CONFIGS:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(_CONFIGS))}")
    user = parse_kv(args.policy_param)
    epsilons = args.epsilon or [1.0]
    specs = []
    notes = []
    # public facts of the environment that policies may take as constructor parameters
    env_facts = {"horizon": horizon, "s0": getattr(env, "s0", None)}
    if hasattr(env, "public_bounds"):
        env_facts.update(env.public_bounds())
    env_facts = {k: v for k, v in env_facts.items() if v is not None}
    if args.calibration == "paper":
        env_facts["allow_invalid_privacy"] = True  # simulate is simulation mode; labelled below
    for name in names:
        base = _known(
            name,
            {
                "d": getattr(env, "d", None),
                "calibration": args.calibration,
                "delta": args.delta,
                **env_facts,
            },
        )
        cfg0 = policy_config(name, {**base, **_known(name, user)})
        if cfg0.private:
            params = dict(base)
            if "b_max" not in user and hasattr(env, "b_max") and "b_max" in _fields(name):
                params["b_max"] = env.b_max
                notes.append(
                    f"{name}: b_max set to the environment's ‖β*‖₁ = {env.b_max:.6g} "
                    "(oracle, as in the paper's experiments)"
                )
            for eps in epsilons:
                cfg = policy_config(name, {**params, **_known(name, user), "epsilon": eps})
                specs.append(
                    RunSpec(
                        f"{name} ε={eps:g}",
                        name,
                        cfg.build().public_params(),
                        horizon,
                        eps,
                        cfg.delta,
                    )
                )
        else:
            specs.append(RunSpec(name, name, cfg0.build().public_params(), horizon))
    unknown = set(user) - set().union(*(_fields(n) for n in names))
    if unknown:
        raise ConfigError(
            f"--policy-param {', '.join(sorted(unknown))} is not a parameter of {', '.join(names)}"
        )
    for spec in specs:
        spec.params.pop("seed", None)
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
    if any(s.params.get("calibration") == "paper" for s in specs):
        print(f"note: calibration 'paper' is {PAPER_LABEL}")
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        plot_curves(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _fields(name: str) -> set[str]:
    from .config import _CONFIGS

    return set(_CONFIGS[name].model_fields) - {"policy", "private"}


def _known(name: str, params: dict) -> dict:
    """The subset of ``params`` that policy ``name`` accepts (others may belong to siblings)."""
    fields = _fields(name)
    return {k: v for k, v in params.items() if k in fields}


# -- reproduce ---------------------------------------------------------------------------------
def _cmd_reproduce(args) -> int:
    if args.name == "private-lasso":
        return _cmd_reproduce_private_lasso(args)
    from .experiments.fliphat import CURVE_HORIZON, checks_table, run_reproduction
    from .experiments.report import plot_curves, simulation_table
    from .privacy.statement import PAPER_LABEL

    _writable(args.json, "--json")
    _writable(args.plot, "--plot")
    env_params = parse_kv(args.env_param, "--env-param")
    _build_env("fliphat-paper", env_params)  # validate early, with a clear error
    from .experiments.fliphat import PAPER_EPSILONS

    args.seeds = args.seeds or 20
    args.epsilon = args.epsilon or list(PAPER_EPSILONS)
    result, checks = run_reproduction(
        epsilons=args.epsilon,
        horizon=args.horizon or CURVE_HORIZON,
        seeds=args.seeds,
        env_params=env_params,
        jobs=args.jobs,
        base_seed=args.seed,
        progress=not args.no_progress,
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
        from .experiments.runner import SimulationResult

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


def _cmd_reproduce_private_lasso(args) -> int:
    from .experiments.private_lasso import run_reproduction

    _writable(args.json, "--json")
    _writable(args.plot, "--plot")
    if args.env_param:
        raise ConfigError("reproduce private-lasso takes no --env-param (its set-ups are fixed)")
    report = run_reproduction(
        seeds=args.seeds,
        epsilons=args.epsilon,
        horizon=args.horizon,
        quick=args.quick,
        jobs=args.jobs,
        base_seed=args.seed,
        progress=not args.no_progress,
    )
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1, default=_json_default))
        print(f"wrote {args.json}")
    if args.plot:
        report.plot(args.plot)
        print(f"wrote {args.plot}")
    failed = [c for c in report.checks if c.passed is False]
    return EXIT_TARGET_FAILED if failed else 0


# -- budget ------------------------------------------------------------------------------------
def _cmd_budget(args) -> int:
    from .experiments.report import format_table
    from .privacy.accountant import Accountant
    from .privacy.ledger import LedgerCorruptError, read_ledger
    from .privacy.statement import PAPER_LABEL, PrivacyStatement

    path = Path(args.ledger)
    if not path.is_file():
        raise ConfigError(f"no ledger at {path}")
    try:
        records, torn = read_ledger(path)
    except LedgerCorruptError as err:
        raise ConfigError(f"{path}: {err}") from None
    acc = Accountant(records)
    out = {"ledger": str(path), "records": len(records), "torn_tail_bytes": torn, "bandits": []}
    for b in acc.bandits():
        recs = [r for r in records if r.bandit_id == b]
        delta = args.delta if args.delta is not None else max(r.delta for r in recs) or None
        sp = acc.spend(b, delta=delta)
        last = recs[-1]
        st = PrivacyStatement(
            model=last.privacy_model,
            unit=last.privacy_unit or "see the policy's documentation",
            neighbouring=last.neighbouring or "see the policy's documentation",
            epsilon=sp.epsilon_at_delta if sp.epsilon_at_delta is not None else sp.basic_epsilon,
            delta=delta if delta is not None else sp.basic_delta,
            rho=sp.rho,
            calibration=",".join(sp.calibrations),
            scope=f"{sp.releases} releases over {sp.slices or 1} disjoint data slice(s), "
            "composed by the ledger's accountant.",
        )
        out["bandits"].append(
            {"spend": sp.to_dict(), "statement": st.to_dict(), "statement_text": st.text()}
        )
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    rows = []
    for item in out["bandits"]:
        sp = item["spend"]
        rows.append(
            [
                sp["bandit_id"],
                str(sp["releases"]),
                "-" if sp["pure_epsilon"] is None else f"{sp['pure_epsilon']:.4g}",
                f"{sp['basic_epsilon']:.4g}, {sp['basic_delta']:.3g}",
                "-" if sp["rho"] is None else f"{sp['rho']:.4g}",
                "-"
                if sp["epsilon_at_delta"] is None
                else f"{sp['epsilon_at_delta']:.4g} @ δ={sp['target_delta']:.3g}",
                ",".join(sp["calibrations"]) + ("" if sp["dp_valid"] else " (NOT DP-valid)"),
            ]
        )
    print(f"ledger {path}: {len(records)} releases")
    if torn:
        print(
            f"warning: the final line is torn ({torn} bytes of an unacknowledged release); "
            "the service repairs it when it next opens the ledger"
        )
    print(
        format_table(
            [
                "bandit",
                "releases",
                "pure ε",
                "basic (ε, δ)",
                "zCDP ρ",
                "ε at δ (PLD)",
                "calibration",
            ],
            rows,
        )
    )
    for item in out["bandits"]:
        print()
        print(f"[{item['spend']['bandit_id']}]")
        print(item["statement_text"])
    if any("paper" in item["spend"]["calibrations"] for item in out["bandits"]):
        print(f"\nnote: calibration 'paper' is {PAPER_LABEL}")
    return 0


# -- explain -----------------------------------------------------------------------------------
def _cmd_explain(args) -> int:
    params = parse_kv(args.policy_param)
    if args.policy != "random" and "d" not in params:
        raise ConfigError(f"{args.policy} needs the context dimension: --policy-param d=...")
    cfg = policy_config(args.policy, params)
    policy = cfg.build()
    print(json.dumps(policy.explain(args.horizon), indent=1, default=_json_default))
    return 0


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


COMMANDS = {
    "simulate": _cmd_simulate,
    "reproduce": _cmd_reproduce,
    "budget": _cmd_budget,
    "explain": _cmd_explain,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as err:
        print(f"dpbandit {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
