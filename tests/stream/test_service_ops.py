"""Operational signals for the deployment's alerts: refit failures that survive the restart,
the checkpoint interval, and a checkpoint age computed at scrape time."""

from __future__ import annotations

import json
import time

import pytest

from dpbandit_testing.stream_helpers import BANDIT, D, K, settings
from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import SimulatedSource
from streaming_dpbandit.stream.state import REFIT_FAILURES_FILE
from streaming_dpbandit.stream.transport import InProcessTransport


def simulated(events: int = 1500) -> InProcessTransport:
    env = FliphatPaperEnv(d=D, K=K, s_star=3)
    src = SimulatedSource(
        env, events, BANDIT, seed=3, topics=("dpbandit.contexts", "dpbandit.feedback")
    )
    return InProcessTransport(src)


def value(metrics: ServiceMetrics, name: str, **labels) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


class Boom(RuntimeError):
    pass


def test_a_failed_refit_is_counted_persisted_and_stops_the_service(tmp_path):
    st = settings(tmp_path / "state")
    metrics = ServiceMetrics()
    svc = Service(st, simulated(), metrics)
    svc.open()
    assert value(metrics, "dpbandit_refit_failures_total", bandit=BANDIT) == 0

    def boom():
        raise Boom("numerical trouble")

    svc.bandits[BANDIT].policy.refit = boom
    with pytest.raises(Boom):
        svc.run()
    svc.ledger.close()  # the process died
    assert value(metrics, "dpbandit_refit_failures_total", bandit=BANDIT) == 1
    path = tmp_path / "state" / REFIT_FAILURES_FILE
    assert json.loads(path.read_text()) == {BANDIT: 1}
    assert path.stat().st_mode & 0o777 == 0o600
    # nothing of the failed update was persisted: no release, and only the start snapshot
    # (the fresh state with its secret keys, written before the first message)
    from streaming_dpbandit.stream.snapshot import SnapshotStore

    snap = SnapshotStore(tmp_path / "state").load()
    assert snap["seq"] == 1 and not any(snap["offsets"].values())
    assert (tmp_path / "state" / "ledger.jsonl").read_text() == ""

    # the restarted process exports the count from its first scrape, and keeps counting
    metrics2 = ServiceMetrics()
    svc2 = Service(st, simulated(), metrics2)
    svc2.open()
    assert value(metrics2, "dpbandit_refit_failures_total", bandit=BANDIT) == 1
    svc2.bandits[BANDIT].policy.refit = boom
    with pytest.raises(Boom):
        svc2.run()
    svc2.ledger.close()
    assert value(metrics2, "dpbandit_refit_failures_total", bandit=BANDIT) == 2
    assert json.loads(path.read_text()) == {BANDIT: 2}

    # and a healthy run on the same state still shows the history (a counter never goes down)
    metrics3 = ServiceMetrics()
    svc3 = Service(st, simulated(), metrics3)
    svc3.open()
    svc3.run()
    assert value(metrics3, "dpbandit_refit_failures_total", bandit=BANDIT) == 2
    assert value(metrics3, "dpbandit_ledger_releases", bandit=BANDIT) >= 1


def test_an_unreadable_failure_file_does_not_stop_the_service(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / REFIT_FAILURES_FILE).write_text("{torn")
    metrics = ServiceMetrics()
    svc = Service(settings(tmp_path / "state"), simulated(300), metrics)
    svc.open()
    svc.run()
    assert value(metrics, "dpbandit_refit_failures_total", bandit=BANDIT) == 0


def test_checkpoint_interval_and_an_age_that_grows_while_the_loop_is_stuck(tmp_path):
    st = settings(tmp_path / "state", snapshots={"directory": str(tmp_path / "s"), "interval_s": 7})
    metrics = ServiceMetrics()
    svc = Service(st, simulated(300), metrics)
    svc.open()
    assert value(metrics, "dpbandit_checkpoint_interval_seconds") == 7
    a1 = value(metrics, "dpbandit_checkpoint_age_seconds")
    time.sleep(0.3)  # no loop iteration runs meanwhile
    a2 = value(metrics, "dpbandit_checkpoint_age_seconds")
    assert a2 >= a1 + 0.25
    t0 = time.monotonic()
    svc.run()
    elapsed = time.monotonic() - t0
    assert value(metrics, "dpbandit_checkpoints_total", reason="end") == 1
    assert value(metrics, "dpbandit_checkpoint_age_seconds") < elapsed  # reset by that snapshot
