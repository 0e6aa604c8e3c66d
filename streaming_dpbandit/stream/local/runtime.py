"""The ``privacy: local`` runtime of one bandit: privatised reports in, model snapshots out.

In the local model (LDP-GLB) the devices decide with the published model and privatise their
own reports with the client SDK (:mod:`streaming_dpbandit.ldp`); the server never sees a raw
context, reward or chosen arm. A local bandit therefore has no contexts, decisions or reward join
on the server side. It reads ``ldp_report`` messages from the feedback topic (key = bandit_id, so
one bandit's reports are one partition, in order) and runs the server model
(:class:`~streaming_dpbandit.estimators.ldp_server.LDPServer`):

* **validate** each report — model id, version (at most ``max_staleness`` versions old, never
  from the future), phase, payload size, payload range (every ℓ2-ball block must have exactly
  the calibrated radius r_{ε,d}; Gaussian entries must be finite and below 10⁶) and ``msg_id``
  (a duplicate within the last ``dedup_window`` reports is dropped);
* **absorb** the valid ones in partition order;
* **publish** a new version after every ``refresh_every`` absorbed reports, and at the end of the
  multi-parameter warm-up — counts of reports in partition order, so the versions are a function
  of the report stream: a crash and restart (replaying from the snapshot's offsets) publishes
  the same versions with the same contents. Each version appends one ledger record (the
  per-report local guarantee of the reports it absorbed, parallel composition) before it is
  sent to the models topic and the HTTP endpoint.

What is logged, exported or stored: counts, versions, timings, fallback events, the published
(public) models and the server's sums of privatised reports — never a report's payload
statistics, and nothing raw, which the server does not have.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import math
import time

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from ...estimators.ldp_ols import MAX_ABS
from ...estimators.ldp_server import LDPServer
from ...ldp.model import ModelSnapshot
from ...policies.ldp_glb import local_release_record
from ...policies.ldp_user_level import local_user_statement
from ...privacy.ledger import ReleaseRecord
from ...privacy.user_level import user_level_of_records
from ...settings import BanditSettings
from ...utils.serialization import dumps
from .schemas import LDPReportMessage

__all__ = ["DedupWindow", "LocalBanditRuntime", "LocalMetrics", "learned_local_bytes", "model_id"]

log = logging.getLogger("streaming_dpbandit.local")

#: Relative tolerance of the ℓ2-ball radius check (float32 payloads round at ~6e-8).
RADIUS_RTOL = 1e-5


def model_id(bandit_id: str, fingerprint: str, epoch: int = 0) -> str:
    """A deterministic id of a model lineage: the bandit, its configuration and its epoch.

    >>> model_id("shop", "{}") == model_id("shop", "{}"), model_id("shop", "{}").startswith("shop-")
    (True, True)
    """
    h = hashlib.sha256(f"{bandit_id}|{fingerprint}|{epoch}".encode()).hexdigest()[:12]
    return f"{bandit_id}-{h}"


class DedupWindow:
    """The message ids of the last ``size`` accepted reports (64-bit hashes, in order).

    >>> w = DedupWindow(2)
    >>> [w.seen_or_add(x) for x in ("a1", "b2", "a1", "c3", "a1")]
    [False, False, True, False, False]
    """

    def __init__(self, size: int):
        self.size = max(1, int(size))
        self._ring = np.zeros(self.size, dtype=np.uint64)
        self._pos = 0
        self._filled = 0
        self._set: set[int] = set()

    @staticmethod
    def _h(msg_id: str) -> int:
        return int.from_bytes(hashlib.blake2b(msg_id.encode(), digest_size=8).digest(), "little")

    def seen_or_add(self, msg_id: str) -> bool:
        h = self._h(msg_id)
        if h in self._set:
            return True
        if self._filled == self.size:
            self._set.discard(int(self._ring[self._pos]))
        else:
            self._filled += 1
        self._ring[self._pos] = h
        self._set.add(h)
        self._pos = (self._pos + 1) % self.size
        return False

    def state_dict(self) -> dict:
        return {"ring": self._ring.copy(), "pos": self._pos, "filled": self._filled}

    def load_state_dict(self, state: dict) -> DedupWindow:
        ring = np.asarray(state["ring"], dtype=np.uint64)
        if ring.size == self.size:
            self._ring = ring.copy()
            self._pos = int(state["pos"])
            self._filled = int(state["filled"])
        else:  # a resized window keeps the most recent ids
            order = [(int(state["pos"]) - 1 - i) % ring.size for i in range(int(state["filled"]))]
            self._ring = np.zeros(self.size, dtype=np.uint64)
            self._pos = self._filled = 0
            for i in reversed(order[: self.size]):
                self._ring[self._pos] = ring[i]
                self._pos = (self._pos + 1) % self.size
                self._filled += 1
        self._set = (
            {int(x) for x in self._ring[: self._filled]}
            if self._filled < self.size
            else {int(x) for x in self._ring}
        )
        return self


class LocalMetrics:
    """Collectors of local bandits, on the service's registry (documented in docs/metrics.md)."""

    def __init__(self, service_metrics):
        r = service_metrics.registry
        self.service = service_metrics

        def per_bandit(kind, name: str, documentation: str):
            return kind(name, documentation, ["bandit"], registry=r)

        self.reports = Counter(
            "dpbandit_ldp_reports_total",
            "LDP reports by outcome (absorbed, or the dead-letter reason)",
            ["bandit", "outcome"],
            registry=r,
        )
        self.absorbed = per_bandit(
            Gauge, "dpbandit_ldp_reports_absorbed", "Reports in the server model"
        )
        self.version = per_bandit(
            Gauge, "dpbandit_ldp_model_version", "Latest published model version"
        )
        self.published = per_bandit(
            Counter,
            "dpbandit_ldp_models_published_total",
            "Model versions published by this process",
        )
        self.publish_duration = per_bandit(
            Histogram,
            "dpbandit_ldp_publish_duration_seconds",
            "Time to refresh and publish a model version",
        )
        self.main_phase = per_bandit(
            Gauge,
            "dpbandit_ldp_main_phase",
            "1 once a multi-parameter model left its warm-up (always 1 single-parameter)",
        )
        self.pd_fallback = per_bandit(
            Counter,
            "dpbandit_ols_pd_fallback_total",
            "LDP-OLS refreshes that needed the eigenvalue floor (shifted Gram not PD)",
        )


