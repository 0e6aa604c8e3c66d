"""``dpbandit gateway``: the Personalizer-compatible HTTP front door (docs/gateway.md).

Settings: YAML < environment < command-line flags. Without a ``kafka`` section the learner runs
in this process (the embedded default); without a bandit, the embedded default bandit below.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .options import deep_merge

__all__ = ["EMBEDDED_BANDIT", "build_gateway_settings", "run"]

#: The bandit of ``dpbandit gateway`` with no configuration: FLIPHAT (certified, ε = 1) over
#: hashed feature objects, its first release after 100 ranked events (then doubling episodes).
EMBEDDED_BANDIT = {
    "policy": {
        "policy": "fliphat",
        "d": 256,
        "s": 16,
        "epsilon": 1.0,
        "delta": 1e-6,
        "first_episode_len": 100,
    },
    "feedback_window": 60.0,
    "on_expiry": "default",
    "default_reward": 0.0,
    "reward_bounds": (0.0, 1.0),
    "features": {},
}


def build_gateway_settings(args):
    """Settings for ``gateway``; returns (settings, notes to announce)."""
    from ..settings import load_service_settings, validate_settings

    over: dict = {"gateway": {}}
    if args.kafka:
        over["kafka"] = {"bootstrap_servers": args.kafka}
    if args.state_dir:
        over["snapshots"] = {"directory": args.state_dir}
    for flag in ("host", "port", "bandit"):
        value = getattr(args, flag)
        if value is not None:
            over["gateway"][flag] = value
    if args.log_json:
        over["log_json"] = True
    base = load_service_settings(args.config, **over)
    data = deep_merge(base.model_dump(exclude_unset=False), over)
    notes = []
    if not data.get("bandits"):
        data["bandits"] = {"default": EMBEDDED_BANDIT}
        notes.append(
            "embedded default: bandit 'default' runs FLIPHAT (certified, ε=1, δ=1e-6, d=256) "
            "over hashed feature objects; its first model is released after 100 ranked events"
        )
    state_set = bool(args.state_dir) or "snapshots" in (base.model_fields_set or set())
    if not state_set:
        where = Path(data["snapshots"]["directory"]).resolve()
        what = "log" if data.get("kafka") else "log, the learner's state and its privacy ledger"
        notes.append(
            f"state (the gateway's {what}) in {where}: set --state-dir or snapshots.directory "
            "to choose"
        )
    if data.get("kafka"):
        notes.append(
            "learner: the learner service over Kafka (dpbandit serve, broadcast.role learner)"
        )
    else:
        notes.append("learner: in this process (no kafka section: the embedded default)")
    return validate_settings(data), notes


def run(args) -> int:
    from ..gateway import run_gateway
    from ..logs import cli_logger, setup_logging
    from ..stream.errors import ServiceStartError

    settings, notes = build_gateway_settings(args)
    setup_logging(settings.log_level, settings.log_json)
    for note in notes:
        cli_logger().info(note)
    try:
        run_gateway(settings)
    except ServiceStartError as err:
        raise ConfigError(str(err)) from None
    return 0
