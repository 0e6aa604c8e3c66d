"""A row the policy refuses (issue 31 §3) cannot crash ``serve`` or lose other events.

The join de-duplicates, so no input reaches this path; the test puts a second row for an already
learned round into the bandit's learning queue mid-run, as a bug upstream of the policy would.
The service dead-letters it (``refused_by_policy``), learns every other row, and ends with
exactly the releases of the same input without the injected row.
"""

from __future__ import annotations

import numpy as np

from dpbandit_testing.stream_helpers import (
    BANDIT,
    D,
    dead_letters,
    decisions,
    ledger_digests,
    record_stream,
    settings,
)
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.stream.service import Service
from streaming_dpbandit.stream.sim.sources import FileSource
from streaming_dpbandit.stream.transport import InProcessTransport

EVENTS = 1500


def test_a_refused_row_is_dead_lettered_and_the_run_is_otherwise_unchanged(tmp_path):
    path = tmp_path / "stream.jsonl"
    record_stream(path, EVENTS, state_dir=tmp_path / "reference")
    state = tmp_path / "injected"
    source = FileSource(path, ("dpbandit.contexts", "dpbandit.feedback"))
    transport = InProcessTransport(source, keep_outputs=True)
    svc = Service(settings(state), transport, ServiceMetrics())
    svc.open()
    injected: list[int] = []
    pol = svc.bandits[BANDIT].policy
    learned: list[int] = []
    learn = pol.learn

    def spy(X, y, rounds, ids=None):  # the rounds the service gave the policy
        learn(X, y, rounds, ids)
        learned.extend(np.asarray(rounds).tolist())

    pol.learn = spy

    def progress(service):
        if not injected and pol.t > 600 and learned:
            r = max(learned)  # a round of the open episode, already learned
            service.bandits[BANDIT].queue_row(np.zeros(D), 0.0, r)
            injected.append(r)

    summary = svc.run(progress)
    assert injected
    assert len(decisions(transport)) == EVENTS
    stats = summary["bandits"][BANDIT]["stats"]
    assert stats["refused_rows"] == 1
    refused = [d for d in dead_letters(transport) if d["reason"] == "refused_by_policy"]
    assert len(refused) == 1 and f"[{injected[0]}]" in refused[0]["detail"]
    # every other row was learned: the same releases as the run without the injected row
    assert ledger_digests(state) == ledger_digests(tmp_path / "reference")
    assert len(ledger_digests(state)) >= 2