class LocalBanditRuntime:
    """Server side of one ``privacy: local`` bandit.

    Parameters
    ----------
    bandit_id, settings
        The bandit's name (its Kafka key) and configuration (policy ``ldp-glb``).
    fingerprint
        Public fingerprint of the configuration (enters the model id).
    metrics
        :class:`LocalMetrics` or None.
    """

    def __init__(
        self,
        bandit_id: str,
        settings: BanditSettings,
        fingerprint: str,
        metrics: LocalMetrics | None = None,
    ):
        self.bandit_id = bandit_id
        self.settings = settings
        cfg = settings.policy  # LDP-GLB's (privacy=local: checked by the settings)
        #: user level (docs/privacy/user-level-ldp.md): the model at the per-report calibration
        #: of k reports per user; the devices bound themselves, records carry the bound
        self.user_bound: dict | None = None
        if settings.user_level is not None:
            wrapped = settings.user_level.build(cfg, seed=settings.seed, bandit_id=bandit_id)
            policy = wrapped.policy
            self.user_bound = wrapped.bound_dict()
        else:
            policy = cfg.build(seed=settings.seed, bandit_id=bandit_id)
        self.spec = policy.model_spec()
        self.statement = policy.privacy
        if self.user_bound is not None:
            self.statement = local_user_statement(self.statement, self.user_bound)
        self.model_id = model_id(bandit_id, fingerprint, settings.local.model_epoch)
        self.server = LDPServer(
            self.spec,
            c0=cfg.c0,
            n0=cfg.n0,
            weight_decay=cfg.weight_decay,
            batch_size=cfg.batch_size,
            alpha=cfg.alpha,
            horizon=cfg.horizon,
            ols_shift=cfg.ols_shift,
            theta0=policy.initial_theta(self.spec),
            bandit_id=bandit_id,
            model_id=self.model_id,
        )
        self.refresh_every = cfg.refresh_every
        self.max_staleness = settings.local.max_staleness
        self.metrics = metrics
        self.dedup = DedupWindow(settings.local.dedup_window)
        self.stats: collections.Counter = collections.Counter()
        self.unledgered: list[ReleaseRecord] = []
        self.outbox: list[ModelSnapshot] = []
        self.since = 0  # reports accepted since the last publication
        self.first_report = 1  # index of the first report of the next version
        self._pending: list[np.ndarray] = []
        self._pending_arms: list[int] = []
        self._pending_phase: str | None = None
        self._seen_fallbacks = 0
        self._radius = {ph: self.spec.radius(ph) for ph in self.spec.phases()}
        self._sizes = {ph: self.spec.payload_size(ph) for ph in self.spec.phases()}

    # -- reports ----------------------------------------------------------------------------
    def _in_range(self, payload: np.ndarray, phase: str) -> bool:
        spec = self.spec
        if spec.block_variant(phase) == "ols":
            return bool(np.abs(payload).max() <= MAX_ABS)
        r = self._radius[phase]
        if spec.setting == "multi" and phase == "main" and not spec.joint(phase):
            B = payload.reshape(spec.K, spec.d)
            norms = np.sqrt(np.einsum("ij,ij->i", B, B))
            return bool(np.abs(norms / r - 1.0).max() <= RADIUS_RTOL)
        return abs(math.sqrt(float(payload @ payload)) / r - 1.0) <= RADIUS_RTOL

    def handle(self, msg: LDPReportMessage) -> str | None:
        """Validate and accept one report; returns the dead-letter reason, or None."""
        reason = self._check(msg)
        if reason is not None:
            self.stats[reason] += 1
            return reason
        self.stats["absorbed"] += 1
        return None

    def _check(self, msg: LDPReportMessage) -> str | None:
        spec = self.spec
        if msg.model_id != self.model_id:
            return "unknown_model"
        reason = self.server.accepts(msg.model_version, self.max_staleness)
        if reason is not None:
            return reason
        if msg.arm is not None:
            if "warmup" not in spec.phases():
                return "wrong_phase"
            if msg.arm >= spec.K:
                return "invalid_report"
            phase = "warmup"
        else:
            if spec.setting == "multi" and self.server.phase == "warmup":
                return "wrong_phase"
            phase = "main"
        payload = msg.values()
        if payload.size != self._sizes[phase]:
            return "wrong_payload_size"
        if not self._in_range(payload, phase):
            return "payload_out_of_range"
        if msg.msg_id is not None and self.dedup.seen_or_add(msg.msg_id):
            return "duplicate_report"
        if self._pending_phase is not None and self._pending_phase != phase:
            self.flush()
        self._pending_phase = phase
        self._pending.append(payload)
        self._pending_arms.append(-1 if msg.arm is None else msg.arm)
        self.since += 1
        warm_end = (
            phase == "warmup"
            and self.server.phase == "warmup"
            and self.server.warm_count + len(self._pending) >= spec.warmup_rounds
        )
        if warm_end or self.since >= self.refresh_every:
            self.publish()
        return None

    def flush(self) -> None:
        """Absorb the accepted reports (order kept; no effect on what is published)."""
        if not self._pending:
            return
        P = np.vstack(self._pending)
        arms = np.asarray(self._pending_arms, dtype=np.int64)
        phase = self._pending_phase
        assert phase is not None  # set with the first pending report
        self._pending, self._pending_arms, self._pending_phase = [], [], None
        self.server.absorb(P, phase, arms if phase == "warmup" else None)

    # -- publishing -------------------------------------------------------------------------
    def publish(self) -> ModelSnapshot:
        """Refresh, record the version in the (to-be-appended) ledger, queue it for sending."""
        t0 = time.perf_counter()
        self.flush()
        snap = self.server.publish()
        last = self.server.reports
        first = min(self.first_report, last) if last else 1
        digest = hashlib.sha256(snap.to_json()).hexdigest()[:32]
        rec = local_release_record(
            self.spec,
            f"{self.bandit_id}/ldp-glb/{self.model_id}/version={snap.model_version}",
            self.bandit_id,
            first,
            max(first, last),
            snap.model_version,
            params={"model_id": self.model_id, "phase": snap.phase, "model_digest": digest},
        )
        if self.user_bound is not None:
            rec = dataclasses.replace(rec, user_level=self.user_bound)
        self.unledgered.append(rec)
        self.first_report = last + 1
        self.since = 0
        self.outbox.append(snap)
        if self.metrics is not None:
            self.metrics.published.labels(self.bandit_id).inc()
            self.metrics.publish_duration.labels(self.bandit_id).observe(time.perf_counter() - t0)
        fb = self.server.pd_fallbacks
        if fb > self._seen_fallbacks:
            log.warning(
                "bandit %s: LDP-OLS eigenvalue-floor fallback at version %d (%d in total)",
                self.bandit_id,
                snap.model_version,
                fb,
            )
        return snap

    def current(self) -> ModelSnapshot:
        return self.server.snapshot()

    # -- metrics and spend ------------------------------------------------------------------
    def export_metrics(self) -> None:
        m = self.metrics
        if m is None:
            return
        b = self.bandit_id
        m.absorbed.labels(b).set(self.server.reports + len(self._pending))
        m.version.labels(b).set(self.server.version)
        m.main_phase.labels(b).set(1 if self.server.phase == "main" else 0)
        fb = self.server.pd_fallbacks
        if fb > self._seen_fallbacks:
            m.pd_fallback.labels(b).inc(fb - self._seen_fallbacks)
            self._seen_fallbacks = fb

    def spend(self) -> dict:
        """Per-report guarantee: every record composes in parallel, so the spend is the
        guarantee of one report."""
        eps, delta = self.spec.report_guarantee()
        out = {
            "privacy_model": "local",
            "epsilon_per_report": eps,
            "delta_per_report": delta,
            "calibration": self.statement.calibration,
        }
        if self.user_bound is not None:  # the whole-run guarantee per user (k reports composed)
            rec = local_release_record(self.spec, "user", self.bandit_id, 1, 1)
            rec = dataclasses.replace(rec, user_level=self.user_bound)
            ul = user_level_of_records([rec], self.bandit_id)
            assert ul is not None  # the record carries the bound
            out["user_level"] = ul.to_dict()
        return out

    # -- persistence ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        self.flush()
        return {
            "model_id": self.model_id,
            "server": self.server.state_dict(),
            "since": self.since,
            "first_report": self.first_report,
            "dedup": self.dedup.state_dict(),
            "stats": dict(self.stats),
            "unledgered": [r.to_dict() for r in self.unledgered],
        }

    def load_state_dict(self, state: dict) -> LocalBanditRuntime:
        if state["model_id"] != self.model_id:
            raise RuntimeError(f"bandit {self.bandit_id!r}: the snapshot holds another model")
        self.server.load_state_dict(state["server"])
        self.since = int(state["since"])
        self.first_report = int(state["first_report"])
        self.dedup.load_state_dict(state["dedup"])
        self.stats = collections.Counter(state["stats"])
        self.unledgered = [ReleaseRecord.from_dict(r) for r in state["unledgered"]]
        self._seen_fallbacks = self.server.pd_fallbacks
        return self


def learned_local_bytes(local_states: dict) -> bytes:
    """Exact encoding of what local bandits learned (the ``local`` section of a snapshot)."""
    return dumps({name: st for name, st in sorted(local_states.items())})
