"""The client SDK: snapshots, decisions, report wire format and privacy wiring (spec §8, §15).

Spec: docs/specs/ldp_glb.md.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from streaming_dpbandit.ldp import (
    BudgetExceeded,
    ClientBudget,
    LDPClient,
    ModelSnapshot,
    ModelSpec,
    Report,
    SnapshotError,
    ball_radius,
    build_payloads,
    ols_tau,
)
from streaming_dpbandit.ldp.randomizers import gradients


def snap(spec, theta=None, phase="main", version=3, theta_w=None):
    if theta is None:
        theta = np.zeros(spec.d) if spec.setting == "single" else np.zeros((spec.K, spec.d))
    return ModelSnapshot("shop", "shop-abc", version, spec, theta, phase, theta_w)


def test_sdk_imports_without_kafka_prometheus_pydantic_or_scipy():
    code = (
        "import sys, streaming_dpbandit.ldp\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('kafka', 'prometheus_client', 'pydantic', 'pydantic_settings', 'scipy', 'river')]\n"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "kw, phase, size",
    [
        (dict(variant="sgd", setting="single", d=20, K=5), "main", 20),
        (dict(variant="ols", setting="single", d=20, K=5, delta=0.01), "main", 210 + 20),
        (dict(variant="sgd", setting="multi", d=20, K=3, warmup_rounds=30), "warmup", 20),
        (dict(variant="sgd", setting="multi", d=20, K=3, warmup_rounds=30), "main", 60),
        (dict(variant="sgd", setting="multi", d=20, K=3, multi_sgd_mechanism="joint"), "main", 60),
        (dict(variant="ols", setting="multi", d=4, K=3, delta=0.1, warmup_rounds=9), "warmup", 14),
        (dict(variant="ols", setting="multi", d=4, K=3, delta=0.1, warmup_rounds=9), "main", 42),
    ],
)
def test_reports_have_a_fixed_size_and_only_public_fields(kw, phase, size):
    spec = ModelSpec(epsilon=1.0, **kw)
    client = LDPClient(
        snap(spec, phase=phase), max_epsilon=1.0, max_delta=0.1, rng=np.random.default_rng(0)
    )
    rng = np.random.default_rng(1)
    keys = set()
    for i in range(20):
        ctx = rng.normal(size=(spec.K, spec.d)) * 3
        if spec.setting == "multi" and i % 2:
            ctx = ctx[0]
        choice = client.decide(ctx)
        rep = client.report(choice, reward=None if i % 3 == 0 else float(rng.normal() * 5))
        d = json.loads(rep.to_json())
        keys.add(tuple(sorted(d)))
        assert len(d["payload"]) == size == spec.payload_size(phase)
        assert len(Report.from_json(rep.to_json(encoding="f32")).payload) == size
    base = ("bandit_id", "model_id", "model_version", "msg_id", "payload", "type", "v")
    want = tuple(sorted((*base, "arm"))) if phase == "warmup" else base
    assert keys == {want}  # the arm only in the multi-param warm-up


def test_per_arm_blocks_use_half_the_budget_and_joint_uses_dk():
    """Spec §15.6: per-arm blocks at (ε/2, δ/2); ``joint`` uses r_{ε,dK}."""
    per_arm = ModelSpec(variant="sgd", setting="multi", d=20, K=3, epsilon=1.0, R=2.2, c_r=1.2)
    assert per_arm.block_privacy() == (0.5, 0.0)
    assert per_arm.radius() == pytest.approx(ball_radius(0.5, 20, 2.2), rel=1e-12)
    joint = ModelSpec(
        variant="sgd", setting="multi", d=20, K=3, epsilon=1.0, multi_sgd_mechanism="joint"
    )
    assert joint.radius() == pytest.approx(ball_radius(1.0, 60, 2.0), rel=1e-12)
    ols = ModelSpec(variant="ols", setting="multi", d=20, K=3, epsilon=1.0, delta=0.01)
    assert ols.block_privacy() == (0.5, 0.005)
    assert ols.tau() == pytest.approx(13.292, abs=5e-4)
    with pytest.raises(ValueError, match="ε ≤ 1"):  # ε/2 > 1 per arm under classical
        ModelSpec(variant="ols", setting="multi", d=2, K=3, epsilon=2.5, delta=0.01)
    ModelSpec(variant="ols", setting="multi", d=2, K=3, epsilon=2.0, delta=0.01)
    with pytest.raises(ValueError, match="ε ≤ 1"):
        ModelSpec(variant="ols", setting="single", d=2, K=3, epsilon=1.5, delta=0.01)


def test_multi_main_report_has_k_blocks_of_the_same_form():
    spec = ModelSpec(variant="sgd", setting="multi", d=4, K=5, epsilon=1.0)
    P = build_payloads(
        spec,
        "main",
        np.zeros((5, 4)),
        np.array([2, 0]),
        np.array([[0.5, 0.5, 0.5, 0.5], [1.0, 0, 0, 0]]),
        np.array([1.0, -1.0]),
        np.random.default_rng(0),
    )
    blocks = P.reshape(2, 5, 4)
    assert np.allclose(np.linalg.norm(blocks, axis=2), spec.radius(), rtol=1e-9)


def test_synthetic_blocks_average_to_zero_and_the_pulled_block_to_the_gradient():
    spec = ModelSpec(variant="sgd", setting="multi", d=2, K=3, epsilon=1.0)
    n = 100_000
    theta = np.array([[0.5, 0.0], [0.0, 0.5], [0.2, 0.2]])
    X = np.tile([0.6, 0.8], (n, 1))
    r = np.full(n, 1.0)
    P = build_payloads(spec, "main", theta, np.ones(n, int), X, r, np.random.default_rng(3))
    B = P.reshape(n, 3, 2).mean(axis=0)
    g = gradients(spec, X[:1], r[:1], theta[1])[0]
    tol = 4.5 * spec.radius() / np.sqrt(n * 2)
    assert np.abs(B[1] - g).max() < tol
    assert np.abs(B[[0, 2]]).max() < tol


def test_gradients_are_clipped_to_R_and_poisson_never_overflows():
    spec = ModelSpec(
        variant="sgd", setting="single", d=3, K=2, epsilon=1.0, link="poisson", R=1.5, c_r=3.0
    )
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    G = gradients(spec, X, rng.uniform(0, 3, 1000), np.array([1e3, -1e3, 1e3]))
    assert np.all(np.isfinite(G)) and np.linalg.norm(G, axis=1).max() <= 1.5 * (1 + 1e-12)


def test_client_refuses_snapshots_above_its_privacy_level_and_authors_code():
    spec = ModelSpec(variant="sgd", setting="single", d=2, K=2, epsilon=2.0)
    with pytest.raises(SnapshotError, match="more than this app accepts"):
        LDPClient(snap(spec), max_epsilon=1.0)
    ols = ModelSpec(variant="ols", setting="single", d=2, K=2, epsilon=1.0, delta=0.01)
    with pytest.raises(SnapshotError):
        LDPClient(snap(ols), max_epsilon=1.0)  # δ > 0 needs max_delta
    LDPClient(snap(ols), max_epsilon=1.0, max_delta=0.01)
    code = ModelSpec(
        variant="sgd",
        setting="single",
        d=2,
        K=2,
        epsilon=1.0,
        profile="authors_code",
        score_clip=20.0,
    )
    with pytest.raises(SnapshotError, match="authors' experiment code"):
        LDPClient(snap(code), max_epsilon=1.0)
    LDPClient(snap(code), max_epsilon=1.0, allow_authors_code=True)


def test_snapshot_roundtrip_and_tampered_constants_are_refused():
    spec = ModelSpec(
        variant="ols", setting="multi", d=3, K=2, epsilon=1.0, delta=0.01, warmup_rounds=10, h=0.3
    )
    s = snap(
        spec, theta=np.arange(6.0).reshape(2, 3) / 10, phase="main", theta_w=np.ones((2, 3)) / 4
    )
    back = ModelSnapshot.from_json(s.to_json())
    assert back.spec == spec and np.array_equal(back.theta, s.theta) and back.phase == "main"
    d = json.loads(s.to_json())
    d["constants"]["main"]["matrix_std"] /= 2  # a server advertising half the noise
    with pytest.raises(SnapshotError, match="differs from the derivation"):
        ModelSnapshot.from_dict(d)
    d = json.loads(s.to_json())
    d["theta"] = [[1, 2], [3, 4]]
    with pytest.raises(SnapshotError, match="shape"):
        ModelSnapshot.from_dict(d)
    d = json.loads(s.to_json())
    d["spec"]["ols_noise"] = "code"  # a reproduction switch under the paper profile
    with pytest.raises(SnapshotError):
        ModelSnapshot.from_dict(d)


def test_ties_are_broken_uniformly_at_theta_zero():
    spec = ModelSpec(variant="sgd", setting="single", d=2, K=4, epsilon=1.0)
    client = LDPClient(snap(spec), max_epsilon=1.0, rng=np.random.default_rng(0))
    arms = [client.decide(np.eye(4, 2)).arm for _ in range(4000)]
    counts = np.bincount(arms, minlength=4)
    assert counts.min() > 850  # 1000 each; a plain argmax would always say 0


def test_multi_warmup_ticket_and_elimination():
    spec = ModelSpec(variant="sgd", setting="multi", d=2, K=3, epsilon=1.0, warmup_rounds=6, h=0.2)
    client = LDPClient(snap(spec, phase="warmup"), max_epsilon=1.0, rng=np.random.default_rng(0))
    assert [client.decide(np.ones(2), ticket=t).arm for t in range(6)] == [0, 1, 2, 0, 1, 2]
    theta_w = np.array([[1.0, 0.0], [0.95, 0.0], [-1.0, 0.0]])
    live = np.array([[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]])  # arm 2 corrupted by synthetic noise
    client.update(snap(spec, theta=live, phase="main", version=4, theta_w=theta_w))
    arms = {client.decide(np.array([1.0, 0.0])).arm for _ in range(200)}
    assert arms == {0, 1}  # arm 2 eliminated by the frozen warm-up estimates; 0/1 tie


def test_older_snapshots_are_ignored():
    spec = ModelSpec(variant="sgd", setting="single", d=2, K=2, epsilon=1.0)
    client = LDPClient(snap(spec, version=5), max_epsilon=1.0)
    client.update(snap(spec, theta=np.ones(2), version=4))
    assert client.snapshot.model_version == 5


def test_budget_is_charged_per_report():
    now = [0.0]
    spec = ModelSpec(variant="sgd", setting="single", d=2, K=2, epsilon=0.5)
    budget = ClientBudget(epsilon_cap=1.0, window_s=100.0, clock=lambda: now[0])
    client = LDPClient(snap(spec), max_epsilon=1.0, budget=budget)
    for _ in range(2):
        client.report(client.decide(np.eye(2)), 1.0)
    with pytest.raises(BudgetExceeded):
        client.report(client.decide(np.eye(2)), 1.0)
    now[0] = 101.0
    client.report(client.decide(np.eye(2)), 1.0)


def test_ols_report_is_the_gaussian_mechanism_on_normalised_inputs():
    spec = ModelSpec(
        variant="ols",
        setting="single",
        d=2,
        K=1,
        epsilon=1.0,
        delta=0.01,
        context_scale=10.0,
        c_r=1.0,
    )
    client = LDPClient(snap(spec), max_epsilon=1.0, max_delta=0.01, rng=np.random.default_rng(2))
    n = 40_000
    P = np.array([client.report(client.decide([[30.0, 40.0]]), 7.0).payload for _ in range(n)])
    x = np.array([0.6, 0.8])  # (30, 40)/10 has norm 5: projected onto the unit sphere
    tau = ols_tau(1.0, 0.01)
    want = np.r_[x[0] ** 2, x[0] * x[1], x[1] ** 2, 1.0 * x]  # reward clipped to c_r = 1
    se = np.r_[[2 * tau] * 3, [tau] * 2] / np.sqrt(n)
    assert np.all(np.abs(P.mean(0) - want) < 4.5 * se)
