"""Privacy accounting over ledger records.

Three reports, each valid only where it applies (DESIGN §4):

* **pure ε** by exact summation, when every release is pure ε-DP (δ = 0);
  for approximate-DP releases the same summation gives basic composition (Σε, Σδ);
* **zCDP ρ** by summation, when every release has a ρ (Gaussian: Δ²/2σ², pure ε: ε²/2);
* **ε at a stated δ** from privacy-loss distributions composed by Google's ``dp-accounting``
  library (PLD, pessimistic estimate).

The **accountant of record** (:meth:`Spend.of_record`) is the tightest of these valid
guarantees: among pure ε (δ = 0), PLD ε at the target δ, zCDP ρ converted at the target δ
(ε = ρ + 2√(ρ ln 1/δ)) and basic composition (Σε, Σδ), those whose δ does not exceed the target
δ, the smallest ε (ties: the smaller δ, then the order pure, PLD, zCDP, basic). Every table,
summary, metric and statement of the product reports it, with its name.

A ``"zcdp"`` component gets a PLD only when it is marked ``"gaussian": true`` (a continuous
Gaussian mechanism: the Gaussian with Δ/σ = √(2ρ) is then its exact privacy profile). ρ-zCDP in
general does not imply that profile (randomized response at ε = 1, ρ = 1/2, has δ(0) = 0.46; the
Gaussian of that ρ 0.38), so an unmarked ``zcdp`` component — including every one in a ledger
written before the mark existed — is accounted like a discrete Gaussian below: ρ only, no PLD ε,
CKS conversion (CKS Prop. 12/Cor. 13 holds for any mechanism with that Rényi bound).

Discrete Gaussian components (``"discrete_gaussian"``, or ``"zcdp"`` flagged ``renyi_only``:
the secure noise backend's Gram releases)
have no PLD here (their privacy loss is not the continuous Gaussian's, and dp-accounting's
discrete-Gaussian PLD enumerates the support, ~2³⁴ wide at the secure grid). They are accounted
by their Rényi bound alone: ρ = count·Δ²/2σ² (CKS Prop. 5: the discrete Gaussian's Rényi
divergences at integer shifts are the continuous one's), and a ledger holding one gets no PLD ε;
its zCDP guarantee is converted with Canonne–Kamath–Steinke's tighter formula
(:func:`~.zcdp.epsilon_from_rho_cks`), which is what the secure calibration targets.

Composition structure. Records of one bandit with ``composition="parallel"`` and distinct
``data_slice`` labels used disjoint data, a property the policy proves (FLIPHAT's forgetting:
every row enters exactly one fit, FLIPHAT spec §4). One person's data then reaches the sequential
records plus the records of at most one slice, so the spend is the *maximum over slices* of
(sequential ∘ slice). Nothing else is composed in parallel. Different bandits are composed
sequentially (a person may appear in several).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from .ledger import ReleaseRecord

__all__ = ["ACCOUNTANT_NAMES", "Accountant", "Spend", "format_of_record", "load_pld"]

#: Display names of the accountants (``Spend.of_record()["accountant"]``).
ACCOUNTANT_NAMES = {
    "pure": "pure ε, exact sum",
    "pld": "PLD",
    "zcdp": "zCDP",
    "basic": "basic composition",
}

PLD_DISCRETIZATION = 1e-3


def format_of_record(rec: dict[str, Any], digits: int = 4) -> str:
    """One-line text of an accountant-of-record guarantee (:meth:`Spend.of_record`).

    >>> format_of_record({"accountant": "pld", "epsilon": 1.0000019, "delta": 0.1})
    'ε=1, δ=0.1 (PLD)'
    >>> format_of_record({"accountant": "pure", "epsilon": 2.5, "delta": 0.0})
    'ε=2.5, δ=0 (pure ε, exact sum)'
    """
    name = ACCOUNTANT_NAMES.get(rec["accountant"], rec["accountant"])
    return f"ε={rec['epsilon']:.{digits}g}, δ={rec['delta']:.{min(digits, 3)}g} ({name})"


def load_pld() -> None:
    """Import ``dp-accounting``'s PLD module now. The import takes about 0.75 s (it pulls in
    SciPy); a service calls this when it starts, so that its first release does not stall the
    decisions for that long.

    >>> load_pld()
    """
    # dp-accounting ships no type information (no py.typed)
    from dp_accounting.pld import (  # type: ignore[import-untyped]  # noqa: F401
        common,
        privacy_loss_distribution,
    )


def _epsilon_without_convolution(records: list[ReleaseRecord], delta: float) -> float | None:
    """ε at ``delta`` of the PLD of ``records`` (:meth:`Accountant._pld`), when computing it
    needs no convolution, else None (ask dp-accounting).

    Two cases: no component but ``zero`` ones (the identity: ε = 0), and one (ε₀, δ₀)
    component (``eps_delta``, count 1, 0 < ε₀ ≤ 30) with δ₀ = ``delta`` — FLIPHAT's ledgers,
    whose every episode is one such slice, so that ``dpbandit simulate`` does not import
    dp-accounting (≈ 1 CPU s, with SciPy's signal and stats modules) to print its table.

    dp-accounting's pessimistic PLD of an (ε₀, δ₀)-DP mechanism (``from_privacy_parameters``)
    has mass δ₀ at +∞, p = (1 − δ₀)/(1 + e^{−ε₀}) at the loss aΔ (a = ⌈ε₀/Δ⌉, Δ =
    ``PLD_DISCRETIZATION``) and the rest at ⌈−ε₀/Δ⌉Δ. Its search for the smallest ε whose
    hockey-stick divergence is at most δ = δ₀ adds the upper point (masses δ₀ + p above ε and
    e^{−aΔ}·p below), finds that ε lies above the lower point, and returns
    log(((δ₀ + p) − δ₀) / (e^{−aΔ}·p)) — aΔ up to rounding. This function repeats those
    floating-point operations in that order, so it returns the library's value to the last bit
    (``tests/privacy/test_accountant_without_convolution.py`` compares them).

    >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
    >>> rec = ReleaseRecord("b/fit/1", "b", "n-iht+peeling", "certified", "certified-v1", True,
    ...                     epsilon=0.37, delta=0.01, data_slice="episode:1",
    ...                     accounting=[{"type": "eps_delta", "epsilon": 0.37, "delta": 0.01}])
    >>> _epsilon_without_convolution([rec], 0.01)
    0.37000000000000005
    >>> _epsilon_without_convolution([rec], 0.02) is None  # another δ: the library's search
    True
    """
    comps = [
        c
        for r in records
        for c in r.accounting
        if not (c["type"] == "zero" or int(c.get("count", 1)) == 0)
    ]
    if not comps:
        return 0  # the identity's search ends at its one point: the int 0, as the library's
    if len(comps) > 1:
        return None
    c = comps[0]
    eps, d0 = c.get("epsilon"), c.get("delta")
    if (
        c["type"] != "eps_delta"
        or int(c.get("count", 1)) != 1
        or c.get("renyi_only")
        or not isinstance(eps, float | int)
        or not isinstance(d0, float | int)
        or isinstance(eps, bool)
        or not 0 < eps <= 30
        or not 0 < d0 < 1
        or d0 != delta
    ):
        return None
    a = math.ceil(eps / PLD_DISCRETIZATION)
    p = (1 - d0) / (1 + math.exp(-eps))
    return math.log(((d0 + p) - d0) / (math.exp(-(a * PLD_DISCRETIZATION)) * p))


class _NoPLD(Exception):
    """A component whose privacy loss distribution is not available (Rényi bound only)."""


def _renyi_only(c: dict[str, Any]) -> bool:
    """Components with a Rényi (zCDP) bound but no valid PLD here: discrete Gaussians (a type,
    or a ``zcdp`` component flagged ``renyi_only``) and every ``zcdp`` component not marked
    ``"gaussian": true`` — ρ-zCDP alone does not imply the Gaussian's privacy profile (an
    ε-DP mechanism converted to ρ = ε²/2 has a larger δ(0) than the Gaussian of that ρ).
    Old ledgers' unmarked ``zcdp`` records are therefore accounted without PLD."""
    t = c["type"]
    if t == "discrete_gaussian" or c.get("renyi_only"):
        return True
    return t == "zcdp" and c.get("gaussian") is not True


