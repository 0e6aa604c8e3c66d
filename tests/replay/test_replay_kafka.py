"""Reading the service's topics from a real Kafka broker, over ranges by offsets and by time."""

from __future__ import annotations

import json

import numpy as np
import pytest
from kafka import KafkaProducer

from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
from streaming_dpbandit.cli import main
from streaming_dpbandit.replay.errors import LogFormatError
from streaming_dpbandit.replay.readers.kafka_log import KafkaLogReader
from streaming_dpbandit.replay.readers.service_jsonl import ServiceJsonlReader

pytestmark = pytest.mark.kafka

N = 300
START = 1_700_000_000.0


@pytest.fixture(scope="module")
def lines():
    return service_log_lines(N, K=3, d=2, seed=8, start=START)


@pytest.fixture
def topics(kafka_topic, kafka_bootstrap, lines):
    """The log in three 2-partition topics; everything of bandit b in partition 0, with the
    event times as record timestamps, plus another bandit's events in partition 1."""
    names = {k: kafka_topic(partitions=2) for k in ("contexts", "decisions", "feedback")}
    prod = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    try:
        other = service_log_lines(20, K=3, d=2, seed=9, bandit="c", start=START)
        for part, group in ((0, lines), (1, other)):
            for x in group:
                v = x["value"]
                t = v["event_time"] if "event_time" in v else v["decided_at"]
                prod.send(
                    names[x["topic"]],
                    key=v["bandit_id"].encode(),
                    value=json.dumps(v).encode(),
                    partition=part,
                    timestamp_ms=round(t * 1000),
                )
        prod.flush(30)
    finally:
        prod.close()
    return names


def _reader(bootstrap, names, **kw):
    return KafkaLogReader(
        bootstrap,
        (names["contexts"], names["decisions"], names["feedback"]),
        bandit_id="b",
        idle_timeout=30,
        **kw,
    )


def _concat(batches, name):
    return np.concatenate([getattr(b, name) for b in batches])


def test_whole_topics_read_like_the_jsonl_file(kafka_bootstrap, topics, lines, tmp_path):
    p = tmp_path / "log.jsonl"
    write_jsonl(p, lines)
    want = list(ServiceJsonlReader(p).chunks(64))
    r = _reader(kafka_bootstrap, topics)
    got = list(r.chunks(64))
    for name in ("event_ids", "actions", "rewards", "propensities"):
        assert _concat(got, name).tolist() == _concat(want, name).tolist()
    assert np.array_equal(
        np.concatenate([b.contexts.dense() for b in got]),
        np.concatenate([b.contexts.dense() for b in want]),
    )
    done, total, unit = r.progress()
    assert done == total == 3 * N + 3 * 20 and unit == "record"
    assert r.counters.get("other_bandits") == 60


def test_range_by_offsets(kafka_bootstrap, topics):
    got = list(_reader(kafka_bootstrap, topics, start=100, end=200).chunks())
    assert _concat(got, "event_ids").tolist() == [f"e-{i}" for i in range(100, 200)]


def test_range_by_timestamps(kafka_bootstrap, topics):
    r = _reader(kafka_bootstrap, topics, start=START + 100, end="2023-11-14T22:16:40Z")
    got = list(r.chunks())
    # 2023-11-14T22:16:40Z = START + 200 s: contexts, decisions and the feedback (at +0.5 s) of
    # events 100..199 fall inside; event 99's feedback falls outside, so it is not replayed
    assert _concat(got, "event_ids").tolist() == [f"e-{i}" for i in range(100, 200)]


def test_missing_topic_is_a_clear_error(kafka_bootstrap, topics):
    names = dict(topics, feedback="no-such-topic-for-replay")
    with pytest.raises(LogFormatError, match="no topic 'no-such-topic-for-replay'"):
        _reader(kafka_bootstrap, names).open()


def test_cli_replays_a_kafka_range(kafka_bootstrap, topics, tmp_path, capsys):
    js = tmp_path / "out.json"
    argv = ["replay", "--log", f"kafka://{kafka_bootstrap}", "--log-param",
            f"topics={topics['contexts']},{topics['decisions']},{topics['feedback']}",
            "--log-param", "bandit=b", "--start", "0", "--end", "150", "--policy", "linucb",
            "--estimator", "replay,ips", "--json", str(js), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(js.read_text())
    assert res["events"] == 150 and res["log"]["format"] == "kafka"
    assert res["runs"][0]["replay"]["estimate"]["diagnostics"]["events"] == 150
