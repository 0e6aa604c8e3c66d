"""User-level local DP through a real Kafka broker (issue 22 §2; docs/privacy/user-level-ldp.md):
reports of devices that bound themselves (k per user) are learned over Kafka exactly as in
process, and every ledger record carries the bound."""

from __future__ import annotations

import os

import pytest

from dpbandit_testing.kafka_helpers import (
    create_topics,
    kafka_settings,
    produce_file,
    run_in_thread,
)
from dpbandit_testing.ldp_stream_helpers import (
    BANDIT,
    MODELS,
    TOPICS,
    env_for,
    local_bandit,
    local_settings,
)
from dpbandit_testing.stream_helpers import kafka_topics, run_file
from streaming_dpbandit.privacy.ledger import read_ledger
from streaming_dpbandit.privacy.user_level import user_level_of_records
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.local.clients import SimulatedLDPClients
from streaming_dpbandit.stream.local.runtime import learned_local_bytes
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import RecordingSource
from streaming_dpbandit.stream.transport import InProcessTransport

pytestmark = pytest.mark.kafka


def test_local_user_level_over_kafka_matches_the_in_process_run(kafka_broker, tmp_path):
    bandit = {
        **local_bandit(d=4, refresh_every=50),
        "user_level": {"max_contributions_per_user": 2},
    }
    src = SimulatedLDPClients(
        env_for(bandit), 600, BANDIT, topics=TOPICS, models_topic=MODELS, seed=5,
        max_reports_per_user=2, users=40,
    )  # fmt: skip
    path = tmp_path / "reports.jsonl"
    rec = Service(
        local_settings(tmp_path / "rec", bandit),
        InProcessTransport(RecordingSource(src, path), keep_outputs=True),
    )
    rec.open()
    rec.run()
    assert 0 < rec.local.runtimes[BANDIT].server.reports <= 80 and src.bounded > 0
    ref, _t, _s = run_file(tmp_path / "ref", path, bandits={BANDIT: bandit})
    topics = kafka_topics(f"ldpusers{os.getpid()}") | {"models": f"ldpusers{os.getpid()}.models"}
    create_topics(kafka_broker, topics)
    counts = produce_file(kafka_broker.bootstrap, path, topics)
    st = ServiceSettings.model_validate(
        kafka_settings(
            tmp_path / "kafka",
            kafka_broker.bootstrap,
            topics,
            f"ldpusers{os.getpid()}",
            bandits={BANDIT: bandit},
        )
    )

    def done(svc) -> bool:
        read = sum(off for (topic, _p), off in svc.offsets.items() if topic == topics["feedback"])
        return read == counts["feedback"]

    svc, th, result = run_in_thread(st, done)
    th.join(timeout=120)
    assert not th.is_alive() and result, "the service did not finish"
    assert learned_local_bytes({BANDIT: svc.local.runtimes[BANDIT].state_dict()}) == (
        learned_local_bytes({BANDIT: ref.local.runtimes[BANDIT].state_dict()})
    )
    recs, _ = read_ledger(tmp_path / "kafka" / "ledger.jsonl")
    assert recs and all(r.user_level["max_contributions_per_user"] == 2 for r in recs)
    ul = user_level_of_records(recs, BANDIT)
    assert ul.local and ul.of_record()["epsilon"] == pytest.approx(1.0)
    assert result[0]["local_bandits"][BANDIT]["privacy"]["user_level"]["statement"] == (
        ul.statement()
    )
