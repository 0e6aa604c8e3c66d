"""streaming_dpbandit: differentially private contextual bandits as a streaming service.

The package is layered (DESIGN §3): ``privacy`` (noise, mechanisms, ledger, accountant) and
``estimators`` (episode schedule, N-IHT, ...) know nothing of Kafka, Prometheus or pydantic;
``policies`` build on them; ``envs`` and ``experiments`` simulate; ``cli`` ties it together.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
