"""Issue 21 (Types): a library user's strictly type-checked script gets real types back.

The package ships ``py.typed``; before the public API was annotated, ``mypy --strict`` on a
ten-line script reported errors and ``pull()`` returned ``Any``. The script
(``tests/data/typed_user_script.py``) uses the River interface, a batch decision and the
accountant; mypy checks it strictly as a user would, with the package importable as an installed
one (on ``PYTHONPATH``, so mypy reads its annotations and reports only the script's errors).
The package's own modules are checked strictly by the test command's mypy run
(``[tool.mypy]`` in pyproject.toml).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve().parent / "data" / "typed_user_script.py"


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory):
    work = tmp_path_factory.mktemp("typed")
    (work / "user_script.py").write_text(SCRIPT.read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("MYPYPATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "user_script.py",
        ],
        cwd=work,  # no configuration file there: the user's own strict settings only
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return run.stdout + run.stderr, run.returncode


def test_user_script_has_no_type_errors(mypy_report):
    text, status = mypy_report
    errors = [line for line in text.splitlines() if ": error:" in line]
    assert errors == [], "\n".join(errors[:40]) + f"\n... {len(errors)} errors"
    assert status == 0, text[-2000:]


def test_public_calls_return_real_types(mypy_report):
    text, _ = mypy_report
    revealed = [t.replace("builtins.", "") for t in re.findall(r'Revealed type is "([^"]+)"', text)]
    assert len(revealed) == 4, text[-2000:]
    policy, arm, arms, epsilon = revealed
    assert policy.endswith(".LinUCBDisjoint")  # the class, not Any from the lazy package
    assert arm == "str"  # pull() returns the caller's arm id type, not Any
    assert arms.startswith("numpy.ndarray[") and "int" in arms  # an integer array, not Any
    assert epsilon == "float | None"
