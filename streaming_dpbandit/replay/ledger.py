"""The privacy ledger of a replay, kept in memory (a dry run of the service's durable ledger).

A policy's ``refit()`` returns the ledger records of its private releases; the service appends
them, durably, before any decision uses them. A replay appends them to this list instead and
composes them with the product's :class:`~streaming_dpbandit.privacy.accountant.Accountant`:
the privacy the policy would have spent on the log. Zero-cost records (releases that are
post-processing of earlier ones, e.g. DP-LinUCB's per-refresh records) are counted, not kept,
so memory does not grow with the number of refreshes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..privacy.accountant import Accountant
from ..privacy.ledger import ReleaseRecord
from ..privacy.statement import PAPER_LABEL

__all__ = ["InMemoryLedger"]


def _costs(record: ReleaseRecord) -> bool:
    return any(c.get("type") != "zero" for c in record.accounting) or record.epsilon > 0


class InMemoryLedger:
    """Collect release records and compose them.

    Examples
    --------
    >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
    >>> led = InMemoryLedger()
    >>> led.append([ReleaseRecord("b/fit/1", "b", "m", "certified", "f", True, 1.0, 1e-6,
    ...     [{"type": "eps_delta", "epsilon": 1.0, "delta": 1e-6}], data_slice="episode:0",
    ...     composition="parallel")])
    >>> s = led.spend(delta=1e-6)
    >>> s["releases"], s["basic_epsilon"], s["dp_valid"]
    (1, 1.0, True)
    """

    def __init__(self) -> None:
        self.records: list[ReleaseRecord] = []
        self.releases = 0

    def append(self, records: Iterable[ReleaseRecord]) -> None:
        for r in records:
            self.releases += 1
            if _costs(r):
                self.records.append(r)

    def noise_backend(self, policy: object) -> str | None:
        """The noise backend the releases drew from (``"fast"``, ``"secure"``; several joined by
        commas), else the policy's own before its first costly release
        (docs/privacy/secure-noise.md)."""
        drawn = sorted({r.noise_backend for r in self.records if r.noise_backend})
        if drawn:
            return ",".join(drawn)
        backend = getattr(policy, "noise_backend_in_force", None)
        return None if backend is None else str(backend)

    def spend(self, delta: float | None = None) -> dict[str, Any]:
        """Composed spend (pure ε, basic (ε, δ), ρ, ε at ``delta`` by the PLD accountant)."""
        if not self.records:
            return {
                "releases": self.releases,
                "costly_releases": 0,
                "basic_epsilon": 0.0,
                "basic_delta": 0.0,
                "pure_epsilon": 0.0,
                "rho": 0.0,
                "epsilon_at_delta": 0.0 if delta else None,
                "target_delta": delta,
                "calibrations": [],
                "dp_valid": True,
                "of_record": {"accountant": "pure", "epsilon": 0.0, "delta": 0.0},
            }
        acc = Accountant(self.records)
        bandits = acc.bandits()
        sp = acc.spend(bandits[0], delta=delta) if len(bandits) == 1 else acc.spend_all(delta)
        out = sp.to_dict()
        out["costly_releases"] = len(self.records)
        out["releases"] = self.releases
        notes = sorted({r.note for r in self.records if r.note})
        if notes:
            out["label"] = "; ".join(notes)
        elif "paper" in sp.calibrations:
            out["label"] = PAPER_LABEL
        return out
