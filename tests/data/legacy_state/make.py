"""How the files next to this script were made: by the code of commit a95fd5c (before the
restructuring of ``stream/``, issue 23), run as

    PYTHONPATH=<tree at a95fd5c>:<tree at a95fd5c>/tests python tests/data/legacy_state/make.py

* ``stream.jsonl.gz`` — a recorded input, gzipped (contexts and feedback of bandit ``shop``);
* ``state/`` — the state directory (snapshot + ledger) of a service over that input that
  crashed after 18 polls (no final snapshot: the last one is a release's);
* ``expected.json`` — what an uninterrupted service over the same input learned (a digest of
  ``Service.state_bytes()``) and released (the ledger's content digests).

``tests/stream/test_legacy_state.py`` resumes today's service from ``state/`` and checks that it
ends exactly where the uninterrupted run of the old code ended.
"""

import gzip
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

try:  # a tree with the test helpers in the package
    from dpbandit_testing.stream_helpers import ledger_digests, record_stream, run_file
except ImportError:  # the tree the files were made with (a95fd5c): tests/ on PYTHONPATH
    from stream_helpers import ledger_digests, record_stream, run_file

HERE = Path(__file__).resolve().parent
EVENTS = 800
CRASH_AFTER = 18
SETTINGS = {"max_batch": 64}


def main() -> None:
    stream = HERE / "stream.jsonl"
    with tempfile.TemporaryDirectory() as tmp:
        record_stream(stream, EVENTS, seed=3, state_dir=Path(tmp) / "rec")
        full = Path(tmp) / "full"
        svc, _, _ = run_file(full, stream, **SETTINGS)
        expected = {
            "state_bytes_sha256": hashlib.sha256(svc.state_bytes()).hexdigest(),
            "ledger_digests": ledger_digests(full),
            "events": EVENTS,
            "crash_after": CRASH_AFTER,
            "settings": SETTINGS,
        }
    state = HERE / "state"
    shutil.rmtree(state, ignore_errors=True)
    run_file(state, stream, crash_after=CRASH_AFTER, **SETTINGS)
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    (HERE / "stream.jsonl.gz").write_bytes(gzip.compress(stream.read_bytes(), mtime=0))
    stream.unlink()
    print(sorted(p.name for p in state.iterdir()), file=sys.stderr)


if __name__ == "__main__":
    main()
