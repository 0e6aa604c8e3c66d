"""Start-up: importing the package and ``dpbandit --help`` load no heavy module (issue 24).

Checked on the import graph in a fresh interpreter, not on a time (speed is measured in bench/):
River's bandit module (≈ 1 s through scipy.stats), scipy.stats, matplotlib, Kafka, dp-accounting
and Prometheus are imported by the commands that use them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HEAVY = ("river", "scipy", "numpy", "matplotlib", "kafka", "dp_accounting", "prometheus_client")
HEAVY_FOR_POLICIES = ("river.bandit", "scipy.stats", "matplotlib", "kafka", "dp_accounting")


def loaded_after(code: str) -> set[str]:
    """Top-level names of the modules in sys.modules after running ``code`` in a fresh process."""
    probe = (
        f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)), file=sys.__stderr__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=120,
    )
    last = out.stderr.strip().splitlines()[-1]
    return set(json.loads(last))


def heavy(modules: set[str], names=HEAVY) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in names))


def test_import_package_loads_nothing_heavy():
    assert heavy(loaded_after("import streaming_dpbandit")) == []


@pytest.mark.parametrize("argv", [["--help"], ["simulate", "--help"], ["serve", "--help"]])
def test_help_loads_nothing_heavy(argv):
    code = (
        "from streaming_dpbandit.cli import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
    )
    mods = loaded_after(code)
    assert "streaming_dpbandit.cli" in mods
    assert heavy(mods, (*HEAVY, "pydantic", "streaming_dpbandit.config")) == []


def test_policies_do_not_load_river_bandit_or_scipy_stats():
    """The policies are River-compatible without importing River's bandit module."""
    mods = loaded_after("import streaming_dpbandit.policies")
    assert heavy(mods, HEAVY_FOR_POLICIES) == []


def test_river_registration_when_river_bandit_is_imported_later_or_first():
    later = (
        "from streaming_dpbandit.policies import FLIPHAT, LinUCB\n"
        "from river import bandit\n"
        "assert isinstance(LinUCB(d=2), bandit.base.ContextualPolicy)\n"
        "assert issubclass(FLIPHAT, bandit.base.ContextualPolicy)\n"
    )
    first = "from river import bandit\n" + later
    for code in (later, first):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


def simulate_modules(tmp_path, *args: str) -> tuple[set[str], dict]:
    """The modules a ``dpbandit simulate`` loads (fresh process) and its JSON's run."""
    out = tmp_path / "sim.json"
    argv = ["simulate", "--seeds", "1", "--jobs", "1", "--no-progress", *args]
    code = f"from streaming_dpbandit.cli import main\nmain({[*argv, '--json', str(out)]!r})\n"
    return loaded_after(code), json.loads(out.read_text())["runs"][0]


@pytest.mark.parametrize("calibration", ["certified", "paper"])
def test_simulate_of_fliphat_reports_the_pld_accountant_without_dp_accounting(
    tmp_path, calibration
):
    """The table and the JSON report the accountant of record, which may be the PLD
    accountant. FLIPHAT's ledger (one (ε, δ) component per episode) needs no convolution:
    its PLD ε is dp-accounting's value computed without importing the library (≈ 1 CPU s,
    with scipy.signal and scipy.stats), so a FLIPHAT repetition with the paper's calibration
    (P5's profile, issue 24) loads no SciPy. (The certified calibration calibrates its peeling
    noise with the PLD accountant: it needs the library.)"""
    mods, run = simulate_modules(
        tmp_path, "--policy", "fliphat", "--horizon", "600", "--env-param", "d=20",
        "--calibration", calibration,
    )  # fmt: skip
    never = ("matplotlib", "kafka", "river.bandit", "pydantic_settings", "prometheus_client")
    assert heavy(mods, never) == []
    # one pydantic model (FLIPHAT's, derived from its class), not those of the other policies
    # (their modules are not imported) and of serve
    others = [f"streaming_dpbandit.config.{m}" for m in ("matroid", "user_level")]
    policies = {m for m in mods if m.startswith("streaming_dpbandit.policies.")}
    shared = {"base", "registry", "types", "_argmax", "_river", "slate_base"}
    assert {m.rsplit(".", 1)[1] for m in policies} - shared == {"fliphat"}
    assert heavy(mods, (*others, "streaming_dpbandit.settings")) == []
    assert {"streaming_dpbandit.config.registry", "pydantic"} <= mods
    if calibration == "paper":
        assert heavy(mods, ("dp_accounting", "scipy")) == []
        # nor, for one job, a process pool; nor numpy.ma (which np.unique imports)
        assert heavy(mods, ("multiprocessing", "concurrent.futures", "numpy.ma")) == []
    from streaming_dpbandit.privacy.accountant import Accountant
    from streaming_dpbandit.privacy.ledger import ReleaseRecord

    pr = run["privacy"]
    one = ReleaseRecord("b/fit/1", "b", "n-iht+peeling", calibration, "v", True,
                        epsilon=pr["epsilon"], delta=pr["delta"], data_slice="episode:1",
                        accounting=[{"type": "eps_delta", "epsilon": pr["epsilon"],
                                     "delta": pr["delta"]}])  # fmt: skip
    assert pr["epsilon_at_delta_pld"] == Accountant._pld([one]).get_epsilon_for_delta(pr["delta"])
    assert pr["of_record"]["accountant"] == "pld"


def test_simulate_loads_dp_accounting_when_the_pld_needs_a_convolution(tmp_path):
    """A ledger of composed mechanisms (DP-LinUCB's continuous Gaussian releases, on the fast
    backend) asks dp-accounting."""
    mods, run = simulate_modules(
        tmp_path, "--policy", "dp-linucb", "--horizon", "300", "--env-param", "d=20",
        "--policy-param", "noise_backend=fast",
    )  # fmt: skip
    assert "dp_accounting" in mods
    assert run["privacy"]["epsilon_at_delta_pld"] <= run["privacy"]["epsilon"] + 1e-9
    assert run["privacy"]["of_record"]["epsilon"] <= run["privacy"]["epsilon"] + 1e-9


def test_simulate_of_the_secure_default_reports_a_renyi_guarantee(tmp_path):
    """The default (secure) backend's discrete Gaussian tree has no PLD here
    (privacy/accountant.py): its record is the zCDP (CKS) or the basic guarantee, the
    smaller, within the configured ε."""
    _, run = simulate_modules(
        tmp_path, "--policy", "dp-linucb", "--horizon", "300", "--env-param", "d=20"
    )
    pr = run["privacy"]
    assert pr["noise_backend"] == "secure" and pr["epsilon_at_delta_pld"] is None
    assert pr["of_record"]["accountant"] in ("zcdp", "basic")
    assert pr["of_record"]["epsilon"] <= pr["epsilon"] + 1e-9


def test_lazy_registries_resolve_every_entry_and_name():
    from streaming_dpbandit import envs, policies

    for module, registries in (
        (policies, (policies.REGISTRY,)),
        (envs, (envs.REGISTRY, envs.MATROID_REGISTRY)),
    ):
        for registry in registries:
            for key in registry:
                assert registry[key].name == key
        for name in module.__all__:
            assert getattr(module, name) is not None
        with pytest.raises(AttributeError):
            module.NoSuchPolicy  # noqa: B018
