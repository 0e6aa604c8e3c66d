"""End-to-end audits (issue 31 item 4, docs/privacy/audits.md "End-to-end audits"): the quick
profile of ``dpbandit audit``. Every real calibration passes with a sharp bound; halved noise, the
two wrong Peeling accountants, the under-counted compositions and the sensitivities without the
reward clip are each caught (empirical ε lower bound above the claimed ε at 95 % confidence).

Fixed seeds (the mechanisms' ``seed``); the quick profile's runs are chosen so that every outcome
has a margin (docs/privacy/audits.md, "Power").
"""

import json
import math

import numpy as np
import pytest

from streaming_dpbandit.cli import main
from streaming_dpbandit.experiments import end_to_end_audits as e2e

CASES = [(m, v) for m in e2e.MECHANISMS.values() for v in m.variants]


@pytest.mark.slow  # 12 audits, ~20 s on one core (docs/privacy/audits.md)
@pytest.mark.parametrize("mech, variant", CASES, ids=[f"{m.name}-{v.name}" for m, v in CASES])
def test_real_calibration_passes_and_every_mutant_is_caught(mech, variant):
    res = e2e.run_one(mech, variant, mech.runs["quick"])
    r = res.result
    assert res.ok, res.to_dict()
    assert r.alpha == 0.05 and r.n == mech.runs["quick"]
    if variant.expect == "pass":
        assert not res.caught and r.epsilon_lb <= r.claimed_epsilon
        # sharp, not vacuous (the house's floor, test_privacy_audit.py): expected 0.85 (private-
        # lasso: gaussian_power(0.995, 1.365, 1e-3, 1e5) = 1.16) to 0.97 of the claim at the
        # quick runs, s.d. ≈ 0.05 of it with the pilot's choice of event: > 3 s.d. above 0.7
        assert r.epsilon_lb > 0.7 * r.claimed_epsilon, res.to_dict()
    else:
        assert res.caught and r.epsilon_lb > r.claimed_epsilon
    # the pair attains the sensitivity of the configured clips (not a mutant's belief)
    f = res.facts
    assert f["attained_sensitivity"] <= f["sensitivity"] * (1 + 1e-12)
    assert f["attained_sensitivity"] >= 0.98 * f["sensitivity"]


def test_every_audit_has_the_three_kinds_of_mutant():
    """Issue 31: halved noise and a wrong accountant (under-counted composition) for each; the
    Gram releases also a sensitivity without the reward clip."""
    for mech in e2e.MECHANISMS.values():
        names = {v.name for v in mech.mutants}
        assert "halved-noise" in names
        assert all(v.expect == "caught" for v in mech.mutants)
    assert {v.name for v in e2e.MECHANISMS["fliphat"].mutants} >= {
        "selection-charged-rho",
        "selection-charged-nothing",
    }
    for name in ("dp-linucb", "private-lasso"):
        assert "no-reward-clip-sensitivity" in {v.name for v in e2e.MECHANISMS[name].mutants}


def test_a_mutant_is_undone_with_its_cached_calibration():
    """The patched accountant changes the real calibration only inside the mutant (the cached
    PLD ratio is cleared on entry and exit)."""
    from streaming_dpbandit.privacy.peeling_accounting import peeling_pld_ratio

    real = peeling_pld_ratio(1, 1, 2.0, 1e-6)
    assert math.isclose(real, 2.0 / 3.0, rel_tol=2e-3)  # s = 1: the selection 2ρ + value ρ
    mech = e2e.MECHANISMS["fliphat"]
    by_name = {v.name: v for v in mech.mutants}
    with by_name["selection-charged-rho"].active(mech.caches):
        assert math.isclose(peeling_pld_ratio(1, 1, 2.0, 1e-6), 1.0, rel_tol=2e-3)
    with by_name["selection-charged-nothing"].active(mech.caches):
        assert math.isclose(peeling_pld_ratio(1, 1, 2.0, 1e-6), 2.0, rel_tol=2e-3)
    assert peeling_pld_ratio(1, 1, 2.0, 1e-6) == real


def _laplace_setup(params):
    """A toy mechanism for the plug-in test: Laplace(1/ε) on a count, ε = 1, D = 0 vs D′ = 1."""
    scale = 1.0 * params.get("noise_scale_multiplier", 1.0)

    def sampler(which, k, rng):
        return which + rng.laplace(0.0, scale, k)

    return e2e.Trials(1.0, 0.0, sampler, {"sensitivity": 1.0, "attained_sensitivity": 1.0})


def test_a_new_mechanism_plugs_in_and_an_unexpected_outcome_exits_1(tmp_path, monkeypatch):
    """Adding a mechanism is one registration; a mutant that is not caught fails the command."""
    registry = {}
    monkeypatch.setattr(e2e, "MECHANISMS", registry)
    toy = e2e.AuditedMechanism(
        name="toy-laplace",
        title="Laplace count",
        setup=_laplace_setup,
        mutants=(e2e.HALVED_NOISE, e2e.Mutant("no-op", "changes nothing (must be caught)")),
        runs={"quick": 20_000, "full": 20_000},
        seed=7,
    )
    e2e.register(toy)
    with pytest.raises(ValueError, match="already registered"):
        e2e.register(toy)
    out = tmp_path / "audit.json"
    rc = main(["audit", "--quick", "--no-progress", "--json", str(out)])
    assert rc == 1  # the no-op "mutant" passes: an unexpected outcome
    report = json.loads(out.read_text())
    assert report["profile"] == "quick" and report["confidence"] == 0.95
    assert report["all_ok"] is False
    got = {r["variant"]: (r["caught"], r["ok"]) for r in report["results"]}
    assert got == {"real": (False, True), "halved-noise": (True, True), "no-op": (False, False)}


def test_audit_command_writes_the_report(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["audit", "--quick", "--mechanism", "fliphat", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fliphat" in text and "selection-charged-rho" in text and "CAUGHT" in text
    report = json.loads(out.read_text())
    assert report["all_ok"] and report["noise_backend"] == "fast"
    rows = {r["variant"]: r for r in report["results"]}
    assert set(rows) == {
        "real",
        "selection-charged-rho",
        "selection-charged-nothing",
        "halved-noise",
    }
    assert rows["real"]["epsilon_lb"] <= rows["real"]["claimed_epsilon"] == 2.0
    assert np.isclose(rows["real"]["facts"]["loss_on_event"], 2.0, rtol=2e-3)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["audit", "--mechanism", "nope"], "--mechanism: unknown 'nope'"),
        (["audit", "--mechanism", ","], "--mechanism: unknown"),
        (["audit", "--json", "/no/such/dir/a.json"], "does not exist"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
