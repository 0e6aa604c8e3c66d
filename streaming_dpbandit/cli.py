"""The ``dpbandit`` command line.

Subcommands: ``serve``, ``loadgen``, ``simulate``, ``replay``, ``reproduce``, ``budget``,
``explain``. Bad options, configs and logs give one clear error line and exit status 2, never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__
from .errors import ConfigError

# Heavy modules (the pydantic configuration, numpy, the policies, River, matplotlib, Kafka) are
# imported by the commands that use them, so that ``dpbandit --help`` starts at once
# (tests/test_imports.py checks the import graph).

__all__ = ["main"]

EXIT_USAGE = 2
#: Policies that serve slates over a matroid (no per-arm contexts, no dimension d).
SLATE_POLICIES = ("dpucb-mat", "dpts-mat")
EXIT_TARGET_FAILED = 1


def parse_kv(items: list[str] | None, what: str = "--policy-param") -> dict:
    """:func:`streaming_dpbandit.config.parse_kv`, imported on first use."""
    from .config import parse_kv

    return parse_kv(items, what)


def policy_config(name: str, params: dict):
    """:func:`streaming_dpbandit.config.policy_config`, imported on first use."""
    from .config import policy_config

    return policy_config(name, params)


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
    if not vals or any(not (0 < v < float("inf")) for v in vals):
        raise argparse.ArgumentTypeError("every ε must be a positive, finite number")
    return vals


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return v


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return v


def _delta(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"δ must be in (0, 1), got {text!r}")
    return v


def _level(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"the level must be in (0, 1), got {text!r}")
    return v


def _non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return v


def _writable(path: str | None, what: str) -> None:
    if path is None:
        return
    parent = Path(path).resolve().parent
    if not parent.is_dir():
        raise ConfigError(f"{what}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"{what}: directory {parent} is not writable")


#: Image formats of ``--plot`` (matplotlib's, by file suffix).
PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp")


def _plot_target(path: str | None) -> None:
    """``--plot``: a writable directory and an image format, checked before anything runs."""
    if path is None:
        return
    _writable(path, "--plot")
    suffix = Path(path).suffix.lower()
    if suffix not in PLOT_FORMATS:
        raise ConfigError(
            f"--plot {path}: "
            + (f"unsupported image format {suffix!r}" if suffix else "no image format suffix")
            + f"; use one of {', '.join(PLOT_FORMATS)}"
        )


def _build_env(name: str, params: dict):
    from .envs import REGISTRY

    cls = REGISTRY.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown environment {name!r}; choose from {', '.join(sorted(REGISTRY))}"
        )
    import inspect

    sig = inspect.signature(cls).parameters.values()
    accepted = [p.name for p in sig if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(params) - set(accepted))
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in sig):
        raise ConfigError(
            f"unknown --env-param {', '.join(unknown)} for {name}; it takes "
            f"{', '.join(accepted) or 'none'}"
        )
    try:
        return cls(**params)
    except (TypeError, ValueError) as err:
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
        help="number of independent repetitions (reproduce: fliphat 20; dp-linucb 35; "
        "private-lasso and dp-matroid: their profiles' per-section counts)",
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
        choices=["certified", "paper", "zcdp", "authors_code_2018"],
        default="certified",
        help="noise calibration of private policies (non-default ones are labelled options; "
        "see dpbandit explain)",
    )
    _add_sim_options(p)

    p = sub.add_parser(
        "replay",
        help="replay a logged stream through policies: off-policy estimates with intervals",
        description="Evaluate policies on a logged stream: the replay method (Li et al. 2011; "
        "the policy learns online from the matched events of a uniformly logged stream) and "
        "IPS, SNIPS, DM and DR estimates of the policy frozen, each with normal and bootstrap "
        "intervals, weight diagnostics, per-position values, and the privacy the policy's "
        "releases would have spent (an in-memory ledger composed by the accountant). Slate "
        "policies (dpucb-mat, dpts-mat) are replayed by the queue method on the log's per-item "
        "rewards (service-jsonl or csv; docs/replay.md).",
    )
    p.add_argument(
        "--log",
        required=True,
        help="the log: a JSONL file of the service's topics, a CSV/Parquet file, an Open Bandit "
        "Dataset campaign directory, or kafka://HOST:PORT",
    )
    p.add_argument(
        "--format",
        choices=["service-jsonl", "csv", "parquet", "obd", "kafka"],
        help="log format (default: from the path)",
    )
    p.add_argument(
        "--map",
        action="append",
        metavar="KEY=VALUE",
        help="csv/parquet column mapping (repeatable): action=, reward=, propensity= "
        "(required), context= (columns or globs, comma-separated), position=, event_id=, "
        "arms= or n_arms=, position_base=, intercept=",
    )
    p.add_argument(
        "--log-param",
        action="append",
        metavar="KEY=VALUE",
        help="reader option (repeatable): bandit=, arms=, feedback_window=, missing_reward=, "
        "default_reward= (service logs), topics= or topic_prefix= (kafka), features= (obd)",
    )
    p.add_argument("--start", help="kafka: first offset, partition offsets or time of the range")
    p.add_argument("--end", help="kafka: end (exclusive) of the range, same forms as --start")
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
        help="policy parameter (repeatable); table: probabilities=[[...]] or from_log=PATH "
        "[from_format=...]",
    )
    p.add_argument(
        "--epsilon",
        type=_epsilons,
        default=None,
        help="comma-separated ε values (one run per ε for private policies)",
    )
    p.add_argument("--delta", type=_delta, default=None, help="δ of private policies")
    p.add_argument(
        "--calibration",
        choices=["certified", "paper", "zcdp", "authors_code_2018"],
        default="certified",
        help="noise calibration of private policies (default certified; others are labelled)",
    )
    p.add_argument(
        "--estimator",
        default="replay,ips,snips,dr",
        help="comma-separated: replay (the replay method), ips, snips, dm, dr "
        "(default replay,ips,snips,dr)",
    )
    p.add_argument("--level", type=_level, default=0.95, help="interval level (default 0.95)")
    p.add_argument(
        "--bootstrap",
        type=_non_negative_int,
        default=1000,
        help="bootstrap replicates (0: no bootstrap interval)",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds policies and the bootstrap")
    p.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=0,
        help="events the policy learns from (replay method) before it is frozen for "
        "ips/snips/dm/dr",
    )
    p.add_argument("--chunk-size", type=_positive_int, help="events per chunk (default: 32 MiB)")
    p.add_argument("--max-events", type=_positive_int, help="read at most this many events")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument(
        "--plot", metavar="FILE.png", help="plot the running estimates with their intervals"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    p = sub.add_parser("reproduce", help="reproduce a paper's published experiment")
    p.add_argument(
        "name",
        choices=["fliphat", "dp-linucb", "private-lasso", "dp-matroid", "ldp-glb", "frontier"],
        help="which reproduction ('frontier': the privacy–utility frontier of the certified "
        "policies, docs/frontier.md)",
    )
    p.add_argument(
        "--batch-size",
        type=_positive_int,
        default=256,
        help="dp-linucb: rounds per release refresh (default 256)",
    )
    _add_sim_options(p, reproduce=True)
    p.add_argument(
        "--quick",
        action="store_true",
        help="private-lasso, dp-matroid, ldp-glb, frontier: the reduced configuration (minutes "
        "instead of hours)",
    )
    p.add_argument(
        "--settings",
        default=None,
        help="frontier: comma-separated subset of sparse,dense-d5,dense-d20,slate (default: all)",
    )
    p.add_argument(
        "--data",
        metavar="FILE.csv",
        help="ldp-glb: your copy of the auto-loan CSV (CPRM-12-001) for E3; never downloaded",
    )
    p.add_argument(
        "--experiments",
        default=None,
        help="ldp-glb: comma-separated subset of E1,E2,E3 (default: all; --quick: E1, E3; "
        "E3 needs --data)",
    )
    p.add_argument(
        "--engine",
        choices=["lockstep", "reference"],
        default="lockstep",
        help="ldp-glb: how E1 is simulated — 'lockstep' (default: every seed and ε advance "
        "together, minutes for the spec's T = 10⁶ × 20 seeds) or 'reference' (one policy object "
        "per repetition, about a CPU-day at that size)",
    )
    p.add_argument(
        "--movielens",
        metavar="DIR",
        help="dp-matroid: directory with the user-supplied MovieLens-1M ratings.dat and "
        "movies.dat (default: $DPBANDIT_MOVIELENS_DIR; skipped when absent, never downloaded)",
    )

    p = sub.add_parser(
        "serve",
        help="run the streaming service (Kafka, or the embedded simulated stream by default)",
        description="Run the streaming service. Without Kafka settings it runs the same loop "
        "over an embedded simulated stream (or --file), serves /metrics, shows progress and "
        "ends with a summary. Settings: --config YAML, DPBANDIT_* environment variables "
        "(nested with __), then these flags.",
    )
    p.add_argument("--config", metavar="FILE.yaml", help="YAML settings file")
    p.add_argument("--kafka", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument(
        "--file",
        metavar="EVENTS.jsonl",
        help="replay a JSONL file of messages (its bandits come from --config's 'bandits:')",
    )
    p.add_argument("--events", type=_positive_int, help="events of the embedded simulation")
    p.add_argument("--state-dir", metavar="DIR", help="snapshots and ledger directory")
    p.add_argument("--metrics-port", type=int, help="port of /metrics (0: any free port)")
    p.add_argument("--no-metrics", action="store_true", help="do not serve /metrics")
    p.add_argument("--mode", choices=["service", "simulation"], help="deployment mode")
    p.add_argument(
        "--log-json",
        action="store_true",
        help="every stderr line one JSON object, structured fields as keys (no progress bar)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--summary-json", metavar="FILE", help="write the end-of-run summary as JSON")
    p.add_argument(
        "--linger",
        type=_non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="after a finite input (simulation or --file) ends, keep serving /metrics this long "
        "so Prometheus scrapes the final values (SIGTERM/SIGINT stops it; default 0)",
    )

    p = sub.add_parser(
        "loadgen",
        help="publish a simulated stream to Kafka in real time, with rewards for the service's "
        "decisions",
        description="Closed-loop load generator: publishes the contexts of the simulation "
        "section's environment to the contexts topic at --rate events/s, reads the decisions and "
        "publishes each one's reward (after a random delay) to the feedback topic. Reads the "
        "same settings as serve (--config, DPBANDIT_* variables): kafka and simulation.",
    )
    p.add_argument("--config", metavar="FILE.yaml", help="YAML settings file (as for serve)")
    p.add_argument("--kafka", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument(
        "--rate", type=_positive_float, default=100.0, help="events per second (default 100)"
    )
    p.add_argument(
        "--events", type=_positive_int, help="stop after this many events (default: unlimited)"
    )
    p.add_argument(
        "--duration", type=_positive_float, metavar="SECONDS", help="stop after this long"
    )
    p.add_argument("--log-json", action="store_true", help="JSON log lines")

    p = sub.add_parser("budget", help="print a ledger's privacy spend and statement")
    p.add_argument(
        "ledger",
        help="path of a ledger file, or the ledger topic of a replica group "
        "(scaling.mode group, default <group_id>.ledger) with --kafka",
    )
    p.add_argument(
        "--kafka", metavar="HOST:PORT", help="read LEDGER as a Kafka topic from this broker"
    )
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

    _writable(args.json, "--json")
    _plot_target(args.plot)
    env = _build_env(args.env, parse_kv(args.env_param, "--env-param"))
    horizon = args.horizon or 10_000
    names = [n.strip() for item in args.policy for n in item.split(",") if n.strip()]
    from .config import _CONFIGS

    if not names:
        raise ConfigError("--policy names no policy; choose from " + ", ".join(sorted(_CONFIGS)))
    for name in names:
        if name not in _CONFIGS:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(_CONFIGS))}")
        if name in SLATE_POLICIES:
            raise ConfigError(
                f"{name} serves slates over a matroid: use `dpbandit reproduce dp-matroid`, or "
                "`dpbandit serve` with a slate bandit (docs/dp-matroid.md)"
            )
    user = parse_kv(args.policy_param)
    epsilons = args.epsilon or [1.0]
    specs = []
    notes = []
    labels: dict[str, str] = {}
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
    for name in names:
        base = _known(
            name,
            {
                "d": getattr(env, "d", None),
                "calibration": args.calibration,
                "delta": args.delta,
                "n_cap": horizon,
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
                statement = cfg.build().privacy
                label = statement.effective_label
                if label:
                    labels[f"{name} calibration '{statement.calibration}'"] = label
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
    for what, label in labels.items():
        print(f"note: {what} is {label}")
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


# -- replay ------------------------------------------------------------------------------------
_NEEDS_D = ("fliphat", "lasso-bandit", "linucb", "linucb-disjoint", "greedy", "dp-linucb")


def _replay_specs(args, reader) -> list:
    """One PolicySpec per policy (and per ε for private policies), validated."""
    from .config import _CONFIGS
    from .replay.build import action_table, make_reader
    from .replay.evaluate import PolicySpec

    names = [n.strip() for item in args.policy for n in item.split(",") if n.strip()]
    if not names:
        raise ConfigError("--policy names no policy; choose from " + ", ".join(sorted(_CONFIGS)))
    for name in names:
        if name not in _CONFIGS:
            raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(sorted(_CONFIGS))}")
    user = parse_kv(args.policy_param)
    table_keys = {"from_log", "from_format", "from_param"}
    unknown = set(user) - set().union(*(_fields(n) for n in names)) - table_keys
    if unknown:
        raise ConfigError(
            f"--policy-param {', '.join(sorted(unknown))} is not a parameter of {', '.join(names)}"
        )
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
        params = {**_known(name, base), **_known(name, user)}
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
                specs.append(
                    PolicySpec(
                        f"{name} ε={eps:g}",
                        name,
                        pol.public_params(),
                        float(eps),
                        cfg.delta,
                        note=(
                            f"calibration '{pol.privacy.calibration}' is {label}" if label else note
                        ),
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


def _cmd_replay(args) -> int:
    from .replay.build import make_reader
    from .replay.errors import LogFormatError
    from .replay.evaluate import replay_log
    from .replay.report import plot_replay, replay_table

    _writable(args.json, "--json")
    _plot_target(args.plot)
    wanted = [e.strip() for e in args.estimator.split(",") if e.strip()]
    allowed = ("replay", "ips", "snips", "dm", "dr")
    bad = [e for e in wanted if e not in allowed]
    if bad or not wanted:
        raise ConfigError(
            f"unknown estimator {', '.join(bad) or repr(args.estimator)}; "
            f"choose from {', '.join(allowed)}"
        )
    names = [n.strip() for item in args.policy for n in item.split(",") if n.strip()]
    slate = [n for n in names if n in SLATE_POLICIES]
    if slate:
        if len(slate) != len(names):
            raise ConfigError(
                "slate policies (dpucb-mat, dpts-mat) and single-arm policies read different "
                "logs: replay them separately"
            )
        return _cmd_replay_slates(args, names, wanted)
    try:
        reader = make_reader(
            args.log,
            args.format,
            mapping=parse_kv(args.map, "--map") if args.map else None,
            params=parse_kv(args.log_param, "--log-param"),
            start=args.start,
            end=args.end,
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
        Path(args.json).write_text(json.dumps(out, indent=1, default=_json_default))
        print(f"wrote {args.json}")
    if args.plot:
        plot_replay(result, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _cmd_replay_slates(args, names: list[str], wanted: list[str]) -> int:
    """Slate policies: the queue method on per-item reward tapes (replay/slates.py)."""
    import numpy as np

    from .replay.errors import LogFormatError
    from .replay.ledger import InMemoryLedger
    from .replay.slates import queue_replay, read_slate_log

    if [e for e in wanted if e != "replay"] and args.estimator != "replay,ips,snips,dr":
        raise ConfigError(
            "slate policies are evaluated by the queue replay only: IPS/SNIPS/DM/DR need slate "
            "propensities, which the service does not publish (docs/events.md)"
        )
    if args.format not in (None, "service-jsonl", "csv") or args.start or args.end:
        raise ConfigError("slate replay reads service-jsonl or csv files (no kafka ranges yet)")
    if args.warmup:
        raise ConfigError("--warmup does not apply to slate replay (policies learn throughout)")
    user = parse_kv(args.policy_param)
    unknown = set(user) - set().union(*(_fields(n) for n in names))
    if unknown:
        raise ConfigError(
            f"--policy-param {', '.join(sorted(unknown))} is not a parameter of {', '.join(names)}"
        )
    if "matroid" not in user:
        raise ConfigError(
            'slate policies need --policy-param \'matroid={"type": "uniform", '
            '"n_items": L, "k": K}\' (or a partition, graphic or linear matroid)'
        )
    if args.calibration not in ("certified", "paper"):
        raise ConfigError(f"{names[0]}: calibration must be certified or paper")
    _writable(args.json, "--json")
    _plot_target(args.plot)
    log_params = parse_kv(args.log_param, "--log-param")
    bad = set(log_params) - {"bandit", "bandit_id", "feedback_window", "default_reward"}
    if bad:
        raise ConfigError(f"--log-param {', '.join(sorted(bad))} does not apply to slate logs")
    runs = []
    for name in names:
        for eps in args.epsilon or [user.get("epsilon", 1.0)]:
            params = {**_known(name, user), "epsilon": eps, "calibration": args.calibration}
            pol = policy_config(name, params).build(seed=args.seed)
            runs.append((f"{name} ε={float(eps):g}", pol))
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
    rows = [["policy", "rounds", "return/round", "± se", "ε certified", "releases", "stopped"]]
    for r in results:
        p = r.privacy
        rows.append(
            [
                r.label,
                f"{r.rounds:,}",
                f"{r.mean_return:.4f}",
                f"{r.se:.4f}",
                f"{p.get('epsilon_certified', 0):g}",
                str(p.get("releases", 0)),
                r.stop,
            ]
        )
    rows.append(
        [
            "log (on-policy)",
            f"{log.decisions:,}",
            f"{log.on_policy_return:.4f}",
            f"{log.on_policy_se:.4f}",
            "",
            "",
            "",
        ]
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    print(
        "queue replay: each item's logged rewards are read in decision order; the estimate is "
        "the policy's online per-round return (learning included) under the matroid bandit "
        "model (items independent, i.i.d. over rounds); se is per round, a scale, not an interval"
    )
    if args.json:
        out = {
            "log": {
                **info,
                "decisions": log.decisions,
                "on_policy_return": log.on_policy_return,
                "on_policy_se": log.on_policy_se,
                "rewards_per_item": log.tapes.lengths.tolist(),
            },
            "results": [r.to_json() for r in results],
        }
        Path(args.json).write_text(json.dumps(out, indent=1, default=_json_default))
        print(f"wrote {args.json}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for r in results:
            ax.plot(r.curve_rounds, r.curve_return, label=r.label)
        ax.axhline(log.on_policy_return, color="grey", ls="--", label="log (on-policy)")
        ax.set_xscale("log")
        ax.set_xlabel("replayed rounds")
        ax.set_ylabel("mean return per round")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        plt.close(fig)
        print(f"wrote {args.plot}")
    return 0


# -- reproduce ---------------------------------------------------------------------------------
def _cmd_reproduce(args) -> int:
    if args.name == "dp-linucb":
        return _reproduce_dp_linucb(args)
    if args.name == "private-lasso":
        return _cmd_reproduce_private_lasso(args)
    if args.name == "dp-matroid":
        return _cmd_reproduce_dp_matroid(args)
    if args.name == "ldp-glb":
        return _cmd_reproduce_ldp_glb(args)
    if args.name == "frontier":
        return _cmd_reproduce_frontier(args)
    from .experiments.fliphat import CURVE_HORIZON, PAPER_EPSILONS, checks_table, run_reproduction
    from .experiments.report import plot_curves, simulation_table
    from .privacy.statement import PAPER_LABEL

    _writable(args.json, "--json")
    _plot_target(args.plot)
    env_params = parse_kv(args.env_param, "--env-param")
    _build_env("fliphat-paper", env_params)  # validate early, with a clear error

    args.seeds = args.seeds or 20
    args.epsilon = args.epsilon or list(PAPER_EPSILONS)
    result, checks = run_reproduction(
        epsilons=args.epsilon or PAPER_EPSILONS,
        horizon=args.horizon or CURVE_HORIZON,
        seeds=args.seeds or 20,
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


def _reproduce_dp_linucb(args) -> int:
    from .experiments import dp_linucb as rep
    from .experiments.report import plot_curves, simulation_table
    from .privacy.gram_calibration import LABELS

    _writable(args.json, "--json")
    _plot_target(args.plot)
    env_params = parse_kv(args.env_param, "--env-param")
    unknown = set(env_params) - {"d", "gap"}
    if unknown:
        raise ConfigError(f"--env-param {', '.join(sorted(unknown))}: dp-linucb takes d and gap")
    d = env_params.get("d", rep.PAPER_D)
    gaps = [env_params["gap"]] if "gap" in env_params else list(rep.PAPER_GAPS)
    for gap in gaps:
        _build_env("dp-linucb-paper", {"d": d, "gap": gap})  # validate early
    horizon = args.horizon or rep.PAPER_HORIZON
    results, checks = rep.run_reproduction(
        d=d,
        horizon=horizon,
        seeds=args.seeds or rep.PAPER_SEEDS,
        gaps=gaps,
        epsilons=args.epsilon or rep.PAPER_SWEEP,
        batch_size=args.batch_size,
        jobs=args.jobs,
        base_seed=args.seed,
        progress=not args.no_progress,
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
        Path(args.json).write_text(json.dumps(out, indent=1, default=_json_default))
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
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1, default=_json_default))
        print(f"wrote {args.json}")
    if args.plot:
        report.plot(args.plot)
        print(f"wrote {args.plot}")
    failed = [c for c in report.checks if c.passed is False]
    return EXIT_TARGET_FAILED if failed else 0


def _cmd_reproduce_private_lasso(args) -> int:
    from .experiments.private_lasso import run_reproduction

    _writable(args.json, "--json")
    _plot_target(args.plot)
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
    return _report_outcome(report, args)


def _cmd_reproduce_dp_matroid(args) -> int:
    from .experiments.dp_matroid import FULL, MOVIELENS_ENV, QUICK, run_reproduction

    _writable(args.json, "--json")
    _plot_target(args.plot)
    if args.env_param:
        raise ConfigError("reproduce dp-matroid takes no --env-param (the instances are fixed)")
    ml = args.movielens or os.environ.get(MOVIELENS_ENV)
    if ml and not (Path(ml, "ratings.dat").is_file() and Path(ml, "movies.dat").is_file()):
        raise ConfigError(f"--movielens: no ratings.dat and movies.dat in {ml}")
    report = run_reproduction(
        QUICK if args.quick else FULL,
        seeds=args.seeds,
        horizon=args.horizon,
        epsilons=args.epsilon,
        jobs=args.jobs,
        base_seed=args.seed,
        movielens_dir=ml,
        progress=not args.no_progress,
    )
    return _report_outcome(report, args)


def _cmd_reproduce_frontier(args) -> int:
    import dataclasses

    from .experiments.frontier import (
        PROFILES,
        SETTINGS,
        frontier_table,
        plot_frontier,
        run_frontier,
    )

    _writable(args.json, "--json")
    _writable(args.plot, "--plot")
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
    if args.seeds:
        over["seeds"] = args.seeds
    if args.horizon:
        over["horizons"] = (args.horizon,)
    if args.epsilon:
        over["epsilons"] = tuple(args.epsilon)
    profile = dataclasses.replace(profile, **over)
    result = run_frontier(
        profile, jobs=args.jobs, progress=not args.no_progress, base_seed=args.seed
    )
    for name in result["settings"]:
        print(
            f"\n{SETTINGS[name]} — regret, mean ± s.e. over {profile.seeds} repetitions "
            f"(δ = {result['delta']:g})"
        )
        print(frontier_table(result, name))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=_json_default))
        print(f"wrote {args.json}")
    if args.plot:
        stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
        for name in result["settings"]:
            plot_frontier(result, name, f"{stem}-{name}.png")
            print(f"wrote {stem}-{name}.png")
    return 0


def _cmd_reproduce_ldp_glb(args) -> int:
    from .experiments.ldp_glb import FULL, QUICK, run_reproduction

    _writable(args.json, "--json")
    _plot_target(args.plot)
    if args.env_param:
        raise ConfigError("reproduce ldp-glb takes no --env-param (its set-ups are fixed)")
    if args.epsilon:
        raise ConfigError("reproduce ldp-glb runs the paper's ε ∈ {1, 0.5}; --epsilon is fixed")
    exps = None
    if args.experiments is not None:
        exps = tuple(x.strip().upper() for x in args.experiments.split(",") if x.strip())
        if not exps or set(exps) - {"E1", "E2", "E3"}:
            raise ConfigError("--experiments takes a comma-separated subset of E1,E2,E3")
    if args.data is not None and not Path(args.data).is_file():
        raise ConfigError(f"--data: no such file {args.data}")
    report = run_reproduction(
        QUICK if args.quick else FULL,
        seeds=args.seeds,
        horizon=args.horizon,
        jobs=args.jobs,
        base_seed=args.seed,
        data_path=args.data,
        experiments=exps,
        progress=not args.no_progress,
        engine=args.engine,
    )
    return _report_outcome(report, args)


# -- budget ------------------------------------------------------------------------------------
def _kafka_ledger(bootstrap: str, topic: str) -> list:
    """Committed records of a ledger topic (a replica group's ledger)."""
    from .stream.kafka.ledger import KafkaLedger

    try:
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","))
        exists = topic in set(admin.list_topics())  # a metadata request could create it
        admin.close()
    except Exception as err:  # NoBrokersAvailable and friends
        raise ConfigError(f"cannot reach Kafka at {bootstrap}: {type(err).__name__}") from None
    if not exists:
        raise ConfigError(f"no ledger topic {topic!r} at {bootstrap}")
    return KafkaLedger(bootstrap.split(","), topic).open().records()