def _component_pure(c: dict[str, Any]) -> float:
    t = c["type"]
    n = int(c.get("count", 1))
    if t == "laplace":
        return float(n * c["sensitivity"] / c["scale"])
    if t == "pure":
        return float(n * c["epsilon"])
    if t == "eps_delta":
        return float(n * c["epsilon"]) if c["delta"] == 0 else math.inf
    if t == "zero":
        return 0.0
    return math.inf


def _component_rho(c: dict[str, Any]) -> float | None:
    """zCDP ρ of a component: Δ²/2σ² for Gaussian, ε²/2 per pure ε-DP step, else None."""
    t = c["type"]
    n = int(c.get("count", 1))
    if t in ("gaussian", "discrete_gaussian"):
        return float(n * c["sensitivity"] ** 2 / (2 * c["sigma"] ** 2))
    if t == "zcdp":
        return float(n * c["rho"])
    if t == "zero" or n == 0:
        return 0.0
    per_step = _component_pure(c) / n
    return None if math.isinf(per_step) else n * per_step**2 / 2


def _component_pld(c: dict[str, Any]) -> Any:  # a PrivacyLossDistribution (untyped library)
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    t = c["type"]
    n = int(c.get("count", 1))
    if _renyi_only(c):
        raise _NoPLD
    if t == "zero" or n == 0:
        return pld.identity(value_discretization_interval=PLD_DISCRETIZATION)
    if t == "laplace":
        one = pld.from_laplace_mechanism(
            c["scale"],
            sensitivity=c["sensitivity"],
            value_discretization_interval=PLD_DISCRETIZATION,
        )
    elif t == "gaussian":
        one = pld.from_gaussian_mechanism(
            c["sigma"],
            sensitivity=c["sensitivity"],
            value_discretization_interval=PLD_DISCRETIZATION,
        )
    elif t in ("eps_delta", "pure"):
        params = common.DifferentialPrivacyParameters(c["epsilon"], c.get("delta", 0.0))
        one = pld.from_privacy_parameters(params, value_discretization_interval=PLD_DISCRETIZATION)
    elif t == "zcdp":
        # Only a component marked "gaussian" gets here (_renyi_only): a continuous Gaussian
        # mechanism of cost ρ has exactly the profile of a Gaussian with Δ/σ = √(2ρ).
        one = pld.from_gaussian_mechanism(
            1.0 / math.sqrt(2 * c["rho"]), value_discretization_interval=PLD_DISCRETIZATION
        )
    else:
        raise ValueError(f"unknown accounting component type {t!r}")
    return one if n == 1 else one.self_compose(n)


