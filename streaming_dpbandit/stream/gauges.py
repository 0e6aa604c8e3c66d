"""A bandit's gauges: what ``BanditRuntime.export_metrics`` refreshes (model, rounds, episode
progress, joins, rewards, clipping counters)."""

from __future__ import annotations

from typing import Any

__all__ = ["export_bandit_metrics"]


def export_bandit_metrics(rt: Any) -> None:
    """Refresh a bandit runtime's gauges: model, rounds, episode progress, joins, rewards,
    clipping counters."""
    m = rt.metrics
    if m is None:
        return
    b = rt.bandit_id
    m.model_version.labels(b).set(rt.policy.model_version)
    m.rounds.labels(b).set(rt.policy.t)
    horizon = rt.policy.max_decide_batch()
    if horizon < (1 << 40):
        done = rt.policy.t - rt.last_refit_round
        m.episode_progress.labels(b).set(done / max(1, done + horizon))
    m.pending.labels(b).set(len(rt.join.pending))
    m.reward_sum.labels(b).set(rt.reward_sum)
    m.early.labels(b).set(rt.join.early_count)
    if rt.window:
        mean = sum(rt.window) / len(rt.window)
        m.reward_window.labels(b).set(mean)
        if len(rt.window) == rt.window.maxlen:
            rt.best_window = max(rt.best_window, mean)
            m.regret_proxy.labels(b).set(rt.best_window - mean)
    counters = getattr(rt.policy, "counters", None) or {}
    for key, kind in (
        ("clipped_context_coords", "context_coordinate"),
        ("clipped_rewards", "reward"),
    ):
        v = int(counters.get(key, 0))
        seen = rt._clipped_seen.get(kind, 0)
        if v > seen:
            m.clipped.labels(b, kind).inc(v - seen)
        rt._clipped_seen[kind] = v
