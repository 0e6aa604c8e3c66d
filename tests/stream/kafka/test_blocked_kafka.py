"""The issue's scenario through a real broker: `dpbandit loadgen` against a FLIPHAT bandit whose
swap delay is shorter than the traffic of one feedback window, with some rewards never sent.

`loadgen` with the service's settings refuses that load at start (one line naming the setting
and the value it needs). A generator whose settings lack the service's bandits cannot check it:
then the service, blocked at its first release, logs within ``blocked_warning_s`` what it waits
for and the setting to change, and a line when it decides again — on both Kafka clients.
"""

from __future__ import annotations

import io
import logging
import os
import re
import threading

import pytest

from dpbandit_testing.stream_helpers import BANDIT, D, K, kafka_topics
from streaming_dpbandit.errors import ConfigError
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.runner import kafka_transport
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.loadgen import check_loadgen_settings, run_loadgen

pytestmark = pytest.mark.kafka

RATE, WINDOW, EVENTS = 200, 5.0, 700


def settings(name: str, tmp_path, client: str, bandits: bool) -> ServiceSettings:
    policy = {"policy": "fliphat", "d": D, "s": 4, "b_max": 3.5, "first_episode_len": 200,
              "swap_delay": 10}  # fmt: skip
    return ServiceSettings.model_validate(
        {
            "kafka": {
                "bootstrap_servers": os.environ["DPBANDIT_TEST_KAFKA"],
                "client": client,
                "group_id": name,
                "topics": kafka_topics(name),
                "partitions": 1,
                "poll_timeout_ms": 20,
            },
            "simulation": {
                "env_params": {"d": D, "K": K, "s_star": 3},
                "bandit_id": BANDIT,
                "feedback_delay_mean": 0.05,
                "feedback_probability": 0.8,  # a fifth of the decisions are never rewarded
                "seed": 3,
            },
            "bandits": {BANDIT: {"policy": policy, "feedback_window": WINDOW, "seed": 7}}
            if bandits
            else {},
            "blocked_warning_s": 1.0,
            "snapshots": {"directory": str(tmp_path / "state")},
            "metrics": {"enabled": False},
            "progress": False,
        }
    )


def test_a_load_that_blocks_is_refused_and_a_blocked_bandit_says_why(
    kafka_broker, tmp_path, kafka_client, caplog
):
    name = f"blocked-{kafka_client}-{os.getpid()}"
    st = settings(name, tmp_path, kafka_client, bandits=True)
    with pytest.raises(ConfigError) as refused:
        check_loadgen_settings(st, RATE)
    assert str(refused.value).startswith(
        f"bandit 'shop': at {RATE} events/s its feedback_window (5 s) spans 1,000 rounds but "
        "policy.swap_delay is 10: the 20% of decisions that get no reward would hold every "
        "release until their window closes"
    )
    caplog.set_level(logging.INFO, logger="streaming_dpbandit.service")
    svc = Service(st, kafka_transport(st.kafka))
    both = threading.Event()
    result = []

    def serve():
        svc.open()
        result.append(svc.run(lambda s: s.request_stop() if both.is_set() else None))

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    blind = settings(name, tmp_path, kafka_client, bandits=False)  # nothing to check against
    out = io.StringIO()
    load = run_loadgen(blind, rate=RATE, events=EVENTS, duration_s=90, out=out,
                       install_signal_handlers=False)  # fmt: skip
    both.set()
    th.join(timeout=60)
    assert not th.is_alive() and result, out.getvalue()
    assert load["decisions"] == EVENTS, out.getvalue()
    lines = [r.getMessage() for r in caplog.records if r.name == "streaming_dpbandit.service"]
    warnings = [m for m in lines if " blocked for " in m]
    assert warnings, lines
    assert re.match(
        r"bandit shop: blocked for \d+ s, [\d,]+ contexts waiting: its next release reads the "
        r"rewards of the decisions up to round [\d,]+ and \d+ of them have none yet",
        warnings[0],
    )
    assert re.search(
        r"set policy\.swap_delay \(now 10\) to at least the traffic of one feedback_window; "
        r"at the [\d,]+ decisions/s seen so far that is about [\d,]+ rounds",
        warnings[0],
    )
    assert any(re.fullmatch(r"bandit shop: deciding again after \d+ s blocked", m) for m in lines)
