"""Featurisers: JSON feature objects to the bandit's d-dimensional vectors (docs/features.md).

One featuriser, configured per bandit (``bandits.NAME.features``), is shared by every part that
turns feature objects into numbers: the HTTP gateway (``dpbandit gateway``), the service's
contexts in feature-object form and ``dpbandit replay`` of such logs.
"""

from __future__ import annotations

from .hashing import FeatureError, FeatureHasher

__all__ = ["FeatureError", "FeatureHasher"]
