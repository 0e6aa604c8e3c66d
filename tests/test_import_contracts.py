"""The package's layering is a contract (``[tool.importlinter]`` in pyproject.toml): the test
command runs ``lint-imports`` and fails on a broken contract — an import cycle between layers,
``stream/``, ``replay/`` or ``policies/`` importing ``experiments/`` or the CLI, ``privacy/``
or ``estimators/`` importing Kafka, Prometheus or pydantic, a module outside ``stream/kafka/``
(the transport seam) importing a Kafka client."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("lint-imports")
    exe = str(exe) if exe.exists() else shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is not installed (pip install -e '.[dev]')")
    env = dict(os.environ, PYTHONPATH=str(root), NO_COLOR="1")
    return subprocess.run(
        [exe, "--no-cache", *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_every_import_contract_is_kept():
    out = _lint_imports()
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_broken_contract_fails_the_check(tmp_path):
    """The check can fail: a contract that today's code breaks (the service imports the
    policies) is reported, with the offending import."""
    config = tmp_path / "contracts.toml"
    config.write_text(
        "[tool.importlinter]\n"
        'root_package = "streaming_dpbandit"\n'
        "[[tool.importlinter.contracts]]\n"
        'name = "the service does not import the policies"\n'
        'type = "forbidden"\n'
        'source_modules = ["streaming_dpbandit.stream"]\n'
        'forbidden_modules = ["streaming_dpbandit.policies"]\n'
    )
    out = _lint_imports("--config", str(config))
    assert out.returncode != 0
    assert "BROKEN" in out.stdout and "streaming_dpbandit.policies" in out.stdout


def test_every_package_has_a_layer():
    """Each subpackage of ``streaming_dpbandit`` stands in the top layers contract, so that an
    import between two of them is checked (``settings`` and ``commands`` once stood in none, and
    ``config`` re-exported ``settings``, which imports ``config``, unchecked)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    top = next(c for c in contracts["contracts"] if c["containers"] == ["streaming_dpbandit"])
    layered = {name.strip() for layer in top["layers"] for name in layer.split("|")}
    packages = {p.parent.name for p in (ROOT / "streaming_dpbandit").glob("*/__init__.py")}
    assert packages | {"cli"} <= layered, sorted(packages - layered)


@pytest.mark.parametrize(
    "module, line",
    [
        ("stream/scaling/partitioning.py", "from kafka.partitioner.default import murmur2"),
        ("stream/scaling/replica.py", "import confluent_kafka"),
    ],
)
def test_a_kafka_client_imported_outside_the_seam_breaks_the_contract(tmp_path, module, line):
    """The seam's contract fails on a client import anywhere else (the tree before issue 32
    had them in scaling/, sim/, replay/ and commands/), lazy imports included."""
    shutil.copytree(ROOT / "streaming_dpbandit", tmp_path / "streaming_dpbandit")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "streaming_dpbandit" / module
    path.write_text(path.read_text() + f"\n\ndef _client():\n    {line}\n")
    out = _lint_imports(root=tmp_path)
    assert out.returncode != 0
    assert "Only stream/kafka/ imports a Kafka client BROKEN" in " ".join(out.stdout.split())


def test_no_module_of_the_service_is_over_500_lines():
    """``stream/`` stays cut by concern (issue 23): no module over 500 lines."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "streaming_dpbandit" / "stream").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 500
    }
    assert not long


def test_no_test_module_imports_another():
    """Helpers that several tests share live in ``dpbandit_testing/`` (beside the package,
    not in its wheel); a test importing another test module breaks when files move."""
    import re

    pattern = re.compile(r"^\s*(from|import)\s+(tests\.|test_)", re.MULTILINE)
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert not offenders, offenders
