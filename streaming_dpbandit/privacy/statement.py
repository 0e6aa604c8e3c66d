"""Human-readable privacy statements.

A statement names the privacy unit, the neighbouring relation, the model (joint / central /
local), the guarantee and, for the ``paper`` calibration, the warning that it is not a valid
guarantee. A policy whose non-default calibration carries a different label (for example
DP-LinUCB's ``paper`` calibration, which *is* valid but conservative) passes it as ``label``;
without one, ``calibration="paper"`` keeps :data:`PAPER_LABEL`. It is built from public facts
only (policy configuration and ledger spend).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["PAPER_LABEL", "PrivacyStatement", "per_unit_caveat"]

#: Verbatim label of every ``calibration="paper"`` output (FLIPHAT spec §5.3).
PAPER_LABEL = (
    "for reproducing the paper's figures only; not a valid DP guarantee under the stated bounds"
)


def per_unit_caveat(slices: str = "episodes") -> str:
    """The caveat of an event-level guarantee: a person with several units (rounds) composes
    *sequentially* across the releases or data slices (``slices``) their units reach — parallel
    composition of disjoint slices protects different units, not one person's many — and by
    group privacy within one.

    >>> "sequential composition" in per_unit_caveat()
    True
    """
    return (
        "The guarantee is per privacy unit. A person with several units is protected by group "
        f"privacy within one of the {slices} and by sequential composition across the {slices} "
        "their units fall in (parallel composition protects different people, not one "
        "person's units in different slices): with k_i units in the i-th, about Σ k_i·ε. "
        "Bound the units per person with user-level privacy (user_level; "
        "docs/privacy/user-level.md) for a per-person guarantee."
    )


#: How each noise backend draws (the privacy statement's "Noise:" line).
NOISE_BACKENDS = {
    "secure": "secure backend — exact discrete Laplace/Gaussian noise on a public grid from a "
    "keyed SHAKE-256 stream (docs/privacy/secure-noise.md)",
    "fast": "fast backend — numpy floating-point samplers, whose low-order output bits can leak "
    "(Mironov 2012); for simulation, or where that risk is accepted",
}


@dataclasses.dataclass
class PrivacyStatement:
    """What a policy (or a ledger) guarantees, in words a privacy officer can check.

    Examples
    --------
    >>> st = PrivacyStatement(model="joint", unit="one round (one user's K contexts and reward)",
    ...     neighbouring="replace one round", epsilon=1.0, delta=1e-6, calibration="certified")
    >>> print(st.text().splitlines()[0])
    Guarantee: (ε = 1, δ = 1e-06)-joint differential privacy, certified calibration.

    """

    model: str
    unit: str
    neighbouring: str
    epsilon: float | None
    delta: float | None
    calibration: str
    rho: float | None = None
    scope: str = ""
    caveats: tuple[str, ...] = ()
    label: str | None = None
    noise_backend: str | None = None
    #: which accountant gives (ε, δ): the ledger's accountant of record, when built from one
    accountant: str | None = None

    @property
    def effective_label(self) -> str | None:
        """The calibration's label: ``label``, else :data:`PAPER_LABEL` for ``paper``."""
        if self.label is not None:
            return self.label
        return PAPER_LABEL if self.calibration == "paper" else None

    def text(self) -> str:
        parts = []
        if self.epsilon is not None:
            parts.append(f"ε = {self.epsilon:g}")
        if self.delta is not None:
            parts.append(f"δ = {self.delta:g}")
        if self.rho is not None:
            parts.append(f"ρ = {self.rho:g} (zCDP)")
        guarantee = ", ".join(parts) if parts else "no release yet"
        by = f" (accountant of record: {self.accountant})" if self.accountant else ""
        lines = [
            f"Guarantee: ({guarantee})-{self.model} differential privacy, "
            f"{self.calibration} calibration{by}."
        ]
        label = self.effective_label
        if label == PAPER_LABEL:
            lines.append(f"WARNING: calibration '{self.calibration}' is {PAPER_LABEL}.")
        elif label is not None:
            lines.append(f"Label: calibration '{self.calibration}' is {label}.")
        lines.append(f"Privacy unit: {self.unit}.")
        lines.append(f"Neighbouring datasets: {self.neighbouring}.")
        if self.noise_backend:
            lines.append(f"Noise: {NOISE_BACKENDS.get(self.noise_backend, self.noise_backend)}.")
        if self.scope:
            lines.append(f"Scope: {self.scope}")
        for c in self.caveats:
            lines.append(f"Caveat: {c}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:

        out = dataclasses.asdict(self)
        out["caveats"] = list(self.caveats)
        out["label"] = self.effective_label
        if out["label"] is None:
            del out["label"]
        if out["accountant"] is None:
            del out["accountant"]
        return out
