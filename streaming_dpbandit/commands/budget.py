"""``dpbandit budget``: the privacy spent, per bandit, from a ledger file or topic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["run"]


def _kafka_ledger(bootstrap: str, topic: str) -> list:
    """Committed records of a ledger topic (a replica group's ledger)."""
    from ..settings import KafkaSettings
    from ..stream.kafka.ledger import KafkaLedger
    from ..stream.kafka.seam import kafka_client

    try:
        settings = KafkaSettings(bootstrap_servers=bootstrap)
        with kafka_client(settings.client).admin(settings) as admin:
            exists = topic in admin.list_topics()  # a metadata request could create it
    except Exception as err:  # NoBrokersAvailable and friends
        raise ConfigError(f"cannot reach Kafka at {bootstrap}: {type(err).__name__}") from None
    if not exists:
        raise ConfigError(f"no ledger topic {topic!r} at {bootstrap}")
    return KafkaLedger(settings, topic).open().records()


def run(args) -> int:
    from ..experiments.report import format_table
    from ..policies.user_level import USER_NEIGHBOURING, USER_UNIT
    from ..privacy.accountant import ACCOUNTANT_NAMES, Accountant, format_of_record
    from ..privacy.ledger import LedgerCorruptError, read_ledger
    from ..privacy.statement import PrivacyStatement, per_unit_caveat
    from ..privacy.user_level import user_level_of_records

    path = Path(args.ledger)
    if path.is_dir() and not args.kafka:  # a state directory: its ledger
        if not (path / "ledger.jsonl").is_file():
            raise ConfigError(f"no ledger in {path} (a state directory holds ledger.jsonl)")
        path = path / "ledger.jsonl"
    where = str(path)
    if args.kafka:
        records, torn = _kafka_ledger(args.kafka, args.ledger), 0
        where = f"{args.ledger} at {args.kafka}"
    elif not path.is_file():
        raise ConfigError(f"no ledger at {path}")
    else:
        try:
            records, torn = read_ledger(path)
        except LedgerCorruptError as err:
            raise ConfigError(f"{path}: {err}") from None
    acc = Accountant(records)
    out: dict[str, Any] = {
        "ledger": str(where),
        "records": len(records),
        "torn_tail_bytes": torn,
        "bandits": [],
    }
    for b in acc.bandits():
        recs = [r for r in records if r.bandit_id == b]
        delta = args.delta if args.delta is not None else max(r.delta for r in recs) or None
        sp = acc.spend(b, delta=delta)
        last = recs[-1]
        notes = sorted({r.note for r in recs if r.note})
        unit = last.privacy_unit or "see the policy's documentation"
        neighbouring = last.neighbouring or "see the policy's documentation"
        scope = (
            f"{sp.releases} releases over {sp.slices or 1} disjoint data slice(s), "
            "composed by the ledger's accountant."
        )
        ul = user_level_of_records(records, b, delta=args.delta)
        if ul is not None:  # the whole-run guarantee per user (docs/privacy/user-level.md)
            sp = ul.spend
            k, e = ul.max_contributions_per_user, ul.max_releases_per_user
            unit = USER_UNIT.format(k=k, e="" if e is None else f", and at most {e} releases")
            neighbouring, scope = USER_NEIGHBOURING, ul.statement() + "."
            if ul.local:  # a device's reports (docs/privacy/user-level-ldp.md)
                from ..policies.ldp_user_level import LOCAL_USER_NEIGHBOURING, local_user_unit

                unit = local_user_unit(k, ul.window_rounds, e)
                neighbouring = LOCAL_USER_NEIGHBOURING
        rec = sp.of_record()
        st = PrivacyStatement(
            model=last.privacy_model,
            unit=unit,
            neighbouring=neighbouring,
            epsilon=rec["epsilon"],
            delta=rec["delta"],
            rho=sp.rho,
            accountant=ACCOUNTANT_NAMES[rec["accountant"]],
            calibration=",".join(sp.calibrations),
            scope=scope,
            label="; ".join(notes) if notes else None,
            noise_backend=",".join(sorted({r.noise_backend for r in recs})),
            caveats=() if ul is not None else (per_unit_caveat("releases and data slices"),),
        )
        item = {"spend": sp.to_dict(), "statement": st.to_dict(), "statement_text": st.text()}
        if ul is not None:
            item["user_level"] = ul.to_dict()
        out["bandits"].append(item)
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
    print(f"ledger {where}: {len(records)} releases")
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
