"""User-level privacy for any policy: contribution bounding in front of its learning path.

:class:`UserLevel` wraps any registered policy (composition, not subclassing): deciding is the
policy's own; ``learn(..., user_ids=...)`` hashes the user ids with a keyed hash, asks the
policy which window (data slice) each row enters (``Policy.contribution_windows``) and passes on
only the rows :class:`~streaming_dpbandit.privacy.user_bound.UserContributionBound` admits
(at most k per user per window, at most E windows per user). Rows not admitted were decided
normally and are counted as ``bounded``. Without ``user_ids`` the call is exactly the wrapped
policy's ``learn`` (event level: today's behaviour and numbers).

The policy must be configured for the *group* of k rows (its sensitivity scaled by k, or its ε
lowered so that k rows cost the target: :func:`~streaming_dpbandit.privacy.user_level.
calibrate_for_group`); :meth:`UserLevel.user_level_spend` composes the ledger's releases into the
whole-run statement "per user: at most k events per release, at most E releases, (ε, δ) in
total". Derivation: ``docs/privacy/user-level.md``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..privacy.accountant import format_of_record
from ..privacy.contribution import LearnedRounds, RowRefused
from ..privacy.ledger import ReleaseRecord
from ..privacy.statement import PrivacyStatement
from ..privacy.user_bound import UserContributionBound
from ..privacy.user_level import (
    UserLevelSpend,
    calibrate_for_group,
    group_component,
    user_level_spend,
)
from ..privacy.zcdp import epsilon_from_rho, rho_from_epsilon_delta
from ..utils.arrays import AnyArray, ArrayLike, BoolArray
from .base import DecisionBatch, Policy

__all__ = [
    "GROUP_CALIBRATED",
    "SLATE_GROUP_CALIBRATED",
    "UserLevel",
    "group_params",
    "private_lasso_group_epsilon",
]

#: Policies with a group calibration (:func:`group_params`): what ``user_level`` accepts.
GROUP_CALIBRATED = ("fliphat", "dp-linucb", "private-lasso", "dpucb-mat", "dpts-mat", "ldp-glb")

#: The slate policies among them: pure ε-DP batch means, calibrated at ε/k
#: (docs/privacy/user-level-slates.md)
SLATE_GROUP_CALIBRATED = ("dpucb-mat", "dpts-mat")


def group_params(
    policy: str, params: dict[str, Any], k: int | None, epsilon: float, delta: float
) -> dict[str, Any]:
    """The policy's (ε, δ) for one release to cost (ε, δ) for k rows of one user.

    FLIPHAT (one ``eps_delta`` fit per episode): (ε/k, δ/(k·e^{(k−1)ε/k})), so that group
    privacy gives exactly (ε, δ); DP-LinUCB (Gaussian tree): the ε′ whose k-fold sensitivity
    costs ε at δ under the tightest accountant (:func:`~streaming_dpbandit.privacy.user_level.
    calibrate_for_group`); PrivateLASSO-R (ρ-zCDP, every release's sensitivity k-fold for k
    rows, so k²ρ): the ε′ with ρ(ε′, δ) = ρ(ε, δ)/k² (:func:`private_lasso_group_epsilon`);
    DPUCB-MAT / DPTS-MAT (pure ε-DP Laplace batch means): ε/k, δ = 0 (exact group privacy;
    ``docs/privacy/user-level-slates.md``). Derivation: ``docs/privacy/user-level.md`` §5.

    >>> p = group_params("fliphat", {"d": 10}, 2, 1.0, 1e-6)
    >>> p["epsilon"], round(p["delta"] * 1e7, 4)
    (0.5, 3.0327)
    >>> round(group_params("private-lasso", {}, 2, 1.0, 1e-6)["epsilon"], 4)
    0.4956
    >>> group_params("dpts-mat", {}, 4, 1.0, 0.0)["epsilon"]
    0.25
    """
    if k is None or k == 1:
        return {**params, "epsilon": epsilon, "delta": delta}
    if policy == "fliphat":
        e1 = epsilon / k
        return {**params, "epsilon": e1, "delta": delta / (k * math.exp((k - 1) * e1))}
    if policy == "dp-linucb":
        key = json.dumps([params, k, epsilon, delta], sort_keys=True, default=str)
        eps = _GROUP_EPSILON.get(key)
        if eps is None:  # a bisection over the accountant (≈ 1.5 s): once per configuration
            eps = _GROUP_EPSILON[key] = _dp_linucb_group_epsilon(params, k, epsilon, delta)
        return {**params, "epsilon": eps, "delta": delta}
    if policy == "private-lasso":
        return {**params, "epsilon": private_lasso_group_epsilon(k, epsilon, delta), "delta": delta}
    if policy in SLATE_GROUP_CALIBRATED:  # pure ε: k rows cost exactly k·ε′
        return {**params, "epsilon": epsilon / k, "delta": 0.0}
    if policy == "ldp-glb":  # local DP: k reports compose (docs/privacy/user-level-ldp.md)
        from .ldp_user_level import ldp_glb_report_epsilon

        return {**params, "epsilon": ldp_glb_report_epsilon(params, k, epsilon, delta)}
    raise KeyError(f"no group calibration for {policy!r} (have: {', '.join(GROUP_CALIBRATED)})")


#: DP-LinUCB's group-calibrated ε′ by (parameters, k, ε, δ): simulate and replay build the
#: same configuration once per repetition.
_GROUP_EPSILON: dict[str, float] = {}


def _dp_linucb_group_epsilon(params: dict[str, Any], k: int, epsilon: float, delta: float) -> float:
    from . import REGISTRY

    cls = REGISTRY["dp-linucb"]

    def acc(e: float) -> list[dict[str, Any]]:
        pol = cls(**{**params, "epsilon": e, "delta": delta})
        out: list[dict[str, Any]] = pol.explain()["constants"]["accounting"]
        return out

    return calibrate_for_group(acc, k, epsilon, delta)


def private_lasso_group_epsilon(k: int, epsilon: float, delta: float) -> float:
    """PrivateLASSO-R's ε′ for k rows of one user to cost (ε, δ): ρ(ε′, δ) = ρ(ε, δ)/k².

    The policy spends ρ = ρ(ε′, δ) per slot (zCDP: its SVT runs and Gaussian Gram releases);
    k rows move every release's statistic by at most k times its sensitivity, so they cost k²ρ
    (Bun & Steinke 2016, Prop. 1.9), which converts to (ε, δ) exactly as the policy's own
    calibration does. The returned ε′ is checked (and nudged down by ulps) so that k²·ρ(ε′, δ)
    never exceeds ρ(ε, δ) after rounding.

    >>> e1 = private_lasso_group_epsilon(3, 1.0, 1e-8)
    >>> from streaming_dpbandit.privacy.zcdp import rho_from_epsilon_delta as r
    >>> 9 * r(e1, 1e-8) <= r(1.0, 1e-8)
    True
    """
    if int(k) != k or k < 1:
        raise ValueError(f"group size must be an integer ≥ 1, got {k!r}")
    if k == 1:
        return float(epsilon)
    target = rho_from_epsilon_delta(epsilon, delta)
    eps = epsilon_from_rho(target / (k * k), delta)
    while k * k * rho_from_epsilon_delta(eps, delta) > target:
        eps = math.nextafter(eps, 0.0)
    return eps


USER_UNIT = (
    "one user: all the events carrying their user id (at most {k} of them enter each release{e})"
)
USER_NEIGHBOURING = (
    "change the contexts and rewards of every event of one user (or give them to a new user "
    "served at the same rounds); which rounds share a user id is treated as public, like the "
    "rounds themselves"
)


class UserLevel:
    """Bound each user's contributions to a policy's private statistics.

    Parameters
    ----------
    policy
        Any policy (``streaming_dpbandit.policies``).
    max_contributions_per_user
        k: events of one user learned from per window (release).
    max_releases_per_user
        E: windows a user is learned from over the run (``None``: no cap).
    max_users
        Cap on each per-user counter table (memory bound; see ``privacy/user_bound.py``).
    seed
        Key of the user-id hash (``None`` in production: OS entropy; a secret).
    delta_per_release, epsilon_per_release
        (ε, δ) of one release for k rows of one user: the group calibration's target
        (:func:`group_params`); the whole-run statement's δ is δ times the releases a user
        reaches. ``None``: derived from the policy's own (ε, δ) by group privacy.
    window_rounds
        Local-DP policies only (``docs/privacy/user-level-ldp.md``): rounds per bounding
        window — a user's rounds in (wW, (w+1)W] form window w — instead of the policy's own
        windows (its releases). ``None``: the policy's.

    Examples
    --------
    >>> import numpy as np
    >>> from streaming_dpbandit.policies import REGISTRY
    >>> pol = UserLevel(REGISTRY["random"](d=2, seed=0), max_contributions_per_user=1, seed=1)
    >>> dec = pol.decide(np.ones((3, 2, 2)))
    >>> pol.learn(np.ones((3, 2)), np.ones(3), dec.rounds, user_ids=["a", "a", "b"])
    >>> pol.user_counters()["admitted"], pol.user_counters()["bounded"]
    (2, 1)
    """

    if TYPE_CHECKING:  # forwarded to the wrapped policy by __getattr__; declared for checkers
        name: str
        private: bool
        t: int
        model_version: int

        def decide(
            self,
            X: ArrayLike,
            event_ids: ArrayLike | None = None,
            mask: ArrayLike | None = None,
            **kw: Any,
        ) -> DecisionBatch: ...

        def decide_frozen(
            self,
            X: ArrayLike,
            event_ids: ArrayLike | None = None,
            mask: ArrayLike | None = None,
            **kw: Any,
        ) -> DecisionBatch: ...

        def refit_due(self) -> bool: ...

        def max_decide_batch(self) -> int: ...

        def refit_reads_through(self) -> int: ...

    def __init__(
        self,
        policy: Policy,
        max_contributions_per_user: int,
        max_releases_per_user: int | None = None,
        max_users: int = 1_000_000,
        seed: int | None = None,
        delta_per_release: float | None = None,
        epsilon_per_release: float | None = None,
        window_rounds: int | None = None,
    ) -> None:
        self.policy = policy
        self.max_contributions_per_user = max_contributions_per_user
        self.max_releases_per_user = max_releases_per_user
        self.max_users = max_users
        self.seed = seed
        self.delta_per_release = delta_per_release
        self.epsilon_per_release = epsilon_per_release
        self.window_rounds = window_rounds

    def _bound(self) -> UserContributionBound:
        b = self.__dict__.get("_bounder")
        if b is None:
            b = self._bounder = UserContributionBound(
                self.max_contributions_per_user,
                self.max_releases_per_user,
                self.max_users,
                self.seed,
            )
            b._validate()
        return b

    # -- the learning path --------------------------------------------------------------------
    def hash_users(self, user_ids: Sequence[Any] | AnyArray) -> npt.NDArray[np.uint64]:
        """Keyed hashes of user ids (uint64): a service hashes on arrival and keeps only these
        (in its pending joins and snapshots), then passes them to :meth:`learn`."""
        return self._bound().hash_users(user_ids)

    def admit(
        self,
        rounds: ArrayLike,
        user_ids: Sequence[Any] | AnyArray | None = None,
        user_hashes: ArrayLike | None = None,
    ) -> BoolArray:
        """Mask of the rows (of ``rounds``) that enter the statistics; users given as ids or
        as keyed hashes from :meth:`hash_users`."""
        b = self._bound()
        rnd = np.asarray(rounds, dtype=np.int64).reshape(-1)
        w = self.window_rounds
        if w is not None:  # fixed windows of w rounds; the current and the previous stay open
            b.close_below(max(0, (self.policy.t - 1) // w - 1))
            windows = (rnd - 1) // w
        else:
            b.close_below(self.policy.open_windows_from())
            windows = self.policy.contribution_windows(rnd)
        if user_hashes is not None:
            h = np.asarray(user_hashes, np.uint64)
        elif user_ids is not None:
            h = b.hash_users(user_ids)
        else:  # no users: as many user entries as rows only when there are no rows
            raise ValueError("user ids must have one entry per row")
        if h.shape != rnd.shape:
            raise ValueError("user ids must have one entry per row")
        mask = b.admit(h, windows)
        if not mask.all():  # remembered: these rounds' rows must never be learned
            self._bounded_rounds().add_new(rnd[~mask])
        return mask

    def _bounded_rounds(self) -> LearnedRounds:
        """Rounds :meth:`admit` refused (beyond their user's bound)."""
        out = self.__dict__.get("_bounded")
        if out is None:
            out = self._bounded = LearnedRounds()
        return out

    def learn(
        self,
        contexts: ArrayLike,
        rewards: ArrayLike,
        rounds: ArrayLike,
        ids: ArrayLike | None = None,
        user_ids: Sequence[Any] | AnyArray | None = None,
        user_hashes: ArrayLike | None = None,
    ) -> None:
        """The policy's ``learn`` on the admitted rows; no user ids: event level (unchanged)."""
        if user_ids is None and user_hashes is None:
            bounded = self.__dict__.get("_bounded")
            if bounded is not None:  # rows admitted earlier (at decision time): never a bounded one
                over = bounded.contains(rounds)
                if over.any():
                    first = int(np.asarray(rounds).reshape(-1)[over][0])
                    raise RowRefused(
                        f"{self.name}: the row of round {first} is beyond its user's "
                        "contribution bound (refused when it was decided); nothing of this "
                        "call was learned",
                        "beyond_user_bound",
                        over,
                    )
            self.policy.learn(contexts, rewards, rounds, ids)
            return
        mask = self.admit(rounds, user_ids, user_hashes)
        forget = getattr(self.policy, "forget_rounds", None)
        if forget is not None and not mask.all():  # e.g. LDP-GLB: bounded rounds never report
            forget(np.asarray(rounds).reshape(-1)[~mask])
        if mask.all():
            self.policy.learn(contexts, rewards, rounds, ids)
            return
        if not mask.any():
            return
        sub_ids = None if ids is None else np.asarray(ids)[mask]
        r = np.asarray(rewards)
        self.policy.learn(
            np.asarray(contexts)[mask],
            # a slate's per-item rewards (B, K) stay rows; a single arm's reward is a scalar
            r[mask] if getattr(self.policy, "slates", False) else r.reshape(-1)[mask],
            np.asarray(rounds).reshape(-1)[mask],
            sub_ids,
        )

    def refit(self) -> list[ReleaseRecord]:
        """The policy's releases, each marked with the user-level bound its rows were admitted
        under (``ReleaseRecord.user_level``: the ledger's statement is then per user)."""
        bound = self.bound_dict()
        return [dataclasses.replace(r, user_level=bound) for r in self.policy.refit()]

    def bound_dict(self) -> dict[str, Any]:
        """The public bound: k, E, the per-release δ (what ledger records carry)."""
        return {
            "max_contributions_per_user": int(self.max_contributions_per_user),
            "max_releases_per_user": None
            if self.max_releases_per_user is None
            else int(self.max_releases_per_user),
            "delta_per_release": self.delta_per_release,
            "epsilon_per_release": self.epsilon_per_release,
            **({} if self.window_rounds is None else {"window_rounds": int(self.window_rounds)}),
        }

    # -- what a caller reads ------------------------------------------------------------------
    def user_counters(self) -> dict[str, Any]:
        """Admitted / bounded counts (metrics-safe: no ids, no hashes)."""
        b = self._bound()
        b._init()
        return {**b.counters, "counter_entries": b.memory_entries()}

    @property
    def counters(self) -> dict[str, Any]:
        base = getattr(self.policy, "counters", {})
        base = dict(base) if isinstance(base, dict) else {}
        base.update({f"user_{k}": v for k, v in self.user_counters().items()})
        return base

    def user_level_spend(
        self, records: list[ReleaseRecord], delta: float | None = None, bandit_id: str | None = None
    ) -> UserLevelSpend:
        """Whole-run user-level spend of the policy's ledger ``records``."""
        bandit = (
            bandit_id
            or getattr(self.policy, "bandit_id", None)
            or (records[0].bandit_id if records else "default")
        )
        return user_level_spend(
            records,
            bandit,
            self.max_contributions_per_user,
            self.max_releases_per_user,
            delta,
        )

    @property
    def privacy(self) -> PrivacyStatement:
        """The wrapped policy's statement with the user as the privacy unit.

        (ε, δ) is one release's guarantee for the k admitted events of one user, by group
        privacy from the policy's own (ε, δ): (kε, k·e^{(k−1)ε}·δ) (valid for any (ε, δ)-DP
        release; for Gaussian releases the accountant over the ledger is tighter); ρ scales by
        k². The whole-run figure composes a user's releases: :meth:`user_level_spend`.
        """
        st = self.policy.privacy
        if st.model == "local":  # the device's reports compose (docs/privacy/user-level-ldp.md)
            from .ldp_user_level import local_user_statement

            return local_user_statement(st, self.bound_dict())
        k = int(self.max_contributions_per_user)
        e = self.max_releases_per_user
        e_txt = f", and at most {e} releases" if e is not None else ""
        eps, dl = st.epsilon, st.delta
        accountant = st.accountant
        if eps is not None:
            g = group_component({"type": "eps_delta", "epsilon": eps, "delta": dl or 0.0}, k)
            eps, dl = g["epsilon"], (g["delta"] if dl is not None else None)
        ep, dp = self.epsilon_per_release, self.delta_per_release
        if ep is not None and dp is not None:
            # the group calibration's target: met by the tightest accountant (§5 of the doc)
            eps, dl = ep, dp
            accountant = "group calibration (tightest accountant of the k-grouped release)"
        whole = self.whole_run_bound()
        cav = (
            *(c for c in st.caveats if "group privacy" not in c),
            f"User level: the policy's noise must be calibrated for groups of k = {k} rows "
            "(docs/privacy/user-level.md).",
        )
        return PrivacyStatement(
            model=st.model,
            unit=USER_UNIT.format(k=k, e=e_txt),
            neighbouring=USER_NEIGHBOURING,
            epsilon=eps,
            delta=dl,
            calibration=st.calibration,
            rho=None if st.rho is None else k * k * st.rho,
            scope="per release. A user reaches many releases: they compose sequentially, not in "
            "parallel; the whole-run guarantee per user is the ledger's user-level spend "
            "(privacy.user_level.user_level_of_records; dpbandit budget)"
            + ("." if whole is None else f"; before any release: {whole['statement']}."),
            caveats=cav,
            label=st.label,
            noise_backend=st.noise_backend,
            accountant=accountant,
        )

    def whole_run_bound(self) -> dict[str, Any] | None:
        """Before any release: the whole-run guarantee per user with E set, by basic
        composition of E releases of (ε, δ) each (the ledger's accountant of record, over the
        releases actually made, can only be tighter); None without E or a per-release (ε, δ).

        >>> from streaming_dpbandit.policies import REGISTRY
        >>> ul = UserLevel(REGISTRY["random"](d=2), 2, 3, epsilon_per_release=1.0,
        ...                delta_per_release=1e-6)
        >>> print(ul.whole_run_bound()["statement"])  # doctest: +NORMALIZE_WHITESPACE
        per user: at most 2 events per release, at most 3 releases,
        (ε=3, δ=3e-06 (basic composition)) in total
        """
        e, ep, dp = self.max_releases_per_user, self.epsilon_per_release, self.delta_per_release
        if e is None or ep is None or dp is None:
            return None
        k = int(self.max_contributions_per_user)
        total = {"accountant": "basic", "epsilon": e * ep, "delta": min(1.0, e * dp)}
        events = "events" if k != 1 else "event"
        release = "release"
        if self.policy.privacy.model == "local":  # a device's reports, per window
            events, release = ("reports" if k != 1 else "report"), "window"
        return {
            **total,
            "statement": f"per user: at most {k} {events} per {release}, at most {e} {release}s, "
            f"({format_of_record(total)}) in total",
        }

    def explain(self, horizon: int | None = None) -> dict[str, Any]:
        out = dict(self.policy.explain(horizon))
        if "privacy_statement" in out:  # the inner policy's is per event, at ε′
            out["event_level_privacy_statement"] = out["privacy_statement"]
            out["privacy_statement"] = self.privacy.text()
        out["user_level"] = {
            "max_contributions_per_user": self.max_contributions_per_user,
            "max_releases_per_user": self.max_releases_per_user,
            "max_users": self.max_users,
            "epsilon_per_release": self.epsilon_per_release,
            "delta_per_release": self.delta_per_release,
            "inner_epsilon": getattr(self.policy, "epsilon", None),
            "inner_delta": getattr(self.policy, "delta", None),
            "whole_run": self.whole_run_bound(),
            "privacy_statement": self.privacy.text(),
            "derivation": "docs/privacy/user-level.md",
        }
        return out

    # -- persistence --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Owner-only snapshot: the policy's state and the bounder's (key, hashed counts)."""
        return {
            "policy": self.policy.state_dict(),
            "user_bound": self._bound().state_dict(),
            "bounded_rounds": self._bounded_rounds().state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> UserLevel:
        self.policy.load_state_dict(state["policy"])
        self._bound().load_state_dict(state["user_bound"])
        self._bounded = LearnedRounds.from_state_dict(state.get("bounded_rounds"))
        return self

    # everything else (decide, decide_frozen, refit, refit_due, max_decide_batch, t, ...)
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("policy", "_bounder", "_bounded"):
            raise AttributeError(name)
        return getattr(self.policy, name)

    def __repr__(self) -> str:
        return (
            f"UserLevel({self.policy!r}, max_contributions_per_user="
            f"{self.max_contributions_per_user}, max_releases_per_user="
            f"{self.max_releases_per_user})"
        )
