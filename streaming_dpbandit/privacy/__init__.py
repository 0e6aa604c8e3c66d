"""Privacy core: noise, clipping, mechanisms, the ledger and the accountant.

Nothing here imports Kafka, Prometheus or pydantic (DESIGN §3).
"""

from .accountant import Accountant, Spend
from .clipping import clip_coordinates, clip_norm, clip_scalar
from .gaussian import GaussianMechanism, analytic_gaussian_sigma, gaussian_delta
from .laplace import LaplaceMechanism
from .ledger import Ledger, LedgerConflictError, LedgerCorruptError, ReleaseRecord, read_ledger
from .noise import NoiseSource
from .peeling import Peeling, peeling_scale
from .projection import project_l1_ball
from .statement import PAPER_LABEL, PrivacyStatement

__all__ = [
    "PAPER_LABEL",
    "Accountant",
    "GaussianMechanism",
    "LaplaceMechanism",
    "Ledger",
    "LedgerConflictError",
    "LedgerCorruptError",
    "NoiseSource",
    "Peeling",
    "PrivacyStatement",
    "ReleaseRecord",
    "Spend",
    "analytic_gaussian_sigma",
    "clip_coordinates",
    "clip_norm",
    "clip_scalar",
    "gaussian_delta",
    "peeling_scale",
    "project_l1_ball",
    "read_ledger",
]