def _cmd_budget(args) -> int:
    from .experiments.report import format_table
    from .privacy.accountant import ACCOUNTANT_NAMES, Accountant, format_of_record
    from .privacy.ledger import LedgerCorruptError, read_ledger
    from .privacy.statement import PrivacyStatement

    path = Path(args.ledger)
    if args.kafka:
        records, torn = _kafka_ledger(args.kafka, args.ledger), 0
        path = f"{args.ledger} at {args.kafka}"
    elif not path.is_file():
        raise ConfigError(f"no ledger at {path}")
    else:
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
        notes = sorted({r.note for r in recs if r.note})
        rec = sp.of_record()
        st = PrivacyStatement(
            model=last.privacy_model,
            unit=last.privacy_unit or "see the policy's documentation",
            neighbouring=last.neighbouring or "see the policy's documentation",
            epsilon=rec["epsilon"],
            delta=rec["delta"],
            rho=sp.rho,
            accountant=ACCOUNTANT_NAMES[rec["accountant"]],
            calibration=",".join(sp.calibrations),
            scope=f"{sp.releases} releases over {sp.slices or 1} disjoint data slice(s), "
            "composed by the ledger's accountant.",
            label="; ".join(notes) if notes else None,
            noise_backend=",".join(sorted({r.noise_backend for r in recs})),
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
                format_of_record(sp["of_record"]),
                ",".join(sp["calibrations"]) + ("" if sp["dp_valid"] else " (NOT DP-valid)"),
                item["statement"]["noise_backend"],
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
                "of record (tightest)",
                "calibration",
                "noise",
            ],
            rows,
        )
    )
    for item in out["bandits"]:
        print()
        print(f"[{item['spend']['bandit_id']}]")
        print(item["statement_text"])
    for item in out["bandits"]:
        label = item["statement"].get("label")
        if label:
            print(f"\nnote: [{item['spend']['bandit_id']}] calibration is {label}")
    return 0


