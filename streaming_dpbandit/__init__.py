"""streaming_dpbandit: differentially private contextual bandits as a streaming service.

The package is layered (DESIGN §3): ``privacy`` (noise, mechanisms, ledger, accountant) and
``estimators`` (episode schedule, N-IHT, ...) know nothing of Kafka, Prometheus or pydantic;
``policies`` build on them; ``envs`` and ``experiments`` simulate; ``cli`` ties it together.
"""

import os as _os

# One BLAS thread per process unless the user says otherwise: the simulator parallelises across
# processes and the service does many small matrix operations, and oversubscribed BLAS threads
# were measured up to 100× slower on a busy 2-core machine. Effective only when numpy is first
# imported after this package (as through the ``dpbandit`` command).
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"

__all__ = ["__version__"]
