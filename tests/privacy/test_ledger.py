"""The durable ledger: round trip, torn tail, corruption, idempotence, crashes, locking."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming_dpbandit.privacy.ledger import (
    Ledger,
    LedgerConflictError,
    LedgerCorruptError,
    ReleaseRecord,
    read_ledger,
)


def record(i, eps=1.0, **kw):
    return ReleaseRecord(
        release_id=f"b/fit/{i}",
        bandit_id="b",
        mechanism="n-iht+peeling",
        calibration="certified",
        formula="certified-v1",
        dp_valid=True,
        epsilon=eps,
        delta=0.01,
        accounting=[{"type": "eps_delta", "epsilon": eps, "delta": 0.01}],
        data_slice=f"episode:{i}",
        composition="parallel",
        event_range=(2**i, 2 ** (i + 1) - 1),
        rows_used=2**i,
        model_version=i + 1,
        params={"scales": [0.1 * i]},
        release={"indices": [1, 2], "values": [0.5, -0.25]},
        **kw,
    )


def test_round_trip(tmp_path):
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as led:
        for i in range(5):
            assert led.append(record(i))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    recs, torn = read_ledger(path)
    assert torn == 0
    assert [r.to_dict() for r in recs] == [
        record(i).to_dict() | {"time": recs[i].time} for i in range(5)
    ]
    with Ledger(path) as led:
        assert len(led) == 5 and led.get("b/fit/3").model_version == 4


def test_idempotent_retry_and_conflicting_redraw(tmp_path):
    with Ledger(tmp_path / "l") as led:
        r = record(1)
        assert led.append(r)
        retry = record(1)  # a different wall-clock time, same content
        assert not led.append(retry)
        redraw = record(1)
        redraw.release = {"indices": [1, 2], "values": [0.5, -0.26]}
        with pytest.raises(LedgerConflictError):
            led.append(redraw)
        assert len(led) == 1


@given(st.integers(min_value=1, max_value=10_000))
def test_any_torn_tail_is_detected_and_repaired(tmp_path_factory, cut):
    path = tmp_path_factory.mktemp("torn") / "ledger.jsonl"
    with Ledger(path) as led:
        for i in range(4):
            led.append(record(i))
    raw = path.read_bytes()
    lines = raw.split(b"\n")[:-1]
    cut = cut % len(raw)
    path.write_bytes(raw[:cut])
    complete = sum(1 for i in range(len(lines)) if len(b"\n".join(lines[: i + 1])) + 1 <= cut)
    recs, torn = read_ledger(path)
    assert len(recs) == complete
    assert torn == cut - (len(b"\n".join(lines[:complete])) + 1 if complete else 0)
    with Ledger(path) as led:
        assert len(led) == complete and led.repaired_bytes == torn
        led.append(record(99))
    recs, torn = read_ledger(path)
    assert torn == 0 and recs[-1].release_id == "b/fit/99"


@pytest.mark.parametrize("damage", ["edit-field", "garbage", "drop-line", "reorder"])
def test_damage_before_the_last_line_is_corruption(tmp_path, damage):
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as led:
        for i in range(4):
            led.append(record(i))
    lines = path.read_bytes().split(b"\n")[:-1]
    if damage == "edit-field":
        obj = json.loads(lines[1])
        obj["record"]["epsilon"] = 0.1  # understate a spend
        lines[1] = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    elif damage == "garbage":
        lines[1] = b"{not json"
    elif damage == "drop-line":
        del lines[1]
    else:
        lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(LedgerCorruptError):
        read_ledger(path)
    with pytest.raises(LedgerCorruptError):
        Ledger(path).open()


def test_single_writer_lock(tmp_path):
    path = tmp_path / "l"
    with Ledger(path):
        with pytest.raises(RuntimeError, match="locked"):
            Ledger(path).open()


WRITER = r"""
import sys
from streaming_dpbandit.privacy.ledger import Ledger, ReleaseRecord
led = Ledger(sys.argv[1]).open()
i = len(led)
while True:
    led.append(ReleaseRecord(f"b/fit/{i}", "b", "m", "certified", "certified-v1", True, 1.0, 0.01,
                             [{"type": "eps_delta", "epsilon": 1.0, "delta": 0.01}],
                             params={"pad": "x" * 5000}))
    print(i, flush=True)
    i += 1
"""


def test_kill_9_while_appending_never_loses_an_acknowledged_record(tmp_path):
    path = tmp_path / "ledger.jsonl"
    acknowledged = -1
    rng = random.Random(3)
    for _attempt in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        first = proc.stdout.readline()  # the writer is up and has acknowledged one record
        time.sleep(rng.uniform(0.0, 0.2))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        printed = [int(x) for x in (first + out).split()]
        if printed:
            acknowledged = max(acknowledged, printed[-1])
        with Ledger(path) as led:  # repairs a torn tail, if the kill left one
            ids = [r.release_id for r in led.records()]
        assert ids == [f"b/fit/{i}" for i in range(len(ids))]
        assert len(ids) - 1 >= acknowledged  # every acknowledged (fsync'd) record survived
    assert acknowledged > 5
