"""The service's hook for ``privacy: local`` bandits (kept apart from the central-model loop).

:class:`~.service.Service` builds one :class:`LocalBandits` and calls it at six clearly marked
points: routing a feedback-topic record that is an ``ldp_report``, refusing raw data addressed
to a local bandit (contexts or rewards: dead-lettered *without* copying the payload), opening
(restore state, append records the ledger misses, publish the current models), snapshots
(their ``local`` section), metrics and the summary. Everything else about the central path is
unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..parsing import first_error, unreadable, validation_reason
from ..schemas import Watermark
from ..transport import Record
from .publisher import ModelStore
from .runtime import LocalBanditRuntime, LocalMetrics, learned_local_bytes
from .schemas import LDPReportMessage, is_ldp_report

if TYPE_CHECKING:
    from ...metrics import ServiceMetrics
    from ...settings import ServiceSettings, TopicsSettings
    from ..state import ReleaseLedger
    from ..transport import Transport

__all__ = ["LocalBandits"]

log = logging.getLogger("streaming_dpbandit.local")


class LocalBandits:
    """Every ``privacy: local`` bandit of one service.

    Parameters
    ----------
    settings
        The service settings.
    transport
        Where published models are sent (topic ``topics.models``).
    topics
        The service's topic names.
    metrics
        The service's :class:`~streaming_dpbandit.metrics.ServiceMetrics`.
    """

    def __init__(
        self,
        settings: ServiceSettings,
        transport: Transport,
        topics: TopicsSettings,
        metrics: ServiceMetrics,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.topics = topics
        self.metrics = metrics
        self.store = ModelStore()
        self.runtimes: dict[str, LocalBanditRuntime] = {}
        self.local_metrics = None
        self.ledger: ReleaseLedger | None = None
        self._ledger_count: dict[str, int] = {}
        self._children: dict[tuple[str, str], Any] = {}  # prometheus Counter children
        self._bounded_seen: dict[str, int] = {}
        for name, b in settings.bandits.items():
            if b.privacy != "local":
                continue
            if self.local_metrics is None:
                self.local_metrics = LocalMetrics(metrics)
            self.runtimes[name] = LocalBanditRuntime(
                name, b, self.fingerprint(b), self.local_metrics
            )
            st = self.runtimes[name].statement
            metrics.calibration.labels(
                name, "ldp-glb", st.calibration, str(st.calibration == "certified").lower()
            ).set(1)
            if b.epsilon_budget is not None:
                metrics.eps_budget.labels(name).set(b.epsilon_budget)

    @staticmethod
    def fingerprint(b) -> str:
        ul = "" if b.user_level is None else "|user_level=" + b.user_level.model_dump_json()
        return b.policy.model_dump_json() + "|" + b.local.model_dump_json() + ul

    def __bool__(self) -> bool:
        return bool(self.runtimes)

    def __contains__(self, name: str) -> bool:
        return name in self.runtimes

    # -- start-up ---------------------------------------------------------------------------
    def load(self, snap: dict, _central_fingerprint=None) -> None:
        """Restore local bandits from a service snapshot."""
        local = snap.get("local", {})
        prints = snap.get("local_fingerprints", {})
        for name, st in local.items():
            rt = self.runtimes.get(name)
            if rt is None:
                raise RuntimeError(
                    f"snapshot has local bandit {name!r} that is not configured as "
                    "privacy=local; refusing to drop its state"
                )
            if prints.get(name) != self.fingerprint(self.settings.bandits[name]):
                raise RuntimeError(
                    f"the configuration of local bandit {name!r} changed since the snapshot; "
                    "restore it, or start a new state directory (or bump local.model_epoch in "
                    "a new state directory)"
                )
            rt.load_state_dict(st)
        for name in self.runtimes:
            if name in snap.get("bandits", {}):
                raise RuntimeError(f"bandit {name!r} was central in the snapshot; now local")

    def open(self, ledger: ReleaseLedger) -> None:
        """Append records the ledger misses, then publish every bandit's current model."""
        self.ledger = ledger
        kafka = self.settings.kafka
        if self.runtimes and kafka is not None and kafka.create_topics:
            from .publisher import ensure_models_topic

            ensure_models_topic(kafka, self.topics.models)
        for rec in ledger.records():
            if rec.bandit_id in self.runtimes:
                self._ledger_count[rec.bandit_id] = self._ledger_count.get(rec.bandit_id, 0) + 1
        for rt in self.runtimes.values():
            self._drain(rt)
            self._send(rt.current())
            self._export_spend(rt)

    # -- records ----------------------------------------------------------------------------
    def claims(self, r: Record) -> bool:
        return bool(self.runtimes) and is_ldp_report(r.value)

    def on_record(self, r: Record, dead: Callable) -> None:
        """One ``ldp_report`` from the feedback topic (partition order)."""
        max_bytes = self.settings.max_message_bytes
        if len(r.value) > max_bytes:
            dead(r, "oversized", f"{len(r.value)} bytes > {max_bytes}")
            return self._count(None, "oversized")
        try:
            msg = LDPReportMessage.model_validate_json(r.value)
        except ValidationError as err:
            reason = validation_reason(err, "invalid_report")
            dead(r, reason, first_error(err))
            return self._count(None, reason)
        except Exception as err:  # unforeseen: no input may stop the loop
            bad = unreadable(err)
            dead(r, bad.reason, bad.detail)
            return self._count(None, bad.reason)
        rt = self.runtimes.get(msg.bandit_id)
        if rt is None:
            reason = (
                "not_a_local_bandit" if msg.bandit_id in self.settings.bandits else "unknown_bandit"
            )
            dead(r, reason, f"bandit {msg.bandit_id!r} takes no LDP reports")
            return self._count(None, reason)
        refused = rt.handle(msg)
        if refused is not None:
            dead(r, refused, f"report for model version {msg.model_version} not used")
        self._count(rt.bandit_id, refused or "absorbed")
        if rt.outbox:
            self._drain(rt)

    def raw_for_local(self, bandit_id: str, r: Record, dead: Callable, msg=None) -> bool:
        """A reward or heartbeat addressed to a local bandit: never used, never copied."""
        if bandit_id not in self.runtimes:
            return False
        if isinstance(msg, Watermark) or b'"watermark"' in r.value:
            self._count(bandit_id, "watermark_ignored")
            return True
        dead(r, "raw_data_for_local_bandit", f"bandit {bandit_id!r} is privacy=local")
        self._count(bandit_id, "raw_data_for_local_bandit")
        return True

    def _count(self, bandit: str | None, outcome: str) -> None:
        if self.local_metrics is None:
            return
        key = (bandit or "unknown", outcome)
        child = self._children.get(key)
        if child is None:  # label lookups cost more than the increment: cache the children
            child = self._children[key] = self.local_metrics.reports.labels(*key)
        child.inc()

    def after_batch(self) -> None:
        """Absorb accepted reports and send what was published."""
        for rt in self.runtimes.values():
            rt.flush()
            if rt.outbox or rt.unledgered:
                self._drain(rt)

    # -- publishing -------------------------------------------------------------------------
    def _drain(self, rt: LocalBanditRuntime) -> None:
        """Ledger first (fsync'd), then the models topic and the HTTP endpoint."""
        if rt.unledgered and self.ledger is not None:
            for rec in rt.unledgered:
                if self.ledger.append(rec):
                    self._ledger_count[rt.bandit_id] = self._ledger_count.get(rt.bandit_id, 0) + 1
            rt.unledgered = []
            self._export_spend(rt)
        for snap in rt.outbox:
            self._send(snap)
            log.info(
                "bandit %s: published model %s version %d (%s phase, %d reports)",
                rt.bandit_id,
                snap.model_id,
                snap.model_version,
                snap.phase,
                snap.reports,
                extra={"bandit": rt.bandit_id, "model_version": snap.model_version},
            )
        rt.outbox = []

    def _send(self, snap) -> None:
        body = snap.to_json()
        self.transport.send(self.topics.models, snap.bandit_id.encode(), body)
        self.store.put(snap.bandit_id, snap.model_id, snap.model_version, body)

    def _export_spend(self, rt: LocalBanditRuntime) -> None:
        m = self.metrics
        n = self._ledger_count.get(rt.bandit_id, 0)
        m.ledger_releases.labels(rt.bandit_id).set(n)
        if n == 0:
            return
        sp = rt.spend()
        cal = sp["calibration"]
        m.eps_spent.labels(rt.bandit_id, cal, "basic").set(sp["epsilon_per_report"])
        m.delta_spent.labels(rt.bandit_id, cal).set(sp["delta_per_report"])
        # the per-report guarantee is the only accountant of a local bandit: its record
        ul = sp.get("user_level")
        if ul is not None:  # per user: the k reports of one device composed
            rec = ul["of_record"]
            m.eps_of_record.labels(rt.bandit_id, cal, rec["accountant"]).set(rec["epsilon"])
            m.delta_of_record.labels(rt.bandit_id, cal, rec["accountant"]).set(rec["delta"])
            return
        m.eps_of_record.labels(rt.bandit_id, cal, "basic").set(sp["epsilon_per_report"])
        m.delta_of_record.labels(rt.bandit_id, cal, "basic").set(sp["delta_per_report"])

    # -- snapshots, metrics, summary ----------------------------------------------------------
    def add_to_snapshot(self, state: dict, _central_fingerprint=None) -> None:
        if not self.runtimes:
            return
        state["local"] = {name: rt.state_dict() for name, rt in self.runtimes.items()}
        state["local_fingerprints"] = {
            name: self.fingerprint(self.settings.bandits[name]) for name in self.runtimes
        }

    def export_metrics(self) -> None:
        for rt in self.runtimes.values():
            rt.export_metrics()
        # user level: reports the (simulated) devices decided but did not send. Only devices
        # know them — a real device's bounded reports never reach the server.
        src = getattr(self.transport, "source", None)
        src = getattr(src, "inner", src)  # a recording wrapper
        bounded = getattr(src, "bounded_by_bandit", None)
        if bounded:
            for name, n in bounded.items():
                done = self._bounded_seen.get(name, 0)
                if n > done:
                    self.metrics.bounded_events.labels(name).inc(n - done)
                    self._bounded_seen[name] = n

    def summary(self) -> dict:
        out = {}
        for name, rt in self.runtimes.items():
            out[name] = {
                "policy": "ldp-glb",
                "variant": rt.spec.variant,
                "setting": rt.spec.setting,
                "model_id": rt.model_id,
                "model_version": rt.server.version,
                "reports_absorbed": rt.server.reports,
                "phase": rt.server.phase,
                "stats": dict(rt.stats),
                "privacy": rt.spend(),
                "statement": rt.statement.text(),
            }
        return out

    def state_bytes(self) -> bytes:
        return learned_local_bytes({n: rt.state_dict() for n, rt in self.runtimes.items()})
