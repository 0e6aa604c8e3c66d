"""What a service reports: its end-of-run summary and the exact encoding of what it learned."""

from __future__ import annotations

import time

from ..privacy.accountant import Accountant
from ..privacy.user_level import user_level_of_records
from ..utils.serialization import dumps
from .join_state import EARLY_SOURCE_KEYS

__all__ = ["learned_state_bytes", "service_summary"]


def service_summary(svc) -> dict:
    """The end-of-run summary of a service: per bandit its rounds, statistics and spend."""
    elapsed = time.monotonic() - svc.started
    out = {"elapsed_s": elapsed, "bandits": {}, "dead_letters": dict(svc.dead_count)}
    records = svc.ledger.records()
    acc = Accountant(records)
    for name, rt in svc.bandits.items():
        delta = getattr(rt.policy, "delta", None)
        sp = acc.spend(name, delta=delta) if acc.records else None
        ul = user_level_of_records(records, name)
        if ul is not None:  # the guarantee of record is per user (docs/privacy/user-level.md)
            sp = ul.spend
        out["bandits"][name] = {
            "policy": rt.policy.name,
            "rounds": rt.policy.t,
            "model_version": rt.policy.model_version,
            "stats": dict(rt.stats),  # every run on this state
            "this_run": dict(rt.stats - rt.stats_restored),
            "mean_reward_window": (sum(rt.window) / len(rt.window)) if rt.window else None,
            "privacy": None if sp is None else sp.to_dict(),
            # kept in the state for the next records: a decision's reward, or a reward's event
            "waiting": {
                "decisions_awaiting_feedback": len(rt.join.pending),
                "feedback_awaiting_its_event": rt.join.early_count,
            },
        }
        if rt.user_level:
            c = rt.policy.user_counters()
            out["bandits"][name]["user_level"] = {
                **rt.policy.bound_dict(),
                "admitted": c["admitted"],
                "bounded": c["bounded"],
                "statement": None if ul is None else ul.statement(),
            }
    if svc.local:
        out["local_bandits"] = svc.local.summary()
    # this run's decisions; the state's total counts the runs before it too
    decided = sum(rt.stats["decided"] - rt.stats_restored["decided"] for rt in svc.bandits.values())
    out["decisions"] = decided
    out["decisions_total"] = sum(rt.stats["decided"] for rt in svc.bandits.values())
    out["events_per_s"] = decided / elapsed if elapsed > 0 else 0.0
    return out


def learned_state_bytes(bandit_states: dict) -> bytes:
    """Exact encoding of what bandits learned (policies, join outcomes, unledgered releases),
    from runtime state dicts — e.g. the ``bandits`` section of a snapshot."""
    out = {}
    for name, st in bandit_states.items():
        # where held feedback came from (topic, partition, offset) is routing, not learning
        join = {k: v for k, v in st["join"].items() if k not in EARLY_SOURCE_KEYS}
        if "early" in join:  # a snapshot from before the columns
            join["early"] = [e[:3] + e[4:] for e in join["early"]]
        out[name] = {
            "policy": _learned(st["policy"]),
            "join": join,
            "unledgered": st["unledgered"],
            "held_rows": st.get("held_rows"),
        }
        if "bounded_rounds" in st:  # user level: decided rows that will not be learned
            out[name]["bounded_rounds"] = st["bounded_rounds"]
    return dumps(out)


#: Keys of a policy's state that record *which* rounds reached it (``privacy.contribution``),
#: not what it learned: derived from the rows (and the join's outcomes), so a snapshot written
#: before they existed resumes to the same learning.
GUARD_KEYS = ("learned_rounds", "bounded_rounds")


def _learned(policy_state: dict) -> dict:
    """A policy's state without its guard records (a wrapper's inner state too)."""
    out = {k: v for k, v in policy_state.items() if k not in GUARD_KEYS}
    inner = out.get("policy")
    if isinstance(inner, dict):
        out["policy"] = _learned(inner)
    return out
