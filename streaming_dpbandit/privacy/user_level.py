"""User-level accounting: group the ledger's releases by k and compose a user's releases.

Derivation: ``docs/privacy/user-level.md``. With contribution bounding
(:class:`~streaming_dpbandit.privacy.user_bound.UserContributionBound`), two streams that differ
in one user's events differ in at most k admitted rows of each window (data slice) and in at
most E windows. Each accounting component of a release is turned into its guarantee for k rows
(:func:`group_component`):

* ``laplace`` / ``gaussian``: sensitivity k·Δ (triangle inequality over the k single-row
  changes; exact for Laplace = group privacy kε, and the ℓ2 bound of k rows for Gaussian);
* ``pure``: kε; ``zcdp``: k²ρ (Bun & Steinke 2016, Prop. 1.9);
* ``eps_delta`` with δ > 0: (kε, k·e^{(k−1)ε}·δ) (group privacy; Vadhan 2017, Lemma 2.2).

Parallel composition over episodes no longer holds for a user: the user's up-to-E slices
compose **sequentially** (with the sequential records, at group size k·E: a user has at most k
rows in each of at most E windows). The accountants are the product's own
(:class:`~streaming_dpbandit.privacy.accountant.Accountant`: pure sum, PLD, zCDP, basic; the
accountant of record is the tightest valid one).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

from .accountant import Accountant, Spend, format_of_record
from .ledger import ReleaseRecord

__all__ = [
    "UserLevelSpend",
    "calibrate_for_group",
    "group_component",
    "group_record",
    "user_level_of_records",
    "user_level_spend",
]


def group_component(c: dict[str, Any], k: int) -> dict[str, Any]:
    """One accounting component's guarantee for neighbours that differ in k rows.

    >>> group_component({"type": "laplace", "sensitivity": 1.0, "scale": 2.0}, 3)["sensitivity"]
    3.0
    >>> group_component({"type": "zcdp", "rho": 0.01, "count": 4}, 5)["rho"]
    0.25
    >>> dg = {"type": "discrete_gaussian", "sensitivity": 2.0, "sigma": 9.0}
    >>> group_component(dg, 3)["sensitivity"]
    6.0
    >>> g = group_component({"type": "eps_delta", "epsilon": 0.5, "delta": 1e-6}, 2)
    >>> g["epsilon"], round(g["delta"] / 1e-6, 4)   # (kε, k e^{(k-1)ε} δ)
    (1.0, 3.2974)
    """
    if int(k) != k or k < 1:
        raise ValueError(f"group size must be an integer ≥ 1, got {k!r}")
    k = int(k)
    out = dict(c)
    if k == 1:
        return out
    t = c["type"]
    if t in ("laplace", "gaussian", "discrete_gaussian"):
        # k rows move the release by at most k times one row's bound (ℓ1 / ℓ2); a discrete
        # Gaussian's Rényi bound holds for any integer shift, its rounding margin included
        out["sensitivity"] = k * float(c["sensitivity"])
    elif t == "pure":
        out["epsilon"] = k * float(c["epsilon"])
    elif t == "zcdp":
        out["rho"] = k * k * float(c["rho"])
    elif t == "eps_delta":
        eps, dl = float(c["epsilon"]), float(c.get("delta", 0.0))
        out["epsilon"] = k * eps
        out["delta"] = 0.0 if dl == 0 else min(1.0, k * math.exp((k - 1) * eps) * dl)
    elif t != "zero":
        raise ValueError(f"no group-privacy rule for accounting component type {t!r}")
    out["group_size"] = k
    return out


def group_record(rec: ReleaseRecord, k: int) -> ReleaseRecord:
    """A copy of ``rec`` whose accounting holds for k rows of one user, composed sequentially.

    Its ``epsilon``/``delta`` are the basic (group-privacy) conversion of the record's own
    (ε, δ); ``rho`` scales by k².
    """
    if rec.privacy_model == "local":
        return _local_group_record(rec, k)
    comps = [group_component(c, k) for c in rec.accounting]
    eps, dl = float(rec.epsilon), float(rec.delta)
    g_delta = 0.0 if dl == 0 else min(1.0, k * math.exp((k - 1) * eps) * dl)
    return dataclasses.replace(
        rec,
        accounting=comps,
        epsilon=k * eps,
        delta=g_delta,
        rho=None if rec.rho is None else k * k * float(rec.rho),
        composition="sequential",
    )


def _local_group_record(rec: ReleaseRecord, n: int) -> ReleaseRecord:
    """A local-DP record's guarantee for n reports of one user (docs/privacy/user-level-ldp.md).

    Each report is randomized independently on the device, so a user's n reports *compose*
    (the report mechanism n times: ``count`` × n), they are not n rows of one release (no
    k-fold sensitivity). The exact per-report accounting (``params["report_accounting"]``: pure
    ε for the ℓ2 ball, the whitened Gaussian for OLS reports) is used when the record has it;
    the record's own (ε, δ) composes by basic composition (nε, nδ).
    """
    comps = rec.params.get("report_accounting") or rec.accounting
    return dataclasses.replace(
        rec,
        accounting=[{**c, "count": int(c.get("count", 1)) * int(n), "reports": n} for c in comps],
        epsilon=n * float(rec.epsilon),
        delta=min(1.0, n * float(rec.delta)),
        rho=None if rec.rho is None else n * float(rec.rho),
        composition="sequential",
    )


@dataclasses.dataclass
class UserLevelSpend:
    """The whole-run user-level guarantee of one bandit.

    ``spend`` holds the accountants' results for the worst user (k rows in each of the
    ``releases_per_user`` slices they can reach, plus k·E rows in every sequential record).
    """

    bandit_id: str
    max_contributions_per_user: int
    max_releases_per_user: int | None
    releases_per_user: int
    slices: int
    spend: Spend
    pld_exact: bool
    #: local DP: the counts are reports a user's device sends, per window of
    #: ``window_rounds`` rounds (at most E windows), or in one window (the run)
    local: bool = False
    window_rounds: int | None = None

    def of_record(self) -> dict[str, Any]:
        return self.spend.of_record()

    def statement(self) -> str:
        """One line a privacy officer can sign: per user k events/release, E releases, (ε, δ).

        >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
        >>> recs = [ReleaseRecord(f"b/fit/{i}", "b", "m", "certified", "v1", True, epsilon=0.5,
        ...          delta=0.0, accounting=[{"type": "pure", "epsilon": 0.5}],
        ...          data_slice=f"episode:{i}", composition="parallel") for i in range(4)]
        >>> print(user_level_spend(recs, "b", k=2, max_releases=3).statement())
        ... # doctest: +NORMALIZE_WHITESPACE
        per user: at most 2 events per release, at most 3 releases,
        (ε=3, δ=0 (pure ε, exact sum)) in total
        """
        if self.local:
            k = self.max_contributions_per_user
            sent = f"at most {k} report{'s' if k != 1 else ''} sent by their device"
            where = (
                "over the run"
                if self.window_rounds is None
                else f"per window of {self.window_rounds} rounds, at most "
                f"{self.max_releases_per_user} windows"
            )
            return (
                f"per user: {sent} {where} (local DP), "
                f"({format_of_record(self.of_record())}) in total"
            )
        e = self.max_releases_per_user
        e_txt = (
            f"at most {e} releases"
            if e is not None
            else f"{self.releases_per_user} release{'s' if self.releases_per_user != 1 else ''} "
            "so far (no cap)"
        )
        return (
            f"per user: at most {self.max_contributions_per_user} "
            f"event{'s' if self.max_contributions_per_user != 1 else ''} per release, {e_txt}, "
            f"({format_of_record(self.of_record())}) in total"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bandit_id": self.bandit_id,
            "max_contributions_per_user": self.max_contributions_per_user,
            "max_releases_per_user": self.max_releases_per_user,
            "releases_per_user": self.releases_per_user,
            "slices": self.slices,
            "pld_exact": self.pld_exact,
            **({"privacy_model": "local"} if self.local else {}),
            **({"window_rounds": self.window_rounds} if self.window_rounds is not None else {}),
            "of_record": self.of_record(),
            "statement": self.statement(),
            "spend": self.spend.to_dict(),
        }


def _signature(recs: list[ReleaseRecord]) -> str:
    return json.dumps([r.accounting for r in recs], sort_keys=True, default=str)


def user_level_spend(
    records: Iterable[ReleaseRecord],
    bandit_id: str,
    k: int,
    max_releases: int | None = None,
    delta: float | None = None,
    windows: int | None = None,
) -> UserLevelSpend:
    """Whole-run user-level spend of one bandit from its (event-level) ledger records.

    Parameters
    ----------
    records
        The bandit's ledger records, as the policy wrote them (event-level accounting).
    k
        ``max_contributions_per_user``.
    max_releases
        ``max_releases_per_user`` (E); ``None``: a user may reach every slice.
    delta
        Target δ for the PLD / zCDP accountants.
    windows
        Number of bounding windows so far (for the sequential records' group size k·min(E, W));
        default: the number of parallel slices, at least 1.

    The parallel slices a user reaches: min(E, #slices). They compose sequentially. When fewer
    than all slices are reachable and the slices' accounting differs, which E slices are worst
    is not defined for PLDs: the PLD accountant is then left out (``pld_exact=False``) and the
    pure/zCDP/basic accountants sum the E largest per-slice values (valid upper bounds).

    >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
    >>> recs = [ReleaseRecord(f"b/fit/{i}", "b", "m", "certified", "v1", True, epsilon=1.0,
    ...          delta=0.0, accounting=[{"type": "laplace", "sensitivity": 1.0, "scale": 1.0}],
    ...          data_slice=f"episode:{i}", composition="parallel") for i in range(10)]
    >>> sp = user_level_spend(recs, "b", k=2, max_releases=3, delta=1e-6)
    >>> sp.releases_per_user, sp.spend.pure_epsilon      # 3 slices × (2 · ε = 1)
    (3, 6.0)
    """
    recs = [r for r in records if r.bandit_id == bandit_id]
    if recs and all(r.privacy_model == "local" for r in recs):
        return _local_user_level_spend(recs, bandit_id, k, max_releases, delta)
    seq = [r for r in recs if r.composition != "parallel"]
    slices: dict[str, list[ReleaseRecord]] = {}
    for r in recs:
        if r.composition == "parallel":
            slices.setdefault(r.data_slice, []).append(r)
    n_slices = len(slices)
    reach = n_slices if max_releases is None else min(int(max_releases), n_slices)
    w = max(1, n_slices) if windows is None else max(1, int(windows))
    group_seq = int(k) * (w if max_releases is None else min(int(max_releases), w))
    seq_g = [group_record(r, group_seq) for r in seq]
    slice_g = {s: [group_record(r, int(k)) for r in rs] for s, rs in slices.items()}
    same = len({_signature(rs) for rs in slices.values()}) <= 1
    if reach == n_slices or same:
        chosen = [r for rs in list(slice_g.values())[:reach] for r in rs]
        sp = Accountant(seq_g + chosen).spend(bandit_id, delta=delta)
        sp.slices = n_slices
        pld_exact = True
    else:
        per = {s: Accountant(rs).spend(bandit_id, delta=None) for s, rs in slice_g.items()}
        base = Accountant(seq_g).spend(bandit_id, delta=None)

        @overload
        def top(vals: Sequence[float]) -> float: ...
        @overload
        def top(vals: Sequence[float | None]) -> float | None: ...
        def top(vals: Sequence[float | None]) -> float | None:
            known = [v for v in vals if v is not None]
            if len(known) < len(vals):
                return None
            return sum(sorted(known, reverse=True)[:reach])

        pure = top([p.pure_epsilon for p in per.values()])
        rho = top([p.rho for p in per.values()])
        sp = Spend(
            bandit_id=bandit_id,
            releases=len(recs),
            pure_epsilon=None
            if pure is None or base.pure_epsilon is None
            else base.pure_epsilon + pure,
            basic_epsilon=base.basic_epsilon + top([p.basic_epsilon for p in per.values()]),
            basic_delta=base.basic_delta + top([p.basic_delta for p in per.values()]),
            rho=None if rho is None or base.rho is None else base.rho + rho,
            epsilon_at_delta=None,
            target_delta=delta,
            calibrations=sorted({r.calibration for r in recs}),
            dp_valid=all(r.dp_valid for r in recs),
            slices=n_slices,
        )
        pld_exact = False
    return UserLevelSpend(
        bandit_id=bandit_id,
        max_contributions_per_user=int(k),
        max_releases_per_user=None if max_releases is None else int(max_releases),
        releases_per_user=reach,
        slices=n_slices,
        spend=sp,
        pld_exact=pld_exact,
    )


def _local_user_level_spend(
    recs: list[ReleaseRecord], bandit_id: str, k: int, max_releases: int | None, delta: float | None
) -> UserLevelSpend:
    """Local-DP bandits: the user's device sends at most k reports per window — the whole run,
    or windows of ``window_rounds`` rounds (then at most E of them; the bound the records carry)
    — so a user's whole-run loss is k·R reports composed (R = 1, or E), of the costliest report
    any record describes (records differ only after a configuration change). The records'
    report ranges are not windows: a user's reports may fall in any of them."""
    worst = max(
        recs, key=lambda r: (Accountant([r]).spend(bandit_id).basic_epsilon, float(r.delta))
    )
    bounds = [r.user_level for r in recs if r.user_level]
    window = bounds[-1].get("window_rounds") if bounds else None
    if window is not None and max_releases is None:
        raise ValueError("windowed local user-level bounds need max_releases_per_user")
    reach = 1 if window is None else int(max_releases or 1)
    grouped = _local_group_record(dataclasses.replace(worst, data_slice="run"), int(k) * reach)
    sp = Accountant([grouped]).spend(bandit_id, delta=delta)
    sp.releases = len(recs)
    return UserLevelSpend(
        bandit_id=bandit_id,
        max_contributions_per_user=int(k),
        max_releases_per_user=None if max_releases is None else int(max_releases),
        releases_per_user=reach,
        slices=reach,
        spend=sp,
        pld_exact=True,
        local=True,
        window_rounds=None if window is None else int(window),
    )


def calibrate_for_group(
    accounting_of: Callable[[float], Iterable[dict[str, Any]]],
    k: int,
    epsilon: float,
    delta: float,
    lo: float = 1e-4,
    iters: int = 40,
) -> float:
    """The event-level ε' at which to configure a mechanism so that k rows cost ≤ ``epsilon``.

    ``accounting_of(eps)`` returns the event-level accounting components of one release of the
    mechanism configured at ``eps`` (at the same ``delta``). Bisection on ε' ∈ [lo, epsilon]
    (the group guarantee is increasing in ε'); the returned ε' satisfies the target (the
    accountant of record of the k-grouped components is ≤ ``epsilon`` at ``delta``).

    >>> lap = lambda e: [{"type": "laplace", "sensitivity": 1.0, "scale": 1.0 / e}]
    >>> round(calibrate_for_group(lap, 4, 1.0, 1e-6), 4)   # pure ε: exactly ε/k
    0.25
    """

    def cost(eps: float) -> float:
        comps = [group_component(c, k) for c in accounting_of(eps)]
        # the record's own (ε, δ) is unknown here: basic composition must not apply
        rec = ReleaseRecord(
            "g", "g", "group", "certified", "", True, epsilon=math.inf, delta=1.0, accounting=comps
        )
        sp = Accountant([rec]).spend("g", delta=delta)
        ok = [c for c in sp.candidates() if c["delta"] <= delta + 1e-15]
        return min(c["epsilon"] for c in ok) if ok else math.inf

    if k == 1:
        return float(epsilon)
    a, b = lo, float(epsilon)
    if cost(a) > epsilon:
        raise ValueError(f"even ε' = {lo} costs more than ε = {epsilon} for groups of {k}")
    for _ in range(iters):
        m = math.sqrt(a * b)
        if cost(m) <= epsilon:
            a = m
        else:
            b = m
    return a


def user_level_of_records(
    records: Iterable[ReleaseRecord], bandit_id: str, delta: float | None = None
) -> UserLevelSpend | None:
    """The whole-run user-level guarantee of a bandit from its ledger, or ``None`` when its
    releases are event level (no record carries ``user_level``).

    The bound (k, E) is the one the records were admitted under (their ``user_level``;
    a bandit's bound cannot change within a state directory). The target δ is, unless given,
    ``delta_per_release`` (each release's δ for k rows of one user) times the number of
    releases a user reaches: the basic-composition δ; the accountant of record then gives the
    smallest ε valid at that δ. ``dpbandit budget``, the service's spend gauges and summary,
    ``simulate`` and ``replay`` all state this one figure.

    >>> from streaming_dpbandit.privacy.ledger import ReleaseRecord
    >>> ul = {"max_contributions_per_user": 2, "max_releases_per_user": 3,
    ...       "delta_per_release": 0.0}
    >>> recs = [ReleaseRecord(f"b/fit/{i}", "b", "m", "certified", "v1", True, epsilon=0.5,
    ...          delta=0.0, accounting=[{"type": "pure", "epsilon": 0.5}], user_level=ul,
    ...          data_slice=f"episode:{i}", composition="parallel") for i in range(4)]
    >>> print(user_level_of_records(recs, "b").statement())  # doctest: +NORMALIZE_WHITESPACE
    per user: at most 2 events per release, at most 3 releases,
    (ε=3, δ=0 (pure ε, exact sum)) in total
    >>> user_level_of_records([dataclasses.replace(r, user_level=None) for r in recs], "b")
    """
    recs = [r for r in records if r.bandit_id == bandit_id]
    bounds = [r.user_level for r in recs if r.user_level]
    if not bounds:
        return None
    ul = bounds[-1]
    k = int(ul["max_contributions_per_user"])
    e = ul.get("max_releases_per_user")
    e = None if e is None else int(e)
    if delta is None:
        per = ul.get("delta_per_release")
        per = max((float(r.delta) for r in recs), default=0.0) if per is None else float(per)
        reach = user_level_spend(recs, bandit_id, k, e).releases_per_user
        delta = max(1, reach) * per or None
    return user_level_spend(recs, bandit_id, k, e, delta)