# -- explain -----------------------------------------------------------------------------------
def _cmd_explain(args) -> int:
    from .config import _CONFIGS

    if args.policy not in _CONFIGS:
        raise ConfigError(
            f"unknown policy {args.policy!r}; choose from {', '.join(sorted(_CONFIGS))}"
        )
    params = parse_kv(args.policy_param)
    if args.policy not in ("random", *SLATE_POLICIES) and "d" not in params:
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


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def build_service_settings(args):
    """Settings for ``serve``: YAML < environment < command-line flags, plus embedded defaults."""
    import tempfile

    from pydantic import ValidationError

    from .config import ServiceSettings, format_validation_error, load_service_settings

    over: dict = {}
    if args.kafka:
        over["kafka"] = {"bootstrap_servers": args.kafka}
    if args.file:
        if not Path(args.file).is_file():
            raise ConfigError(f"--file: no such file {args.file}")
        over["file"] = {"path": args.file}
    if args.events:
        over["simulation"] = {"events": args.events}
    if args.state_dir:
        over["snapshots"] = {"directory": args.state_dir}
    if args.metrics_port is not None:
        over["metrics"] = {"port": args.metrics_port}
    if args.no_metrics:
        over.setdefault("metrics", {})["enabled"] = False
    if args.mode:
        over["mode"] = args.mode
    if args.log_json:
        over["log_json"] = True
    if args.no_progress:
        over["progress"] = False
    # the flags join the file and the environment before validation: the pattern of
    # DPBANDIT_KAFKA__SASL_PASSWORD=... with --kafka HOST:PORT and no kafka section must work
    base = load_service_settings(args.config, **over)
    data = _deep_merge(base.model_dump(exclude_unset=False), over)
    if data.get("log_json"):
        data["progress"] = False  # every stderr line is JSON: no progress bar
    embedded = not data.get("kafka") and not data.get("file")
    notes = []
    if embedded and not data.get("bandits"):
        from .envs import MATROID_REGISTRY

        if data["simulation"]["env"] in MATROID_REGISTRY:
            data["bandits"], note = _embedded_slate_bandit(data["simulation"])
            notes.append(note)
    if embedded and not data.get("bandits"):
        from .envs import REGISTRY as ENVS

        sim = data["simulation"]
        env_cls = ENVS.get(sim["env"])
        if env_cls is None:
            raise ConfigError(f"simulation.env: unknown environment {sim['env']!r}")
        try:
            env = env_cls(**sim["env_params"])
        except (TypeError, ValueError) as err:
            raise ConfigError(f"simulation.env_params: {err}") from None
        policy = {
            "policy": "fliphat",
            "d": env.d,
            "s": 10,
            "epsilon": 1.0,
            "delta": 1e-6,
            "b_max": round(getattr(env, "b_max", 1.0), 6),
            "first_episode_len": 256,
            "swap_delay": 250,
        }
        # seeded, so every run of the demo prints the same figures (a demo, not production:
        # a seeded DP noise key is public)
        data["bandits"] = {
            sim["bandit_id"]: {"policy": policy, "feedback_window": 2.0, "seed": sim["seed"]}
        }
        notes.append(
            f"embedded default: bandit {sim['bandit_id']!r} runs FLIPHAT (certified, "
            f"ε=1, δ=1e-6; b_max = the simulated environment's ‖β*‖₁) on a seeded stream "
            f"(seed {sim['seed']}); a seeded demo, not a production setting"
        )
    if data.get("file") and not data.get("kafka") and not data.get("bandits"):
        ids = _file_bandit_ids(data["file"]["path"])
        which = f" (its events are for bandit {', '.join(map(repr, ids))})" if ids else ""
        raise ConfigError(
            f"--file {data['file']['path']}: no bandit is configured{which}, so every event "
            "would be dead-lettered as unknown_bandit: give --config FILE.yaml with a 'bandits:' "
            "section (docs/service.md)"
        )
    state_set = bool(args.state_dir) or "snapshots" in (base.model_fields_set or set())
    if embedded and not state_set:
        data["snapshots"]["directory"] = tempfile.mkdtemp(prefix="dpbandit-state-")
    elif not state_set and (data.get("scaling") or {}).get("mode") != "group":
        # (a group replica keeps its state in Kafka topics: no directory to announce)
        where = Path(data["snapshots"]["directory"]).resolve()
        notes.append(
            f"state (snapshots and the privacy ledger) in {where}: the default "
            "snapshots.directory; set --state-dir or snapshots.directory to choose"
        )
    try:
        settings = ServiceSettings.model_validate(data)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, "invalid configuration: ")) from None
    return settings, notes


