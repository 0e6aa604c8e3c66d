import math

import pytest

from streaming_dpbandit.privacy.accountant import Accountant
from streaming_dpbandit.privacy.ledger import ReleaseRecord


def rec(i, bandit="b", comp="parallel", slice_=None, accounting=None, eps=1.0, delta=0.0, **kw):
    return ReleaseRecord(
        f"{bandit}/{i}",
        bandit,
        "m",
        "certified",
        "certified-v1",
        True,
        eps,
        delta,
        accounting or [{"type": "pure", "epsilon": eps, "count": 1}],
        data_slice=slice_ or f"s{i}",
        composition=comp,
        **kw,
    )


def test_parallel_slices_take_the_maximum_sequential_records_add():
    recs = [rec(i, eps=e) for i, e in enumerate([0.5, 1.0, 0.7])]
    recs.append(rec(9, comp="sequential", eps=0.25))
    sp = Accountant(recs).spend("b")
    assert sp.pure_epsilon == pytest.approx(1.25)
    assert sp.basic_epsilon == pytest.approx(1.25)
    assert sp.slices == 3 and sp.releases == 4


def test_records_in_one_slice_compose_sequentially():
    recs = [rec(i, slice_="same", eps=0.5) for i in range(3)]
    assert Accountant(recs).spend("b").pure_epsilon == pytest.approx(1.5)


def test_pld_of_laplace_composition_beats_basic_composition():
    k = 20
    recs = [
        rec(
            i,
            comp="sequential",
            eps=0.1,
            accounting=[{"type": "laplace", "sensitivity": 1.0, "scale": 10.0, "count": 1}],
        )
        for i in range(k)
    ]
    sp = Accountant(recs).spend("b", delta=1e-6)
    assert sp.pure_epsilon == pytest.approx(2.0)
    assert sp.epsilon_at_delta < 2.0  # advanced composition via PLD is tighter
    assert sp.rho == pytest.approx(k * 0.1**2 / 2)


def test_gaussian_rho_and_eps_delta_records():
    g = rec(
        0,
        comp="sequential",
        eps=1.0,
        delta=1e-5,
        accounting=[{"type": "gaussian", "sensitivity": 1.0, "sigma": 2.0, "count": 3}],
    )
    sp = Accountant([g]).spend("b", delta=1e-5)
    assert sp.rho == pytest.approx(3 / 8)
    assert sp.pure_epsilon is None
    # ε(δ) of 3 Gaussians with σ = 2 equals one Gaussian with σ = 2/√3
    from streaming_dpbandit.privacy.gaussian import gaussian_delta

    assert gaussian_delta(2 / math.sqrt(3), sp.epsilon_at_delta) <= 1e-5 * 1.01

    ed = rec(
        1, eps=1.0, delta=0.01, accounting=[{"type": "eps_delta", "epsilon": 1.0, "delta": 0.01}]
    )
    sp = Accountant([ed]).spend("b", delta=0.01)
    assert sp.epsilon_at_delta == pytest.approx(1.0, abs=2e-3)
    assert sp.rho is None and sp.pure_epsilon is None


def test_bandits_compose_sequentially():
    recs = [rec(0, bandit="a"), rec(1, bandit="a"), rec(0, bandit="c", eps=2.0)]
    total = Accountant(recs).spend_all()
    assert total.pure_epsilon == pytest.approx(3.0)


def test_zero_records_cost_nothing():
    sp = Accountant([rec(0, eps=0.0, accounting=[{"type": "zero"}])]).spend("b", delta=0.01)
    assert sp.pure_epsilon == 0 and sp.epsilon_at_delta == pytest.approx(0.0, abs=1e-9)


def _spend(**kw):
    from streaming_dpbandit.privacy.accountant import Spend

    base = dict(
        bandit_id="b",
        releases=3,
        pure_epsilon=None,
        basic_epsilon=3.0,
        basic_delta=3e-6,
        rho=None,
        epsilon_at_delta=None,
        target_delta=1e-6,
        calibrations=["certified"],
        dp_valid=True,
        slices=0,
    )
    base.update(kw)
    return Spend(**base)