@dataclasses.dataclass
class Spend:
    """Privacy spent by one bandit (or by all, composed)."""

    bandit_id: str
    releases: int
    pure_epsilon: float | None
    basic_epsilon: float
    basic_delta: float
    rho: float | None
    epsilon_at_delta: float | None
    target_delta: float | None
    calibrations: list[str]
    dp_valid: bool
    slices: int
    #: some release has a Rényi bound only (discrete Gaussian, or a zcdp component not marked
    #: gaussian): no PLD ε; zCDP by CKS
    rdp_only: bool = False

    def candidates(self) -> list[dict[str, Any]]:
        """Every valid (ε, δ) guarantee the accountants give, named."""
        out: list[dict[str, Any]] = []
        if self.pure_epsilon is not None:
            out.append({"accountant": "pure", "epsilon": self.pure_epsilon, "delta": 0.0})
        target = self.target_delta
        if target is not None and self.epsilon_at_delta is not None:
            out.append({"accountant": "pld", "epsilon": self.epsilon_at_delta, "delta": target})
        if target is not None and 0 < target < 1 and self.rho is not None:
            from .zcdp import epsilon_from_rho, epsilon_from_rho_cks

            conv = epsilon_from_rho_cks if self.rdp_only else epsilon_from_rho
            eps = conv(self.rho, target)
            out.append({"accountant": "zcdp", "epsilon": eps, "delta": target})
        out.append(
            {"accountant": "basic", "epsilon": self.basic_epsilon, "delta": self.basic_delta}
        )
        return out

    def of_record(self) -> dict[str, Any]:
        """The accountant of record: the tightest valid guarantee, named.

        Among the guarantees of :meth:`candidates` whose δ is at most the target δ (all of
        them when no δ is targeted), the smallest ε; ties go to the smaller δ.

        >>> sp = Spend("b", 3, None, 3.0, 3e-6, 0.03, 1.2, 1e-6, ["certified"], True, 0)
        >>> sp.of_record()
        {'accountant': 'pld', 'epsilon': 1.2, 'delta': 1e-06}
        """
        cands = self.candidates()
        if self.target_delta is not None:
            ok = [c for c in cands if c["delta"] <= self.target_delta]
            cands = ok or cands
        order = {"pure": 0, "pld": 1, "zcdp": 2, "basic": 3}
        return dict(min(cands, key=lambda c: (c["epsilon"], c["delta"], order[c["accountant"]])))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["of_record"] = self.of_record()
        return out


