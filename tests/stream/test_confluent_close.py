"""A librdkafka consumer's close can hang for ever (confluentinc/librdkafka#4884: an assignment
that arrives while it closes); the confluent transport's close gives up after a timeout instead
of hanging the process (``stream/kafka/confluent_group.py``)."""

import threading

from streaming_dpbandit.stream.kafka.confluent_group import close_consumer


class HangingConsumer:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.closed = False

    def close(self) -> None:
        self.release.wait()  # librdkafka's assign inside close, never answered
        self.closed = True


class Consumer:
    closed = False

    def close(self) -> None:
        self.closed = True


def test_a_hanging_close_is_left_behind_after_the_timeout(caplog):
    c = HangingConsumer()
    assert close_consumer(c, timeout_s=0.2) is False
    assert "did not close within" in caplog.text
    c.release.set()  # (lets the daemon thread end)


def test_a_normal_close_returns_true():
    c = Consumer()
    assert close_consumer(c, timeout_s=5.0) is True and c.closed
