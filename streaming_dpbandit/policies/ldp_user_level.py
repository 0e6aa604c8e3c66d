"""User-level privacy of the LDP-GLB policy: its per-report calibration and refusals.

The client SDK's rule (:func:`~streaming_dpbandit.ldp.user_level.report_epsilon`) applied to the
policy's model configuration; used by ``policies/user_level.group_params`` and
``config/user_level.UserLevelConfig``. Derivation: ``docs/privacy/user-level-ldp.md``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..ldp.model import ModelSpec
from ..ldp.user_level import USER_LEVEL_GAUSSIANS, report_components, report_epsilon
from ..privacy.accountant import Accountant
from ..privacy.ledger import ReleaseRecord
from ..privacy.statement import PrivacyStatement
from .ldp_glb import LDPGLB

__all__ = [
    "LOCAL_USER_NEIGHBOURING",
    "ldp_glb_refusal",
    "ldp_glb_report_epsilon",
    "local_user_statement",
    "local_user_unit",
]


def _ldp_glb_spec(params: dict[str, Any], epsilon: float, delta: float) -> ModelSpec:
    keep = {n: v for n, v in params.items() if n not in ("seed", "epsilon", "delta")}
    return LDPGLB(**keep, epsilon=epsilon, delta=delta).model_spec()


def ldp_glb_refusal(params: dict[str, Any]) -> str | None:
    """Why an ``ldp-glb`` configuration has no user-level calibration (one line), or None."""
    if params.get("profile", "paper") != "paper":
        return "user_level: ldp-glb profile=authors_code is not a certified LDP guarantee"
    spec = _ldp_glb_spec(
        params, float(params.get("epsilon", 1.0)), float(params.get("delta", 0.01))
    )
    if any(spec.block_variant(ph) == "ols" for ph in spec.phases()):
        if spec.gaussian not in USER_LEVEL_GAUSSIANS:
            return (
                f"user_level: ldp-glb gaussian={spec.gaussian} has no user-level split yet "
                f"(supported: {', '.join(USER_LEVEL_GAUSSIANS)})"
            )
    return None


def ldp_glb_report_epsilon(params: dict[str, Any], k: int, epsilon: float, delta: float) -> float:
    """:func:`report_epsilon` of an LDP-GLB policy configured with ``params`` (δ fixed).

    >>> round(ldp_glb_report_epsilon({"d": 3, "n_arms": 4, "variant": "ols"}, 9, 1.0, 0.01), 9)
    0.333333333
    """
    e1 = report_epsilon(lambda e: _ldp_glb_spec(params, e, delta), k, epsilon)
    # The ledger's accountant of record must state ≤ ε for the k reports: its PLD discretises
    # pessimistically (≈ 10⁻⁶ above the exact Gaussian profile), so step ε′ down until it does.
    while k > 1 and _user_cost(_ldp_glb_spec(params, e1, delta), k, delta) > epsilon:
        e1 *= 1.0 - 1e-6
    return e1


def _user_cost(spec: ModelSpec, k: int, delta: float) -> float:
    """The accountant of record's ε (at ``delta``) of k reports of one user."""
    comps = report_components(spec, k)
    rec = ReleaseRecord(
        "u", "u", "ldp", "certified", "", True, epsilon=math.inf, delta=1.0, accounting=comps
    )
    sp = Accountant([rec]).spend("u", delta=delta if delta > 0 else None)
    ok = [c for c in sp.candidates() if c["delta"] <= delta + 1e-15]
    return min(c["epsilon"] for c in ok) if ok else math.inf


#: The neighbouring relation of user-level local DP (docs/privacy/user-level-ldp.md §1).
LOCAL_USER_NEIGHBOURING = "any two inputs of all of one user's rounds (local model)"


def local_user_unit(k: int, window: int | None, windows: int | None) -> str:
    """The privacy unit of user-level local DP: the reports of one device.

    >>> local_user_unit(2, None, None)
    'one user: every report their device sends (at most 2 over the run)'
    """
    most = (
        f"at most {k} over the run"
        if window is None
        else f"at most {k} per window of {window} rounds, in at most {windows} windows"
    )
    return f"one user: every report their device sends ({most})"


def local_user_statement(st: PrivacyStatement, bound: dict[str, Any]) -> PrivacyStatement:
    """An LDP model's statement with the user as the unit: k reports of one user's device.

    ``bound`` is :meth:`~streaming_dpbandit.policies.user_level.UserLevel.bound_dict` (k and
    the per-user (ε, δ) the per-report calibration meets).
    """
    k = int(bound["max_contributions_per_user"])
    w, e = bound.get("window_rounds"), bound.get("max_releases_per_user")
    return dataclasses.replace(
        st,
        unit=local_user_unit(k, w, e) + ("" if w is None else "; (ε, δ) per window"),
        neighbouring=LOCAL_USER_NEIGHBOURING,
        epsilon=bound["epsilon_per_release"],
        delta=bound["delta_per_release"],
        scope=st.scope
        + f" Each report is randomized at the per-report calibration of {k} reports per user "
        "(docs/privacy/user-level-ldp.md); the device, not the server, enforces the count: "
        "a report beyond it is not sent.",
        caveats=(
            *(c for c in st.caveats if "n·ε" not in c),
            "User level: the server cannot enforce a bound the device does not; the guarantee "
            "holds for devices that run the SDK's bound (LDPClient max_reports).",
        ),
    )
