"""The Kafka clients the real-broker tests of the transport run over (``kafka.client``)."""

import pytest

CLIENTS = ["kafka-python", "confluent-kafka"]


@pytest.fixture(params=CLIENTS)
def kafka_client(request) -> str:
    """Each client of ``kafka.client`` in turn: the test's subject is the transport."""
    return request.param
