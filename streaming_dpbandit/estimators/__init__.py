"""River-style estimators: the episode schedule, per-episode accumulators, N-IHT, Lasso.

Constructors only store parameters; nothing here imports Kafka, Prometheus or pydantic.
"""

from .accumulator import EpisodeAccumulator
from .episodes import DoublingSchedule
from .lasso import lasso_gram
from .niht import NIHT, NIHTFit, iterations_for, niht_sensitivity

__all__ = [
    "NIHT",
    "DoublingSchedule",
    "EpisodeAccumulator",
    "NIHTFit",
    "iterations_for",
    "lasso_gram",
    "niht_sensitivity",
]