class Accountant:
    """Compose the releases of a ledger.

    Parameters
    ----------
    records
        Ledger records (any iterable of :class:`ReleaseRecord`).

    Examples
    --------
    >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
    >>> recs = [ReleaseRecord(f"b/fit/{k}", "b", "n-iht+peeling", "certified", "certified-v1",
    ...                       True, epsilon=1.0, delta=0.01,
    ...                       accounting=[{"type": "eps_delta", "epsilon": 1.0, "delta": 0.01}],
    ...                       data_slice=f"episode:{k}", composition="parallel")
    ...         for k in range(1, 6)]
    >>> spend = Accountant(recs).spend("b", delta=0.01)
    >>> spend.basic_epsilon, spend.basic_delta, spend.releases, spend.slices
    (1.0, 0.01, 5, 5)
    >>> round(spend.epsilon_at_delta, 3)
    1.0

    """

    def __init__(self, records: Iterable[ReleaseRecord]):
        self.records = list(records)

    def bandits(self) -> list[str]:
        return sorted({r.bandit_id for r in self.records})

    def _groups(
        self, bandit_id: str | None
    ) -> tuple[
        list[ReleaseRecord], list[ReleaseRecord], dict[tuple[str, str], list[ReleaseRecord]]
    ]:
        recs = [r for r in self.records if bandit_id is None or r.bandit_id == bandit_id]
        seq: list[ReleaseRecord] = []
        slices: dict[tuple[str, str], list[ReleaseRecord]] = defaultdict(list)
        for r in recs:
            if r.composition == "parallel" and bandit_id is not None:
                slices[(r.bandit_id, r.data_slice)].append(r)
            else:
                seq.append(r)
        if bandit_id is None:
            # Across bandits: per bandit, parallel slices collapse to their worst slice; the
            # bandits then compose sequentially. Handled in spend_all().
            pass
        return recs, seq, slices

    @staticmethod
    def _sum_pure(records: list[ReleaseRecord]) -> float:
        return sum(_component_pure(c) for r in records for c in r.accounting)

    @staticmethod
    def _sum_basic(records: list[ReleaseRecord]) -> tuple[float, float]:
        return sum(r.epsilon for r in records), sum(r.delta for r in records)

    @staticmethod
    def _sum_rho(records: list[ReleaseRecord]) -> float | None:
        total = 0.0
        for r in records:
            if r.rho is not None:
                total += r.rho
                continue
            for c in r.accounting:
                rho = _component_rho(c)
                if rho is None:
                    return None
                total += rho
        return total

    @staticmethod
    def _pld(records: list[ReleaseRecord]) -> Any:  # a PrivacyLossDistribution (untyped library)
        from dp_accounting.pld import privacy_loss_distribution as pld

        out = pld.identity(value_discretization_interval=PLD_DISCRETIZATION)
        for r in records:
            for c in r.accounting:
                out = out.compose(_component_pld(c))
        return out

    @classmethod
    def _epsilon_at(cls, records: list[ReleaseRecord], delta: float) -> float:
        """ε at ``delta`` of the PLD of ``records``."""
        eps = _epsilon_without_convolution(records, delta)
        return cls._pld(records).get_epsilon_for_delta(delta) if eps is None else eps

    def spend(self, bandit_id: str, delta: float | None = None) -> Spend:
        """Spend of one bandit; ``delta`` asks for ε at that δ from the PLD accountant."""
        recs, seq, slices = self._groups(bandit_id)
        groups = list(slices.values()) or [[]]

        def worst(fn: Callable[[list[ReleaseRecord]], float | None]) -> float | None:
            vals = [fn(seq + g) for g in groups]
            known = [v for v in vals if v is not None]
            if len(known) < len(vals):
                return None
            return max(known) if known else fn(seq)

        pure = worst(self._sum_pure)
        basic = [self._sum_basic(seq + g) for g in groups]
        basic_eps = max(b[0] for b in basic)
        basic_delta = max(b[1] for b in basic)
        rho = worst(self._sum_rho)
        eps_at = None
        rdp_only = any(_renyi_only(c) for r in recs for c in r.accounting)
        if delta is not None and recs and not rdp_only:
            eps_at = max(self._epsilon_at(seq + g, delta) for g in groups)
        elif delta is not None and not rdp_only:
            eps_at = 0.0
        return Spend(
            bandit_id=bandit_id,
            releases=len(recs),
            pure_epsilon=None if pure is None or math.isinf(pure) else pure,
            basic_epsilon=basic_eps,
            basic_delta=basic_delta,
            rho=rho,
            epsilon_at_delta=eps_at,
            target_delta=delta,
            calibrations=sorted({r.calibration for r in recs}),
            dp_valid=all(r.dp_valid for r in recs),
            slices=len(slices),
            rdp_only=rdp_only,
        )

    def spend_all(self, delta: float | None = None) -> Spend:
        """All bandits composed sequentially (a person may contribute to several bandits)."""
        per = [self.spend(b, delta) for b in self.bandits()]
        if not per:
            return Spend("*", 0, 0.0, 0.0, 0.0, 0.0, 0.0 if delta else None, delta, [], True, 0)
        pures = [p.pure_epsilon for p in per if p.pure_epsilon is not None]
        pure = None if len(pures) < len(per) else sum(pures)
        rhos = [p.rho for p in per if p.rho is not None]
        rho = None if len(rhos) < len(per) else sum(rhos)

        eps_at = None
        rdp_only = any(p.rdp_only for p in per)
        if delta is not None and not rdp_only:
            if len(per) == 1:
                eps_at = per[0].epsilon_at_delta
            else:
                # Compose the worst slice of each bandit with PLDs.
                from dp_accounting.pld import privacy_loss_distribution as pld

                total = pld.identity(value_discretization_interval=PLD_DISCRETIZATION)
                for b in self.bandits():
                    _, seq, slices = self._groups(b)
                    groups = list(slices.values()) or [[]]
                    best = max(
                        groups, key=lambda g: self._pld(seq + g).get_epsilon_for_delta(delta)
                    )
                    total = total.compose(self._pld(seq + best))
                eps_at = total.get_epsilon_for_delta(delta)
        return Spend(
            bandit_id="*",
            releases=sum(p.releases for p in per),
            pure_epsilon=pure,
            basic_epsilon=sum(p.basic_epsilon for p in per),
            basic_delta=sum(p.basic_delta for p in per),
            rho=rho,
            epsilon_at_delta=eps_at,
            target_delta=delta,
            calibrations=sorted({c for p in per for c in p.calibrations}),
            dp_valid=all(p.dp_valid for p in per),
            slices=sum(p.slices for p in per),
            rdp_only=rdp_only,
        )
