"""A state directory written before the restructuring of ``stream/`` (issue 23) still loads:
today's service resumes from its snapshot and ledger and ends exactly where an uninterrupted
run of the old code ended (tests/data/legacy_state/make.py says how the files were made)."""

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dpbandit_testing.stream_helpers import decisions, ledger_digests, run_file
from streaming_dpbandit.stream.reporting import learned_state_bytes
from streaming_dpbandit.stream.service import ServiceStartError

DATA = Path(__file__).resolve().parents[1] / "data" / "legacy_state"


def test_a_snapshot_and_ledger_of_the_old_code_resume_to_the_same_end(tmp_path):
    expected = json.loads((DATA / "expected.json").read_text())
    stream = tmp_path / "stream.jsonl"
    stream.write_bytes(gzip.decompress((DATA / "stream.jsonl.gz").read_bytes()))
    state = tmp_path / "state"
    shutil.copytree(DATA / "state", state)
    before = ledger_digests(state)
    assert before and before == expected["ledger_digests"][: len(before)]

    # Issue 35 made FLIPHAT's defaults eta "auto" and warm_start "auto" (a warm-started η = ½
    # for standardised contexts): under today's defaults the old state is refused, naming both
    # (and the snapshot's eta); with the old behaviour stated it resumes.
    with pytest.raises(ServiceStartError, match=r"eta: the snapshot has 0\.0001, warm_start\)"):
        run_file(state, stream, **expected["settings"])
    svc, transport, summary = run_file(
        state, stream, policy={"eta": 1e-4, "warm_start": False}, **expected["settings"]
    )

    assert 0 < len(decisions(transport)) < expected["events"]  # resumed, not restarted
    assert summary["bandits"]["shop"]["stats"]["decided"] == expected["events"]
    # The old stream ends with a heartbeat stamped 2100-01-01 (the simulated source's old
    # end-of-stream mark): today it is dead-lettered (issue 31: a heartbeat from the future
    # moves no clock). It was the last record; with it, the old code's join clock ended there.
    dead = [json.loads(v) for v in transport.outputs.get("dpbandit.dead-letter", [])]
    assert [d["reason"] for d in dead].count("event_time_out_of_range") == 1
    assert json.loads(dead[-1]["payload"])["event_time"] == 4102444800.0
    svc.bandits["shop"].join.feedback_watermark = 4102444800.0  # everything else is the same
    states = {name: rt.state_dict() for name, rt in svc.bandits.items()}
    for st in states.values():  # the parameters issue 35 added, set above as the old code ran,
        assert st["policy"]["params"].pop("warm_start") is False
        assert st["policy"]["params"].pop("cold_contributions") == "auto"
        # and the state issue 35 added, unused by this configuration
        pol = st["policy"]
        assert pol.pop("start_models") == {} and pol.pop("scale_q") is None
        assert not np.asarray(pol.pop("scale_hist")).any()
    learned = learned_state_bytes(states)
    assert hashlib.sha256(learned).hexdigest() == expected["state_bytes_sha256"]
    assert ledger_digests(state) == expected["ledger_digests"]


def test_the_legacy_state_is_refused_under_another_configuration(tmp_path):
    """The snapshot really is read (its fingerprint is checked), not silently replaced."""
    from dpbandit_testing.stream_helpers import bandit_config

    stream = tmp_path / "stream.jsonl"
    stream.write_bytes(gzip.decompress((DATA / "stream.jsonl.gz").read_bytes()))
    state = tmp_path / "state"
    shutil.copytree(DATA / "state", state)
    with pytest.raises(ServiceStartError, match="changed since the snapshot"):
        run_file(state, stream, bandit=bandit_config(s=5), max_batch=64)