def _file_bandit_ids(path: str, lines: int = 1000) -> list[str]:
    """The bandit ids named in the first lines of a JSONL message file (for an error line)."""
    ids: dict[str, None] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for _, line in zip(range(lines), f):
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                value = msg.get("value", msg) if isinstance(msg, dict) else None
                if isinstance(value, dict) and isinstance(value.get("bandit_id"), str):
                    ids.setdefault(value["bandit_id"][:64])
                if len(ids) >= 5:
                    break
    except OSError:
        return []
    return list(ids)


def _embedded_slate_bandit(sim: dict) -> tuple[dict, str]:
    """Default bandit of the embedded simulation on a slate environment: DPTS-MAT, certified."""
    from .stream.runner import slate_environment

    env = slate_environment(sim["env"], sim["env_params"])
    policy = {
        "policy": "dpts-mat",
        "matroid": env.matroid.describe(),
        "epsilon": 1.0,
        "update_every": 64,
    }
    window = 2.0
    # rows of rounds ≤ t − lag are read at round t: cover the window and the source's
    # 256-event polls, so the service rarely waits for feedback
    lag = int((window + 256 * sim["seconds_between_events"]) / sim["seconds_between_events"]) + 64
    bandit = {"policy": policy, "feedback_window": window, "feedback_lag_rounds": lag}
    note = (
        f"embedded default: bandit {sim['bandit_id']!r} runs DPTS-MAT (certified, ε=1) on "
        f"{env.name} (L={env.n_items}, K={env.K}), slates with per-item feedback"
    )
    return {sim["bandit_id"]: bandit}, note


