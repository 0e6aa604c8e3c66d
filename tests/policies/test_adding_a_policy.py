"""Adding a policy is one module (docs/adding-a-policy.md): the toy policy below is defined in
this file only, registers itself with ``@register``, gets its configuration from its
constructor, and runs through ``simulate``, ``replay``, ``explain`` and the in-process
``serve`` — no other file names it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from streaming_dpbandit.checks import yield_checks
from streaming_dpbandit.cli import main
from streaming_dpbandit.config import CONFIGS, ConfigError, policy_config
from streaming_dpbandit.policies import REGISTRY, DecisionBatch, Policy, is_slate, register
from streaming_dpbandit.policies.base import argmax_random_ties
from streaming_dpbandit.policies.types import OpenUnit, PositiveInt
from streaming_dpbandit.replay.datasets import obd_sample
from streaming_dpbandit.stream.snapshot import SnapshotStore

NAME = "toy-mean"


def toy_class() -> type[Policy]:
    """The whole of a new policy: one class, registered where it is defined."""

    @register
    class ToyMean(Policy):
        """Score each arm by ⟨x, θ⟩, θ a running mean of x·reward (a non-private toy).

        Parameters
        ----------
        d
            Context dimension.
        step
            Weight of each new row in θ.
        seed
            Seeds the tie-break coins.
        """

        name = NAME

        def __init__(self, d: PositiveInt, step: OpenUnit = 0.1, seed: int | None = None):
            self.d = d
            self.step = step
            self.seed = seed

        @classmethod
        def _unit_test_params(cls):
            yield {"d": 4}

        def _theta(self) -> np.ndarray:
            if not hasattr(self, "_th"):
                self._th = np.zeros(self.d)
            return self._th

        def decide(self, X, event_ids=None, mask=None) -> DecisionBatch:
            X = self._check_batch(X, self.d)
            B = X.shape[0]
            rounds = np.arange(self.t + 1, self.t + B + 1, dtype=np.int64)
            scores = X @ self._theta()
            if mask is not None:
                scores = np.where(np.asarray(mask, dtype=bool), scores, -np.inf)
            arms, prop = argmax_random_ties(scores, self._coins(rounds, event_ids))
            self._t = self.t + B
            return DecisionBatch(arms, prop, rounds, np.zeros(B, dtype=np.int64), 0)

        def learn(self, contexts, rewards, rounds, ids=None) -> None:
            X = np.asarray(contexts, dtype=np.float64).reshape(-1, self.d)
            y = np.asarray(rewards, dtype=np.float64).reshape(-1)
            th = self._theta()
            for x, r in zip(X, y):
                th += self.step * (r * x - th)

        def state_dict(self) -> dict[str, Any]:
            return {"t": self.t, "theta": self._theta().tolist(), "tie_key": self._coin_key()}

        def load_state_dict(self, state: dict[str, Any]) -> ToyMean:
            self._t = int(state["t"])
            self._th = np.asarray(state["theta"], dtype=np.float64)
            self._tie_key = int(state["tie_key"])
            return self

    return ToyMean


@pytest.fixture
def toy():
    cls = toy_class()
    yield cls
    REGISTRY.remove(NAME)
    assert NAME not in REGISTRY


def test_the_registry_and_the_configuration_come_from_the_class(toy):
    assert REGISTRY[NAME] is toy and NAME in CONFIGS and not is_slate(NAME)
    cfg = policy_config(NAME, {"d": 3})
    assert cfg.params() == {"d": 3, "step": 0.1} and not cfg.private
    assert CONFIGS[NAME].model_fields["step"].description == "Weight of each new row in θ."
    with pytest.raises(ConfigError, match="step: Input should be less than 1"):
        policy_config(NAME, {"d": 3, "step": 1.5})
    with pytest.raises(ConfigError, match="d: Field required"):
        policy_config(NAME, {})
    pol = toy(**next(toy._unit_test_params()), seed=0)
    for check in yield_checks(pol):  # the generic contract every policy meets
        check(pol.clone())


def test_simulate_and_explain_run_the_toy(toy, tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = ["simulate", "--policy", f"{NAME},random", "--env-param", "d=6", "--horizon", "300",
            "--seeds", "1", "--jobs", "1", "--no-progress", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    runs = {r["policy"]: r for r in json.loads(out.read_text())["runs"]}
    assert set(runs) == {NAME, "random"} and runs[NAME]["horizon"] == 300
    capsys.readouterr()
    assert (
        main(["explain", "--policy", NAME, "--policy-param", "d=6", "--policy-param", "step=0.5"])
        == 0
    )
    explained = json.loads(capsys.readouterr().out)
    assert explained["policy"] == NAME and explained["params"]["step"] == 0.5


def test_replay_runs_the_toy_on_the_open_bandit_sample(toy, tmp_path):
    out = tmp_path / "replay.json"
    argv = ["replay", "--log", str(obd_sample("random")), "--policy", NAME,
            "--estimator", "replay", "--max-events", "600", "--json", str(out),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["key"] == NAME and run["replay"]["estimate"]["diagnostics"]["events"] == 600


def test_serve_runs_the_toy_in_process(toy, tmp_path: Path, capsys):
    settings = {
        "simulation": {"env_params": {"d": 6, "K": 3, "s_star": 2}, "events": 400},
        "bandits": {"default": {"policy": {"policy": NAME, "d": 6}, "feedback_window": 2.0}},
        "snapshots": {"directory": str(tmp_path / "state")},
        "metrics": {"enabled": False},
    }
    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump(settings))
    assert main(["serve", "--config", str(path), "--no-progress"]) == 0
    snapshot = SnapshotStore(tmp_path / "state").load()
    fingerprint = json.loads(snapshot["fingerprints"]["default"])
    assert fingerprint["policy"] == NAME and fingerprint["step"] == 0.1
    out = capsys.readouterr().out
    assert out.startswith("served 400 decisions")
    assert re.search(rf"default\s+{NAME}\s+400\s", out)  # the summary's row: every event decided
