"""The ``dpbandit`` command line.

Subcommands: ``serve``, ``gateway``, ``loadgen``, ``simulate``, ``replay``, ``reproduce``,
``audit``, ``budget``, ``explain``, ``schema``. Bad options, configs and logs give one clear
error line and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .commands.options import (
    delta,
    epsilons,
    level,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from .errors import ConfigError

# This module parses and dispatches; the work is done by ``commands/`` (one module per
# subcommand). Heavy modules (the pydantic configuration, numpy, the policies, River,
# matplotlib, Kafka) are imported by the commands that use them, so that ``dpbandit --help``
# starts at once (tests/test_imports.py checks the import graph).

__all__ = ["COMMANDS", "build_parser", "main"]

EXIT_USAGE = 2


class _Formatter(argparse.HelpFormatter):
    """Help text wrapped between words only: a name such as ``ldp-ucb`` is never split."""

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        import textwrap

        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line; help wrapped between words."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Names:
    """A comma-separated list of names for a help text, looked up only when the help is shown
    (``%(names)s`` in the option's help): ``dpbandit --help`` imports no registry."""

    def __init__(self, module: str, attribute: str):
        self.module, self.attribute = module, attribute

    def __str__(self) -> str:
        found = getattr(importlib.import_module(self.module, __package__), self.attribute)
        return ", ".join(sorted(found))


def _names(action: argparse.Action, module: str, attribute: str) -> None:
    action.names = _Names(module, attribute)  # type: ignore[attr-defined]


def _add_sim_options(p: argparse.ArgumentParser, reproduce: bool = False) -> None:
    p.add_argument(
        "--epsilon",
        type=epsilons,
        default=None,
        help="comma-separated ε values (one run per ε for private policies; reproduce: the "
        "reproduction's own values by default)",
    )
    p.add_argument("--horizon", type=positive_int, default=None, help="rounds per run (T)")
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=None if reproduce else 5,
        help="number of independent repetitions (reproduce: fliphat 20; dp-linucb 35; "
        "private-lasso and dp-matroid: their profiles' per-section counts)",
    )
    p.add_argument("--seed", type=int, default=0, help="base seed of the repetitions")
    p.add_argument(
        "--jobs",
        type=positive_int,
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


def _add_user_level_options(p: argparse.ArgumentParser, users: str) -> None:
    """User-level privacy (docs/privacy/user-level.md): k, E and the counter-memory cap."""
    p.add_argument(
        "--max-contributions-per-user",
        type=positive_int,
        metavar="K",
        help="user-level privacy: at most K events of one user enter each release; ε and δ "
        f"are then one release's guarantee for those K events ({users})",
    )
    p.add_argument(
        "--max-releases-per-user",
        type=positive_int,
        metavar="E",
        help="with --max-contributions-per-user: a user is learned from in at most E releases",
    )
    p.add_argument(
        "--max-users",
        type=positive_int,
        metavar="N",
        help="cap on the per-user counter tables (default 1,000,000)",
    )
    p.add_argument(
        "--user-window-rounds",
        type=positive_int,
        metavar="W",
        help="local-DP policies (ldp-glb): a device sends at most K reports per window of W "
        "rounds, in at most E windows (needs --max-releases-per-user); default: one window",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dpbandit",
        description="Differentially private contextual bandits: the streaming service (serve, "
        "loadgen), simulations and the papers' reproductions, offline replay of logged "
        "streams, the privacy spent (budget) and a policy's calibration (explain).",
    )
    parser.add_argument("--version", action="version", version=f"dpbandit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser(
        "simulate",
        help="simulate policies on an environment (regret table/plot)",
        description="Simulate policies on an environment: independent repetitions in parallel "
        "with common random numbers across policies, one run per ε for private policies; "
        "prints the mean final pseudo-regret ± standard error and the privacy spent, and writes "
        "the regret curves as JSON and a plot.",
    )
    p.add_argument(
        "--env",
        default="fliphat-paper",
        help="environment (default: fliphat-paper; dp-matroid-synthetic: slates, for dpucb-mat "
        "and dpts-mat)",
    )
    p.add_argument(
        "--policy",
        required=True,
        action="append",
        help="policy name (dpbandit explain --help lists them); repeat or comma-separate to "
        "compare several",
    )
    p.add_argument(
        "--policy-param",
        action="append",
        metavar="KEY=VALUE",
        help="policy parameter (repeatable); applies to every policy that has it",
    )
    p.add_argument("--delta", type=delta, default=0.01, help="δ of private policies")
    p.add_argument(
        "--calibration",
        choices=["certified", "paper", "zcdp", "authors_code_2018"],
        default="certified",
        help="noise calibration of private policies (non-default ones are labelled options; "
        "see dpbandit explain)",
    )
    _add_user_level_options(
        p, "contexts then come from returning users with Zipf popularity, --users of them"
    )
    p.add_argument(
        "--users",
        type=positive_int,
        default=None,
        metavar="N",
        help="with --max-contributions-per-user: distinct returning users (default 2000)",
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
    p.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="service logs whose contexts carry feature objects: the settings file (as for "
        "serve) whose bandit's featuriser (its features section) hashes them, as the service "
        "did (docs/features.md)",
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
        type=epsilons,
        default=None,
        help="comma-separated ε values (one run per ε for private policies)",
    )
    p.add_argument("--delta", type=delta, default=None, help="δ of private policies")
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
    p.add_argument("--level", type=level, default=0.95, help="interval level (default 0.95)")
    p.add_argument(
        "--bootstrap",
        type=non_negative_int,
        default=1000,
        help="bootstrap replicates (0: no bootstrap interval)",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds policies and the bootstrap")
    p.add_argument(
        "--warmup",
        type=non_negative_int,
        default=0,
        help="events the policy learns from (replay method) before it is frozen for "
        "ips/snips/dm/dr",
    )
    p.add_argument("--chunk-size", type=positive_int, help="events per chunk (default: 32 MiB)")
    p.add_argument("--max-events", type=positive_int, help="read at most this many events")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument(
        "--plot", metavar="FILE.png", help="plot the running estimates with their intervals"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_user_level_options(
        p, "the replay method learns with the log's user ids: the contexts' user_id field"
    )

    p = sub.add_parser(
        "reproduce",
        help="reproduce a paper's published experiment",
        description="Run a source paper's published experiment with the paper's configuration "
        "and print measured against expected for the spec's targets: exit status 1 if a target "
        "fails. A run smaller than the paper's (--quick, a shorter --horizon, fewer --seeds) "
        "checks what its size can decide and labels the rest not assessed.",
    )
    p.add_argument(
        "name",
        choices=["fliphat", "dp-linucb", "private-lasso", "dp-matroid", "ldp-glb", "frontier"],
        help="which reproduction ('frontier': the privacy–utility frontier of the certified "
        "policies, docs/frontier.md)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
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
        "--private-policies",
        default=None,
        help="frontier: comma-separated subset of the certified policies to run (default: all; "
        "the non-private baseline and the uniform policy always run)",
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
        "audit",
        help="end-to-end privacy audits: real calibrations pass, wrong ones are caught",
        description="Drive each private policy's release path on a worst-case neighbouring "
        "pair, many times, and report an empirical lower bound on ε at 95% confidence for the "
        "real calibration (must not exceed the claimed ε) and for mutants — halved noise, wrong "
        "accountants, sensitivities without the reward clip (must exceed it). Exit status 1 "
        "when an outcome is not the expected one. docs/privacy/audits.md.",
    )
    p.add_argument(
        "--quick", action="store_true", help="the CI profile (a tenth of the runs; ~1 minute)"
    )
    p.add_argument(
        "--mechanism",
        default=None,
        help="comma-separated subset of fliphat,fliphat-warm,fliphat-private-clip,dp-linucb,"
        "private-lasso (default: all)",
    )
    p.add_argument("--json", metavar="FILE", help="write the report as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")

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
    p.add_argument("--events", type=positive_int, help="events of the embedded simulation")
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
        "--decisions-out",
        metavar="FILE.jsonl",
        help="--file or the embedded simulation: write every decision to FILE.jsonl, one "
        "decisions-topic message per line ('-': stdout, the summary then goes to stderr)",
    )
    p.add_argument(
        "--dead-letters-out",
        metavar="FILE.jsonl",
        help="likewise every dead letter, with its reason and detail (dead-letter topic "
        "messages; '-': stdout)",
    )
    p.add_argument(
        "--linger",
        type=non_negative_float,
        default=0.0,
        metavar="SECONDS",
        help="after a finite input (simulation or --file) ends, keep serving /metrics this long "
        "so Prometheus scrapes the final values (SIGTERM/SIGINT stops it; default 0)",
    )

    p = sub.add_parser(
        "gateway",
        help="serve Azure Personalizer's Rank / Reward / Activate over HTTP",
        description="An HTTP front door compatible with Azure Personalizer v1.0: POST "
        "/personalizer/v1.0/rank, /events/{eventId}/reward and /events/{eventId}/activate, "
        "with an OpenAPI document at /openapi.json. It decides with the bandit's latest released "
        "model and sends every decision and reward to the learner: the learner service over "
        "Kafka (--kafka, or a kafka section), or, by default, a learner in this process "
        "(docs/gateway.md).",
    )
    p.add_argument("--config", metavar="FILE.yaml", help="YAML settings file (as for serve)")
    p.add_argument("--kafka", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--bandit", help="the bandit to serve (default: the only one configured)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=non_negative_int, help="port (default 8080; 0: a free one)")
    p.add_argument("--state-dir", metavar="DIR", help="the gateway's log (and learner state)")
    p.add_argument("--log-json", action="store_true", help="JSON log lines")

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
        "--rate", type=positive_float, default=100.0, help="events per second (default 100)"
    )
    p.add_argument(
        "--events", type=positive_int, help="stop after this many events (default: unlimited)"
    )
    p.add_argument(
        "--duration", type=positive_float, metavar="SECONDS", help="stop after this long"
    )
    p.add_argument("--log-json", action="store_true", help="JSON log lines")

    p = sub.add_parser(
        "budget",
        help="print a ledger's privacy spend and statement",
        description="Read a privacy ledger (read-only), compose its releases and print the "
        "spend per bandit — pure ε, basic (ε, δ), zCDP ρ, ε at δ by the PLD accountant, and "
        "the accountant of record, the tightest of them — with a privacy statement.",
    )
    p.add_argument(
        "ledger",
        help="a service's state directory (its ledger.jsonl), a ledger file, or the ledger "
        "topic of a replica group (scaling.mode group, default <group_id>.ledger) with --kafka",
    )
    p.add_argument(
        "--kafka", metavar="HOST:PORT", help="read LEDGER as a Kafka topic from this broker"
    )
    p.add_argument(
        "--delta",
        type=delta,
        default=None,
        help="also report ε at this δ (PLD accountant); default: each bandit's δ",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = sub.add_parser(
        "explain",
        help="print a policy's calibration constants as JSON",
        description="Print a private policy's public calibration constants as JSON — for "
        "FLIPHAT, per release: nominal n, clip bounds, iterations, sensitivity, Laplace scale, "
        "per-step budget; for DP-LinUCB: m, σ or k, shift, ρ_min, ρ_max, γ, c and the other "
        "calibrations side by side — computed from its parameters, without data.",
    )
    _names(
        p.add_argument("--policy", required=True, help="the policy: one of %(names)s"),
        ".config",
        "CONFIGS",
    )
    p.add_argument(
        "--policy-param",
        action="append",
        metavar="KEY=VALUE",
        help="a parameter of the policy (repeatable), as in a bandit's policy section of "
        "serve's settings, e.g. d=400, epsilon=1, calibration=paper; most policies need d",
    )
    _add_user_level_options(p, "the output states the per-user guarantee")
    p.add_argument(
        "--horizon",
        type=positive_int,
        default=1 << 20,
        help="list the releases up to this round (default 2^20)",
    )

    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of a message of the service's topics",
        description="Print the JSON Schema (draft 2020-12) of one kind of message the service "
        "reads or writes, generated from its pydantic model (docs/events.md; the files are also "
        "in docs/schemas/ and in the package, streaming_dpbandit/data/schemas/).",
    )
    _names(
        p.add_argument("name", nargs="?", help="the message: one of %(names)s (omit to list them)"),
        ".stream.json_schemas",
        "MESSAGES",
    )
    p.add_argument("--write", metavar="DIR", help="write every schema to DIR/NAME.schema.json")
    return parser


def _command(module: str, function: str = "run"):
    """The subcommand ``commands/<module>.py``'s ``function``, imported when it runs."""

    def call(args) -> int:
        return getattr(importlib.import_module(f"{__package__}.commands.{module}"), function)(args)

    call.__name__ = f"{module}.{function}"
    return call


COMMANDS = {
    "loadgen": _command("serve", "run_loadgen"),
    "simulate": _command("simulate"),
    "replay": _command("replay"),
    "reproduce": _command("reproduce"),
    "audit": _command("audit"),
    "budget": _command("budget"),
    "explain": _command("explain"),
    "serve": _command("serve"),
    "schema": _command("schema"),
    "gateway": _command("gateway"),
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
