"""Settings of the service (``dpbandit serve``, ``dpbandit loadgen``): one home.

:mod:`.models` declares them, :mod:`.loading` reads them (YAML file, environment, overrides;
one error line), :mod:`.embedded` holds the default bandit of the embedded simulation.
"""

from __future__ import annotations

from .embedded import embedded_bandits
from .loading import load_service_settings, validate_settings
from .models import (
    BanditSettings,
    BroadcastSettings,
    FeaturesSettings,
    FileSource,
    GatewaySettings,
    KafkaSettings,
    LocalBanditSettings,
    MetricsSettings,
    ModelServerSettings,
    ScalingSettings,
    ServiceSettings,
    SimulationSource,
    SnapshotSettings,
    TopicsSettings,
)

__all__ = [
    "BanditSettings",
    "BroadcastSettings",
    "FeaturesSettings",
    "FileSource",
    "GatewaySettings",
    "KafkaSettings",
    "LocalBanditSettings",
    "MetricsSettings",
    "ModelServerSettings",
    "ScalingSettings",
    "ServiceSettings",
    "SimulationSource",
    "SnapshotSettings",
    "TopicsSettings",
    "embedded_bandits",
    "load_service_settings",
    "validate_settings",
]
