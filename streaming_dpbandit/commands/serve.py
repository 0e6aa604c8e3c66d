"""``dpbandit serve`` and ``dpbandit loadgen``: the settings from the flags, then the service.

Settings: YAML < environment < command-line flags, plus the embedded default
(:mod:`streaming_dpbandit.settings`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import BinaryIO

from ..errors import ConfigError
from .options import deep_merge, json_default

__all__ = ["build_service_settings", "run", "run_loadgen"]


def build_service_settings(args):
    """Settings for ``serve``: YAML < environment < command-line flags, plus embedded defaults.

    Returns (settings, notes to log, temporary): ``temporary`` when the state directory is a
    fresh temporary one (the embedded default without ``--state-dir``), which :func:`run`
    removes at exit — its snapshots hold the secret noise key.
    """
    import tempfile

    from ..settings import embedded_bandits, load_service_settings, validate_settings

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
    data = deep_merge(base.model_dump(exclude_unset=False), over)
    if data.get("log_json"):
        data["progress"] = False  # every stderr line is JSON: no progress bar
    embedded = not data.get("kafka") and not data.get("file")
    notes = []
    if embedded and not data.get("bandits"):
        data["bandits"], note = embedded_bandits(data["simulation"])
        notes.append(note)
    if data.get("file") and not data.get("kafka") and not data.get("bandits"):
        ids = _file_bandit_ids(data["file"]["path"])
        which = f" (its events are for bandit {', '.join(map(repr, ids))})" if ids else ""
        raise ConfigError(
            f"--file {data['file']['path']}: no bandit is configured{which}, so every event "
            "would be dead-lettered as unknown_bandit: give --config FILE.yaml with a 'bandits:' "
            "section (docs/service.md)"
        )
    state_set = bool(args.state_dir) or "snapshots" in (base.model_fields_set or set())
    temporary = embedded and not state_set
    if temporary:  # created owner-only (0700), removed by run() at exit
        data["snapshots"]["directory"] = tempfile.mkdtemp(prefix="dpbandit-state-")
        notes.append(
            f"state (snapshots, which hold the secret noise key, and the privacy ledger) in "
            f"{data['snapshots']['directory']}, a temporary directory removed at exit: give "
            "--state-dir DIR to keep it"
        )
    elif not state_set and (data.get("scaling") or {}).get("mode") != "group":
        # (a group replica keeps its state in Kafka topics: no directory to announce)
        where = Path(data["snapshots"]["directory"]).resolve()
        notes.append(
            f"state (snapshots and the privacy ledger) in {where}: the default "
            "snapshots.directory; set --state-dir or snapshots.directory to choose"
        )
    try:
        return validate_settings(data), notes, temporary
    except ConfigError:
        if temporary:
            shutil.rmtree(data["snapshots"]["directory"], ignore_errors=True)
        raise


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


def run(args) -> int:
    from ..logs import cli_logger

    settings, notes, temporary = build_service_settings(args)
    try:
        return _serve(args, settings, notes)
    finally:
        if temporary:  # its snapshots hold the noise key: nothing of it outlives the run
            shutil.rmtree(settings.snapshots.directory, ignore_errors=True)
            cli_logger().info("removed the temporary state %s", settings.snapshots.directory)


def _serve(args, settings, notes) -> int:
    from ..logs import cli_logger, setup_logging
    from ..stream.runner import run_service

    setup_logging(settings.log_level, settings.log_json)
    for note in notes:
        cli_logger().info(note)
    from ..stream.service import ServiceStartError

    outputs = {"decisions": args.decisions_out, "dead_letter": args.dead_letters_out}
    sinks: list[BinaryIO] = []
    try:
        transport = _tee_outputs(settings, outputs, sinks)
        out = sys.stderr if "-" in outputs.values() else None  # stdout carries the messages
        summary = run_service(settings, transport, out=out, linger_s=args.linger)
    except ServiceStartError as err:
        raise ConfigError(str(err)) from None
    finally:
        for sink in sinks:
            sink.close()
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=1, default=json_default))
    return 1 if all_dead(summary) else 0


def _tee_outputs(settings, outputs: dict, sinks: list):
    """The in-process transport, writing the decisions and dead letters to the files (or
    stdout) of ``--decisions-out`` / ``--dead-letters-out``; None when neither is given."""
    flags = {"decisions": "--decisions-out", "dead_letter": "--dead-letters-out"}
    if not any(outputs.values()):
        return None
    if settings.kafka is not None:
        given = " and ".join(flags[k] for k, v in outputs.items() if v)
        raise ConfigError(
            f"{given}: an in-process run's outputs (--file, or the embedded simulation); with "
            "Kafka, read the decisions and dead-letter topics"
        )
    from ..settings import TopicsSettings
    from ..stream.runner import build_transport
    from ..stream.transport import InProcessTransport

    transport = build_transport(settings)
    assert isinstance(transport, InProcessTransport)  # no kafka section: in process
    topics = TopicsSettings()
    for key, path in outputs.items():
        if not path:
            continue
        if path == "-":
            sys.stdout.flush()
            sink = sys.stdout.buffer  # not closed: the process's stdout
        else:
            try:
                sink = open(path, "wb")  # closed by run()
            except OSError as err:
                raise ConfigError(f"{flags[key]}: cannot write {path}: {err.strerror}") from None
            sinks.append(sink)
        transport.tee(getattr(topics, key), sink)
    return transport


def all_dead(summary: dict) -> bool:
    """Was every input record this run read dead-lettered? Says so on stderr."""
    read = summary.get("records_read") or 0
    dead = summary.get("dead_letters") or {}
    if not read or sum(dead.values()) < read:
        return False
    why = ", ".join(f"{k}: {v:,}" for k, v in sorted(dead.items(), key=lambda kv: -kv[1]))
    print(
        f"dpbandit serve: every one of the {read:,} input records was dead-lettered ({why}): "
        "nothing was decided or learned; docs/events.md explains the reasons",
        file=sys.stderr,
    )
    return True


def run_loadgen(args) -> int:
    from ..logs import setup_logging
    from ..settings import load_service_settings
    from ..stream.errors import ServiceStartError
    from ..stream.sim.loadgen import run_loadgen

    # --kafka joins the file and the environment before validation, as for serve: a YAML
    # whose kafka section names no bootstrap servers is completed by it
    over = {"kafka": {"bootstrap_servers": args.kafka}} if args.kafka else {}
    base = load_service_settings(args.config, **over)
    setup_logging(base.log_level, args.log_json or base.log_json)
    try:
        run_loadgen(base, rate=args.rate, events=args.events, duration_s=args.duration)
    except ServiceStartError as err:
        raise ConfigError(str(err)) from None
    return 0
