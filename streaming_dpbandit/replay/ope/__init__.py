"""Off-policy value estimators for a fixed (frozen) policy, each with intervals.

IPS, SNIPS, DM and DR, plus the logged policy's on-policy value; every estimate has a
delta-method standard error, a normal interval and a bounded-memory bootstrap interval, and
per-position values for slates.
"""

from .base import Estimate, OffPolicyEstimator, RunningCurve
from .diagnostics import WeightDiagnostics
from .dm import DM
from .dr import DR
from .ips import IPS
from .onpolicy import OnPolicy
from .snips import SNIPS

#: Estimators by name (the CLI's ``--estimator``).
ESTIMATORS: dict[str, type[OffPolicyEstimator]] = {
    IPS.name: IPS,
    SNIPS.name: SNIPS,
    DM.name: DM,
    DR.name: DR,
}

__all__ = [
    "DM",
    "DR",
    "ESTIMATORS",
    "IPS",
    "SNIPS",
    "Estimate",
    "OffPolicyEstimator",
    "OnPolicy",
    "RunningCurve",
    "WeightDiagnostics",
]
