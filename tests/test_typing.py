"""Issue 21 (Types): a library user's strictly type-checked script gets real types back.

The package ships ``py.typed``; before the public API was annotated, ``mypy --strict`` on a
ten-line script reported 140 errors in 28 package files and ``pull()`` returned ``Any``. The
script (``tests/data/typed_user_script.py``) uses the River interface, a batch decision and the
accountant; mypy runs on it with the package on ``MYPYPATH`` (so the package's own modules are
checked as the user's code would see them, strict, without this repository's configuration).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().parent / "data" / "typed_user_script.py"


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory):
    work = tmp_path_factory.mktemp("typed")
    (work / "user_script.py").write_text(SCRIPT.read_text())
    old = os.environ.get("MYPYPATH")
    os.environ["MYPYPATH"] = str(ROOT)
    cwd = os.getcwd()
    os.chdir(work)  # no configuration file: the user's own strict settings only
    try:
        out, err, status = mypy_api.run(
            ["--strict", "--cache-dir", str(work / ".mypy_cache"), "user_script.py"]
        )
    finally:
        os.chdir(cwd)
        if old is None:
            os.environ.pop("MYPYPATH", None)
        else:
            os.environ["MYPYPATH"] = old
    return out + err, status


def test_user_script_has_no_type_errors(mypy_report):
    text, status = mypy_report
    errors = [line for line in text.splitlines() if ": error:" in line]
    assert errors == [], "\n".join(errors[:40]) + f"\n... {len(errors)} errors"
    assert status == 0, text[-2000:]


def test_public_calls_return_real_types(mypy_report):
    text, _ = mypy_report
    revealed = [t.replace("builtins.", "") for t in re.findall(r'Revealed type is "([^"]+)"', text)]
    assert len(revealed) == 3, text[-2000:]
    arm, arms, epsilon = revealed
    assert arm == "str"  # pull() returns the caller's arm id type, not Any
    assert arms.startswith("numpy.ndarray[") and "int" in arms  # an integer array, not Any
    assert epsilon == "float | None"
