"""Client SDK of the locally private GLM bandits (LDP-SGD, LDP-OLS; LDP-GLB spec).

In the local model the raw context and reward never leave the user's device: the client decides
with the published model, privatises its own report, and only that report reaches the server.
This package is everything the device needs — model snapshots, the decision rule, the two local
randomizers (the ℓ2-ball mechanism and the Gaussian mechanism on (xxᵀ, r·x)), the report format
and a privacy budget — and depends on numpy and the standard library only (no Kafka, Prometheus,
pydantic or scipy), so it can be vendored into an app backend. See ``docs/ldp-glb.md``.
"""

from .budget import BudgetExceeded, ClientBudget
from .client import Choice, LDPClient
from .fetch import fetch_snapshot
from .gaussian import GaussianOLSMechanism, analytic_sigma, classical_sigma, ols_tau
from .l2_ball import L2BallMechanism
from .links import Link, get_link
from .model import AUTHORS_CODE_LABEL, ModelSnapshot, ModelSpec, SnapshotError
from .radius import ball_radius, printed_radius
from .randomizers import build_payloads
from .report import Report

__all__ = [
    "AUTHORS_CODE_LABEL",
    "BudgetExceeded",
    "Choice",
    "ClientBudget",
    "GaussianOLSMechanism",
    "L2BallMechanism",
    "LDPClient",
    "Link",
    "ModelSnapshot",
    "ModelSpec",
    "Report",
    "SnapshotError",
    "analytic_sigma",
    "ball_radius",
    "build_payloads",
    "classical_sigma",
    "fetch_snapshot",
    "get_link",
    "ols_tau",
    "printed_radius",
]
