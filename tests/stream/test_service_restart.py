"""Hard restarts (issue 19): secret keys persisted before the first message, a missing or
truncated ledger refused, stale snapshot temp files removed, a file whose end lies before the
snapshot's offsets refused."""

from __future__ import annotations

import pytest

from dpbandit_testing.stream_helpers import (
    BANDIT,
    bandit_config,
    decisions,
    record_stream,
    run_file,
)


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    d = tmp_path_factory.mktemp("restart-stream")
    path = d / "stream.jsonl"
    record_stream(path, 1500, seed=11, state_dir=d / "rec")
    return path


def unseeded() -> dict:
    """The production setting: no seed, so every secret key comes from OS entropy."""
    cfg = bandit_config(first_episode_len=4096)  # no release (and so no snapshot) in 1,500
    cfg.pop("seed")
    return cfg


def test_a_crash_before_the_first_snapshot_changes_no_published_decision(stream, tmp_path):
    state = tmp_path / "state"
    bandits = {BANDIT: unseeded()}
    _svc, t1, summary = run_file(state, stream, max_batch=64, crash_after=6, bandits=bandits)
    assert summary is None  # crashed: no snapshot was written by the loop
    first = {d["event_id"]: d["arm_id"] for d in decisions(t1)}
    assert len(first) >= 100
    _svc, t2, _ = run_file(state, stream, max_batch=64, bandits=bandits)
    second = {}
    for d in decisions(t2):
        second.setdefault(d["event_id"], d["arm_id"])
    assert set(first) <= set(second)
    changed = [e for e in first if first[e] != second[e]]
    assert changed == [], f"{len(changed)} of {len(first)} published decisions changed"


def test_a_bandit_added_to_the_configuration_gets_its_keys_saved_at_start(stream, tmp_path):
    from streaming_dpbandit.stream.snapshot import SnapshotStore

    state = tmp_path / "state"
    run_file(state, stream, max_batch=64, crash_after=2, bandits={BANDIT: unseeded()})
    snap = SnapshotStore(state).load()
    assert snap is not None and set(snap["bandits"]) == {BANDIT}  # saved before any message
    bandits = {BANDIT: unseeded(), "new": unseeded()}
    run_file(state, stream, max_batch=64, crash_after=1, bandits=bandits)
    snap = SnapshotStore(state).load()
    assert set(snap["bandits"]) == {BANDIT, "new"}


# -- a missing, truncated or swapped ledger ------------------------------------------------------
def _serve_cli(tmp_path, state, path) -> tuple[int, str]:
    """``dpbandit serve --file`` with the helpers' bandit; (exit status, stderr)."""
    import contextlib
    import io

    import yaml

    from streaming_dpbandit.cli import main

    cfg = {
        "bandits": {BANDIT: bandit_config()},
        "snapshots": {"directory": str(state), "interval_s": 3600},
        "metrics": {"enabled": False},
    }
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["serve", "--config", str(cfg_path), "--file", str(path), "--no-progress"])
    return code, err.getvalue()


@pytest.fixture()
def served(stream, tmp_path):
    """A state directory after a run with several releases, and its ledger's lines."""
    state = tmp_path / "state"
    _svc, _, summary = run_file(state, stream)
    assert summary["bandits"][BANDIT]["model_version"] >= 2
    return state, (state / "ledger.jsonl").read_text().splitlines(keepends=True)


@pytest.mark.parametrize("damage", ["deleted", "truncated", "emptied", "swapped"])
def test_a_missing_or_truncated_ledger_is_refused_with_one_line(stream, served, tmp_path, damage):
    state, lines = served
    ledger = state / "ledger.jsonl"
    if damage == "deleted":
        ledger.unlink()
    elif damage == "truncated":
        ledger.write_text("".join(lines[:-1]))  # whole lines: the chain itself is intact
    elif damage == "emptied":
        ledger.write_text("")
    else:  # another state directory's ledger (a different stream: different releases)
        other = tmp_path / "other.jsonl"
        record_stream(other, 800, seed=99, state_dir=tmp_path / "rec2")
        run_file(tmp_path / "other-state", other)
        ledger.write_bytes((tmp_path / "other-state" / "ledger.jsonl").read_bytes())
    code, err = _serve_cli(tmp_path, state, stream)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "ledger" in err and "Traceback" not in err


def test_an_intact_ledger_starts(stream, served, tmp_path):
    state, _ = served
    code, err = _serve_cli(tmp_path, state, stream)
    assert code == 0, err


# -- a state directory from a longer input ------------------------------------------------------
def test_serve_file_with_offsets_past_its_end_exits_with_one_line(stream, served, tmp_path):
    """Used to spin at full CPU for ever (``exhausted`` wanted exactly 0 unread records)."""
    import subprocess
    import sys

    import yaml

    state, _ = served
    short = tmp_path / "short.jsonl"
    short.write_text("".join(stream.read_text().splitlines(keepends=True)[:500]))
    cfg = {
        "bandits": {BANDIT: bandit_config()},
        "snapshots": {"directory": str(state), "interval_s": 3600},
        "metrics": {"enabled": False},
    }
    cfg_path = tmp_path / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "streaming_dpbandit.cli", "serve", "--config", str(cfg_path)]
    proc = subprocess.run(
        [*cmd, "--file", str(short), "--no-progress"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    errors = [x for x in proc.stderr.splitlines() if "error" in x]  # (besides INFO logging)
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "ends before the snapshot's offsets" in errors[0]


def test_temporary_snapshot_files_left_by_a_crash_are_removed_at_start(stream, served, tmp_path):
    """A crash while writing a snapshot leaves ``.snapshot.<pid>.tmp`` (a full snapshot with the
    secret noise key); the next start removes it."""
    state, _ = served
    stale = [state / ".snapshot.4242.tmp", state / ".snapshot.77.tmp"]
    for p in stale:
        p.write_bytes(b"x" * 1000)
    keep = state / "notes.tmp"  # not ours
    keep.write_text("x")
    run_file(state, stream)
    assert not any(p.exists() for p in stale)
    assert keep.exists() and (state / "snapshot.json").exists()
