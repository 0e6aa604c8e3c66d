"""Prometheus metrics of the service (DESIGN §6), prefix ``dpbandit_``.

Counters end in ``_total``. Privacy-spend gauges are computed from the persisted ledger, so
they survive restarts. Labels never carry user or event identifiers. The metrics are documented
in ``docs/metrics.md`` (name, type, labels, meaning).
"""

from __future__ import annotations

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
)
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

__all__ = ["RAW_REWARD_METRICS", "GatewayMetrics", "ServiceMetrics", "observe_many"]

#: Metrics computed from the joined rewards themselves, without noise: monitoring figures for
#: whoever may read the feedback topic, outside the differential-privacy guarantee (README,
#: docs/metrics.md). Every other metric is a count, a time, a configuration value or is
#: computed from the ledger (released values only).
RAW_REWARD_METRICS = (
    "dpbandit_reward_sum",
    "dpbandit_reward_window_mean",
    "dpbandit_regret_proxy_window_mean",
)

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class ServiceMetrics:
    """All collectors of one service instance, on their own registry: the ``dpbandit_`` series,
    ``dpbandit_build_info{version=...}``, and the client library's ``process_*`` (CPU, memory,
    file descriptors) and ``python_info`` collectors.

    The ``_created`` series of counters and histograms are disabled (process-wide): Prometheus
    does not need them to compute rates, and they would double the number of counter series
    (docs/metrics.md).
    """

    def __init__(self, registry: CollectorRegistry | None = None):
        from . import __version__

        disable_created_metrics()
        self.registry = registry or CollectorRegistry()
        r = self.registry
        if registry is None:  # a fresh registry: the process and platform collectors too
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        self.build_info = Info(
            "dpbandit_build", "Version of the running dpbandit (value 1)", registry=r
        )
        self.build_info.info({"version": __version__})
        self.events = Counter(
            "dpbandit_events_total", "Context events by outcome", ["bandit", "outcome"], registry=r
        )
        self.feedback = Counter(
            "dpbandit_feedback_total",
            "Feedback messages by outcome",
            ["bandit", "outcome"],
            registry=r,
        )
        self.decision_latency = Histogram(
            "dpbandit_decision_latency_seconds",
            "Time from receiving a context event to handing its decision to the producer",
            ["bandit"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.refit_duration = Histogram(
            "dpbandit_refit_duration_seconds",
            "Duration of model updates (private releases)",
            ["bandit"],
            registry=r,
        )
        self.refit_failures = Counter(
            "dpbandit_refit_failures_total",
            "Model updates (private releases) that raised an error. The service stops after one; "
            "the count is kept in the state directory, so the restarted process still shows it",
            ["bandit"],
            registry=r,
        )
        self.model_version = Gauge(
            "dpbandit_model_version",
            "Version of the model in force per bandit (it counts the private model updates)",
            ["bandit"],
            registry=r,
        )
        self.rounds = Gauge("dpbandit_rounds", "Rounds decided per bandit", ["bandit"], registry=r)
        self.episode_progress = Gauge(
            "dpbandit_episode_progress_ratio",
            "Fraction of the rounds until the next model update that have been decided",
            ["bandit"],
            registry=r,
        )
        self.reward_sum = Gauge(
            "dpbandit_reward_sum",
            "Sum of the rewards joined to decisions, as received (within reward_bounds when set; "
            "persisted). Exact, not differentially private: see docs/metrics.md",
            ["bandit"],
            registry=r,
        )
        self.reward_window = Gauge(
            "dpbandit_reward_window_mean",
            "Mean reward over the last 1000 joined rewards (exact, not differentially private)",
            ["bandit"],
            registry=r,
        )
        self.regret_proxy = Gauge(
            "dpbandit_regret_proxy_window_mean",
            "Best windowed mean reward so far minus the current one (windows of 1000 joined "
            "rewards; a proxy, exact, not differentially private: see docs/metrics.md)",
            ["bandit"],
            registry=r,
        )
        self.pending = Gauge(
            "dpbandit_pending_joins", "Decisions waiting for feedback", ["bandit"], registry=r
        )
        self.early = Gauge(
            "dpbandit_early_feedback",
            "Feedback held for decisions not yet made",
            ["bandit"],
            registry=r,
        )
        self.blocked = Gauge(
            "dpbandit_blocked",
            "1 while a bandit waits for feedback before its next release",
            ["bandit"],
            registry=r,
        )
        self.feedback_paused = Gauge(
            "dpbandit_feedback_paused",
            "1 while the feedback partitions are paused: held early feedback above its limit",
            registry=r,
        )
        self.forced_expiries = Counter(
            "dpbandit_forced_expiries_total",
            "Pending joins expired by the idle timeout instead of the feedback clock",
            ["bandit"],
            registry=r,
        )
        self.clipped = Counter(
            "dpbandit_clipped_inputs_total",
            "Inputs changed by clipping before a private computation",
            ["bandit", "kind"],
            registry=r,
        )
        self.bounded_events = Counter(
            "dpbandit_bounded_events_total",
            "Events decided but not learned from: beyond their user's contribution bound "
            "(user_level: k per release, E releases, counter-table capacity)",
            ["bandit"],
            registry=r,
        )
        self.releases = Counter(
            "dpbandit_releases_total",
            "Private releases made by this process",
            ["bandit", "mechanism"],
            registry=r,
        )
        self.dead_letters = Counter(
            "dpbandit_dead_letters_total",
            "Messages sent to the dead-letter topic (bandit: a configured bandit the message "
            "names, else empty)",
            ["bandit", "topic", "reason"],
            registry=r,
        )
        self.ledger_releases = Gauge(
            "dpbandit_ledger_releases",
            "Releases recorded in the persisted ledger",
            ["bandit"],
            registry=r,
        )
        self.eps_spent = Gauge(
            "dpbandit_privacy_epsilon_spent",
            "ε spent per bandit, from the persisted ledger",
            ["bandit", "calibration", "accountant"],
            registry=r,
        )
        self.eps_of_record = Gauge(
            "dpbandit_privacy_epsilon_of_record",
            "ε of the accountant of record: the tightest valid guarantee of the ledger "
            "(accountant=pure, pld, zcdp or basic names it; the same number as `dpbandit budget`)",
            ["bandit", "calibration", "accountant"],
            registry=r,
        )
        self.delta_of_record = Gauge(
            "dpbandit_privacy_delta_of_record",
            "δ of the accountant of record (0 for pure ε)",
            ["bandit", "calibration", "accountant"],
            registry=r,
        )
        self.delta_spent = Gauge(
            "dpbandit_privacy_delta_spent",
            "δ spent per bandit (basic composition of the ledger)",
            ["bandit", "calibration"],
            registry=r,
        )
        self.rho_spent = Gauge(
            "dpbandit_privacy_rho_spent",
            "zCDP ρ spent per bandit, where it applies",
            ["bandit"],
            registry=r,
        )
        self.eps_budget = Gauge(
            "dpbandit_privacy_epsilon_budget",
            "Configured ε budget per bandit",
            ["bandit"],
            registry=r,
        )
        self.slate_items = Gauge(
            "dpbandit_slate_items",
            "Items of a slate bandit's catalogue: status=reachable, or unreachable (matroid "
            "loops: never in any slate)",
            ["bandit", "status"],
            registry=r,
        )
        self.calibration = Gauge(
            "dpbandit_calibration_info",
            "1 for the bandit's calibration; dp_valid=false marks the paper calibration",
            ["bandit", "policy", "calibration", "dp_valid"],
            registry=r,
        )
        self.checkpoint_age = Gauge(
            "dpbandit_checkpoint_age_seconds",
            "Seconds since the last snapshot (computed when scraped)",
            registry=r,
        )
        self.checkpoint_interval = Gauge(
            "dpbandit_checkpoint_interval_seconds",
            "Configured snapshot interval (snapshots.interval_s)",
            registry=r,
        )
        self.checkpoints = Counter(
            "dpbandit_checkpoints_total", "Snapshots written", ["reason"], registry=r
        )
        self.checkpoint_bytes = Gauge(
            "dpbandit_checkpoint_bytes", "Size of the last snapshot", registry=r
        )
        self.lag = Gauge(
            "dpbandit_consumer_lag",
            "Records not yet consumed per input partition",
            ["topic", "partition"],
            registry=r,
        )
        self.simulated_regret = Gauge(
            "dpbandit_simulated_pseudo_regret",
            "True cumulative pseudo-regret (embedded simulation source only)",
            ["bandit"],
            registry=r,
        )


class GatewayMetrics:
    """The collectors of ``dpbandit gateway`` (docs/gateway.md), on the registry of the
    service metrics it shares (the embedded learner's, or a fresh one)."""

    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.request_duration = Histogram(
            "dpbandit_gateway_request_duration_seconds",
            "Time the gateway took to answer a request, by route and HTTP status",
            ["route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            "dpbandit_gateway_decisions_total", "Rank requests decided", ["bandit"], registry=r
        )
        self.rewards = Counter(
            "dpbandit_gateway_rewards_total", "Rewards recorded", ["bandit"], registry=r
        )
        self.refused = Counter(
            "dpbandit_gateway_refused_total",
            "Requests refused, by route and error code",
            ["route", "code"],
            registry=r,
        )
        self.buffered = Gauge(
            "dpbandit_gateway_buffered_records",
            "Records written to the gateway's log and not yet delivered to the learner",
            registry=r,
        )
        self.events_remembered = Gauge(
            "dpbandit_gateway_events",
            "Event ids the gateway remembers (idempotent Rank, one reward per event)",
            registry=r,
        )
        self.model_version = Gauge(
            "dpbandit_gateway_model_version",
            "Version of the released model the gateway decides with",
            ["bandit"],
            registry=r,
        )
        self.delivery_failures = Counter(
            "dpbandit_gateway_delivery_failures_total",
            "Attempts to deliver records to Kafka that failed (they are retried)",
            registry=r,
        )


def observe_many(child, values) -> None:
    """``child.observe(v)`` for every v, counted per bucket in one pass (a batch of decisions
    costs a few increments instead of one locked update per decision).

    ``child`` is one labelled child of a :class:`~prometheus_client.Histogram`. Falls back to
    per-value ``observe`` if the client's histogram internals are not the expected ones.

    >>> from prometheus_client import CollectorRegistry, Histogram
    >>> reg = CollectorRegistry()
    >>> h = Histogram("lat", "", ["b"], buckets=(0.1, 1.0), registry=reg)
    >>> observe_many(h.labels("x"), [0.05, 0.1, 0.5, 3.0])
    >>> [reg.get_sample_value("lat_bucket", {"b": "x", "le": le}) for le in ("0.1", "1.0", "+Inf")]
    [2.0, 3.0, 4.0]
    >>> reg.get_sample_value("lat_sum", {"b": "x"}), reg.get_sample_value("lat_count", {"b": "x"})
    (3.65, 4.0)
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(buckets) != len(bounds):
        for v in values.tolist():
            child.observe(v)
        return
    # observe() puts v in the first bucket with v <= bound (+Inf last): searchsorted "left"
    counts = np.bincount(np.searchsorted(np.asarray(bounds), values, side="left"))
    for i in np.flatnonzero(counts).tolist():
        buckets[i].inc(int(counts[i]))
    total.inc(float(values.sum()))
