import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tables fit the terminal's width (experiments/report.py: COLUMNS, else the terminal, else 200
# columns). The tests read whole rows, so they run at the width of a file or a pipe whatever
# terminal they are started from; pytest-xdist's workers would otherwise report 80. A test of
# the wrapping sets its own COLUMNS.
os.environ["COLUMNS"] = "200"


# tests/data holds inputs of the tests (a legacy state's maker, a user's script that mypy
# checks), not test modules: --doctest-modules would import and run them.
collect_ignore = ["data"]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# ---------------------------------------------------------------------------------------------
# Real Apache Kafka (see docs/kafka-tests.md). Tests that use these fixtures are marked
# @pytest.mark.kafka; they never skip: when no broker can be had, the fixture raises with why.

from dpbandit_testing.kafka_broker import KafkaBroker, unique_topic_name  # noqa: E402


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """Control object for the session's broker: ``.bootstrap``, ``.restart()``,
    ``.stop()``/``.start()``, ``.create_topic(name, partitions)``, ``.admin()``.

    Uses the broker named by ``$DPBANDIT_TEST_KAFKA`` (``scripts/run-tests.sh`` starts one
    and exports it); otherwise starts a private one with ``scripts/kafka.sh`` for the session
    and stops it at the end.
    """
    broker = KafkaBroker.for_session(tmp_path_factory.mktemp("kafka-broker"))
    try:
        yield broker
    finally:
        broker.close()


from streaming_dpbandit.stream.kafka.seam import CLIENTS as KAFKA_CLIENTS  # noqa: E402


@pytest.fixture(params=KAFKA_CLIENTS)
def kafka_client(request) -> str:
    """Each client of ``kafka.client`` in turn: the test's subject runs on it."""
    return request.param


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker) -> str:
    """``127.0.0.1:PORT`` of the session's real Kafka broker."""
    return kafka_broker.bootstrap


@pytest.fixture
def kafka_topic(kafka_broker, request):
    """Factory: ``kafka_topic(partitions=3, configs=None) -> name`` creates a fresh topic
    (named after the test) and waits until all its partitions have a leader."""

    def create(partitions: int = 3, configs: dict[str, str] | None = None) -> str:
        name = unique_topic_name(request.node.name)
        return kafka_broker.create_topic(name, partitions, configs=configs)

    return create


# ---------------------------------------------------------------------------------------------
# Debian's Prometheus and promtool (scripts/prometheus.sh). Never skips: when they cannot be had,
# the fixture fails with the script's reason.
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """Directory holding ``prometheus`` and ``promtool``: ``$DPBANDIT_PROMETHEUS_BIN_DIR``
    (``scripts/run-tests.sh`` sets it) or fetched here with ``scripts/prometheus.sh fetch``."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "prometheus.sh"
    out = subprocess.run([str(script), "fetch"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.fail(
            "Prometheus/promtool unavailable for the tests (scripts/prometheus.sh fetch): "
            + (out.stderr.strip() or f"exit status {out.returncode}"),
            pytrace=False,
        )
    return Path(out.stdout.strip().splitlines()[-1])
