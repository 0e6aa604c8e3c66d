"""The privacy-spend gauges of a service's central bandits, from its ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..privacy.accountant import Accountant
from ..privacy.user_level import user_level_of_records

if TYPE_CHECKING:
    from ..metrics import ServiceMetrics

__all__ = ["SpendGauges"]


class SpendGauges:
    """Sets ``dpbandit_epsilon_spent`` and friends from the ledger's records: every candidate
    accountant, and the accountant of record (whose label set is replaced when it changes).
    For a ``user_level`` bandit they are its whole-run guarantee per user
    (:func:`~streaming_dpbandit.privacy.user_level.user_level_of_records`)."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics
        self.record_labels: dict[str, tuple[str, str, str]] = {}

    def export(self, records, bandits) -> None:
        m = self.metrics
        acc = Accountant(records)
        for name, rt in bandits.items():
            recs = [r for r in records if r.bandit_id == name]
            m.ledger_releases.labels(name).set(len(recs))
            if not recs:
                continue
            ul = user_level_of_records(recs, name)
            if ul is not None:  # a user_level bandit: the whole-run guarantee per user
                sp = ul.spend
            else:
                delta = getattr(rt.policy, "delta", None)
                sp = acc.spend(name, delta=delta if delta else None)
            calib = ",".join(sp.calibrations)
            for cand in sp.candidates():  # pure, pld, zcdp (at the policy's δ), basic
                m.eps_spent.labels(name, calib, cand["accountant"]).set(cand["epsilon"])
            rec = sp.of_record()
            labels = (name, calib, rec["accountant"])
            old = self.record_labels.get(name)
            if old is not None and old != labels:  # the accountant of record changed
                m.eps_of_record.remove(*old)
                m.delta_of_record.remove(*old)
            self.record_labels[name] = labels
            m.eps_of_record.labels(*labels).set(rec["epsilon"])
            m.delta_of_record.labels(*labels).set(rec["delta"])
            m.delta_spent.labels(name, calib).set(sp.basic_delta)
            if sp.rho is not None:
                m.rho_spent.labels(name).set(sp.rho)