def _cmd_serve(args) -> int:
    from .logs import cli_logger, setup_logging
    from .stream.runner import run_service

    settings, notes = build_service_settings(args)
    setup_logging(settings.log_level, settings.log_json)
    for note in notes:
        cli_logger().info(note)
    from .stream.service import ServiceStartError

    try:
        summary = run_service(settings, linger_s=args.linger)
    except ServiceStartError as err:
        raise ConfigError(str(err)) from None
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=1, default=_json_default))
    return 0


def _cmd_loadgen(args) -> int:
    from .config import load_service_settings
    from .logs import setup_logging
    from .stream.sim.loadgen import run_loadgen

    over = {"kafka": {"bootstrap_servers": args.kafka}} if args.kafka else {}
    base = load_service_settings(args.config)
    if over:
        from pydantic import ValidationError

        from .config import ServiceSettings, format_validation_error

        data = _deep_merge(base.model_dump(exclude_unset=False), over)
        try:
            base = ServiceSettings.model_validate(data)
        except ValidationError as err:
            raise ConfigError(format_validation_error(err, "invalid configuration: ")) from None
    setup_logging(base.log_level, args.log_json or base.log_json)
    run_loadgen(base, rate=args.rate, events=args.events, duration_s=args.duration)
    return 0


COMMANDS = {
    "loadgen": _cmd_loadgen,
    "simulate": _cmd_simulate,
    "replay": _cmd_replay,
    "reproduce": _cmd_reproduce,
    "budget": _cmd_budget,
    "explain": _cmd_explain,
    "serve": _cmd_serve,
}


def _close_progress_bars() -> None:
    """Close live tqdm bars, so that an error line starts a line of its own."""
    tqdm_mod = sys.modules.get("tqdm")
    cls = getattr(tqdm_mod, "tqdm", None)
    for bar in list(getattr(cls, "_instances", None) or ()):
        try:
            bar.close()
        except Exception:  # a broken bar must not hide the error
            pass


def main(argv: list[str] | None = None) -> int:
    from .logs import scoped_logging

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with scoped_logging():
            return COMMANDS[args.command](args)
    except ConfigError as err:
        _close_progress_bars()
        print(f"dpbandit {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        _close_progress_bars()
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped early (| head)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
