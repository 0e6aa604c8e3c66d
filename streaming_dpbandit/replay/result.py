"""The outcome of a replay: every estimate, its diagnostics, the privacy spent, timings."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ..privacy.statement import PAPER_LABEL
from ..privacy.user_level import user_level_of_records
from .ope.base import _finite

if TYPE_CHECKING:  # evaluate imports this module
    from ..policies.base import Policy
    from .evaluate import PolicyRun, PolicySpec
    from .ledger import InMemoryLedger
    from .ope.onpolicy import OnPolicy
    from .readers.base import LogReader
    from .reward_model import RidgeRewardModel

__all__ = ["ReplayResult"]


@dataclasses.dataclass
class ReplayResult:
    """Results of :func:`~.evaluate.replay_log` (JSON-ready through :meth:`to_json`).

    Attributes
    ----------
    log
        What was read (format, path or range, arms, dimension, join counters).
    events, positions
        Events evaluated and slate positions seen.
    on_policy
        The logged policy's own value (mean logged reward) with its intervals.
    reward_model
        Out-of-fold fit of the DM/DR reward model (``None`` without DM/DR).
    runs
        One dict per policy configuration: its replay-method estimate, its frozen off-policy
        estimates with weight diagnostics, and the privacy each spent.
    level, settings, timing
        Interval level, evaluation settings, seconds per pass and events/s.
    """

    log: dict[str, Any]
    events: int
    positions: int
    on_policy: dict[str, Any]
    reward_model: dict[str, Any] | None
    runs: list[dict[str, Any]]
    level: float
    settings: dict[str, Any]
    timing: dict[str, float]

    @classmethod
    def collect(
        cls,
        reader: LogReader,
        runs: list[PolicyRun],
        onpolicy: OnPolicy,
        model: RidgeRewardModel | None,
        events: int,
        positions: int,
        level: float,
        settings: dict[str, Any],
        timing: dict[str, float],
    ) -> ReplayResult:
        out_runs = []
        for run in runs:
            spec = run["spec"]
            item: dict[str, Any] = {
                "key": spec.key,
                "policy": spec.policy,
                "params": spec.params,
                "epsilon": spec.epsilon,
                "delta": spec.delta,
                "note": spec.note,
                "reference": spec.reference,
                "replay": None,
                "offpolicy": None,
            }
            skipped = run.get("replay_skipped")
            if skipped:
                item["replay_skipped"] = skipped
            rm = run["replay"]
            if rm is not None:
                item["replay"] = {
                    "estimate": rm.estimate().to_dict(),
                    "privacy": _privacy(spec, rm.ledger, rm.policy),
                    "events_per_s": _rate(events, run["time"]["replay"]),
                    "seconds": run["time"]["replay"],
                }
            op = run["offpolicy"]
            if op is not None:
                res = op.result()
                res["privacy"] = _privacy(spec, op.ledger, op.policy)
                res["events_per_s"] = _rate(events, run["time"]["offpolicy"])
                res["seconds"] = run["time"]["offpolicy"]
                item["offpolicy"] = res
            out_runs.append(item)
        timing = dict(timing)
        timing["events_per_s_evaluation_pass"] = _rate(events, timing["evaluation_pass_s"])
        return cls(
            log=reader.describe(),
            events=events,
            positions=positions,
            on_policy=onpolicy.estimate().to_dict(),
            reward_model=None if model is None else model.summary(),
            runs=out_runs,
            level=level,
            settings=settings,
            timing=timing,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = _finite(dataclasses.asdict(self))
        return out


def _rate(events: int, seconds: float) -> float:
    return events / seconds if seconds > 0 else math.inf


def _privacy(spec: PolicySpec, ledger: InMemoryLedger, policy: Policy) -> dict[str, Any]:
    if spec.epsilon is None and not getattr(policy, "private", False):
        return {"private": False, "releases": ledger.releases}
    out: dict[str, Any] = {
        "private": True,
        "configured_epsilon": spec.epsilon,
        "configured_delta": spec.delta,
    }
    out.update(ledger.spend(delta=spec.delta))
    records = ledger.records
    ul = user_level_of_records(records, records[0].bandit_id) if records else None
    if ul is not None:  # the guarantee of record is per user (docs/privacy/user-level.md)
        out["of_record"] = ul.of_record()
        out["user_level"] = ul.to_dict()
    calibration = getattr(policy, "calibration", None)
    out["calibration"] = calibration
    out["noise_backend"] = ledger.noise_backend(policy)
    if calibration == "paper" and "label" not in out and getattr(policy, "name", "") == "fliphat":
        out["label"] = PAPER_LABEL
    return out