OF_RECORD = [
    # (spend fields, accountant of record, its ε, its δ)
    ({"epsilon_at_delta": 1.2, "rho": 0.03}, "pld", 1.2, 1e-6),
    # zCDP converted at δ beats a looser PLD figure
    (
        {"epsilon_at_delta": 2.0, "rho": 0.01},
        "zcdp",
        0.01 + 2 * math.sqrt(0.01 * math.log(1e6)),
        1e-6,
    ),
    # the case: certified at ε = 1 (basic, δ = target), PLD 1.000003, ρ ⇒ 2.4
    (
        {
            "basic_epsilon": 1.0,
            "basic_delta": 0.1,
            "epsilon_at_delta": 1.000003,
            "rho": 0.424,
            "target_delta": 0.1,
        },
        "basic",
        1.0,
        0.1,
    ),
    # pure ε (δ = 0) wins a tie with PLD
    (
        {"pure_epsilon": 1.0, "basic_delta": 0.0, "basic_epsilon": 1.0, "epsilon_at_delta": 1.0},
        "pure",
        1.0,
        0.0,
    ),
    # basic composition whose Σδ exceeds the target δ is not valid at that δ
    ({"basic_epsilon": 0.5, "basic_delta": 1e-3, "epsilon_at_delta": 0.9}, "pld", 0.9, 1e-6),
    # no target δ: pure ε if it exists, else basic
    (
        {"target_delta": None, "pure_epsilon": 2.0, "basic_epsilon": 2.0, "basic_delta": 0.0},
        "pure",
        2.0,
        0.0,
    ),
    ({"target_delta": None}, "basic", 3.0, 3e-6),
]


@pytest.mark.parametrize("fields, name, eps, delta", OF_RECORD)
def test_accountant_of_record_is_the_tightest_valid_guarantee(fields, name, eps, delta):
    rec = _spend(**fields).of_record()
    assert rec["accountant"] == name
    assert rec["epsilon"] == pytest.approx(eps) and rec["delta"] == pytest.approx(delta)
    assert _spend(**fields).to_dict()["of_record"] == rec


def _zcdp_rec(comp, delta):
    return rec(0, comp="sequential", accounting=[comp], eps=10.0, delta=delta, rho=None)


def test_an_svt_type_zcdp_component_gets_no_gaussian_pld():
    """ρ-zCDP does not imply the Gaussian's profile: randomized response at ε0 = 1 is
    (ρ = ε0²/2 = 0.5)-zCDP, and its exact ε at δ = 0.3 (the worst ε0-DP profile, from
    dp-accounting) lies above the Gaussian-of-that-ρ ε the accountant reported before."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    target = 0.3
    rr = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(1.0, 0.0))
    lower = rr.get_epsilon_for_delta(target)  # a 0.5-zCDP mechanism really has this ε
    gauss = pld.from_gaussian_mechanism(1.0, sensitivity=1.0).get_epsilon_for_delta(target)
    assert gauss < lower - 0.1  # the old report (≈0.29 vs ≈0.47): unsound for such a component
    for comp in (
        {"type": "zcdp", "rho": 0.5, "mechanism": "svt"},  # an old ledger's record
        {"type": "zcdp", "rho": 0.5},
    ):
        sp = Accountant([_zcdp_rec(comp, target)]).spend("b", target)
        assert sp.epsilon_at_delta is None and sp.rdp_only
        assert sp.of_record()["epsilon"] >= lower
        assert sp.of_record()["accountant"] != "pld"
    # the SVT recorded as what it is (pure ε0) is accounted exactly: PLD = the ε0-DP profile
    pure = {"type": "pure", "epsilon": 1.0, "count": 1, "mechanism": "svt"}
    sp = Accountant([_zcdp_rec(pure, target)]).spend("b", target)
    assert sp.epsilon_at_delta == pytest.approx(lower, abs=2e-3)
    assert sp.of_record()["epsilon"] >= lower - 2e-3


def test_a_gaussian_marked_zcdp_component_keeps_its_gaussian_pld():
    from dp_accounting.pld import privacy_loss_distribution as pld

    comp = {"type": "zcdp", "rho": 0.5, "count": 3, "gaussian": True}
    sp = Accountant([_zcdp_rec(comp, 1e-6)]).spend("b", 1e-6)
    want = pld.from_gaussian_mechanism(1.0).self_compose(3).get_epsilon_for_delta(1e-6)
    assert not sp.rdp_only and sp.epsilon_at_delta == pytest.approx(want, rel=1e-2)
