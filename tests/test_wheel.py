"""The installed package is ``streaming_dpbandit/`` alone: its wheel holds no helpers of the
tests (``dpbandit_testing/`` stays in the repository), and the wheel, unpacked over the
project's dependencies with no checkout on the path, imports and runs ``make run``'s job (the
embedded default of ``dpbandit serve``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # builds a wheel (≈ 5-15 s) and serves 2,000 events


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of what a source distribution holds, helpers included."""
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("streaming_dpbandit", "dpbandit_testing"):
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (path,) = work.glob("streaming_dpbandit-*.whl")
    return path


def test_the_wheel_ships_the_package_and_no_test_helpers(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"streaming_dpbandit", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "streaming_dpbandit/cli.py" in names
    assert not [n for n in names if "testing" in n.split("/")[:-1]], "test helpers in the wheel"


def test_the_installed_wheel_runs_make_runs_job_without_the_helpers(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import importlib.util, json, sys\n"
        "import streaming_dpbandit\n"
        "from streaming_dpbandit.cli import main\n"
        "code = main(['serve', '--no-progress', '--no-metrics', '--state-dir', sys.argv[1]])\n"
        "ours = [m for m in sys.modules if m.split('.')[0] in ('streaming_dpbandit', "
        "'dpbandit_testing')]\n"
        "helpers = [m for m in ours if 'testing' in m]\n"
        "print(json.dumps({'file': streaming_dpbandit.__file__, 'code': code, 'helpers': helpers,"
        " 'findable': importlib.util.find_spec('dpbandit_testing') is not None}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env |= {"PYTHONPATH": str(site), "DPBANDIT_SIMULATION__EVENTS": "2000"}
    run = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "state")],
        cwd=tmp_path,  # no checkout on sys.path: the wheel's package or nothing
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(report["file"]).is_relative_to(site)
    assert report["code"] == 0 and report["helpers"] == [] and not report["findable"]
    assert "served 2,000 decisions" in run.stdout or "served 2000 decisions" in run.stdout
