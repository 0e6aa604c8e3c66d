"""Every policy parameter given on the command line reaches the policy that runs (issue 22 §3).

``simulate`` and ``replay`` turn ``--policy-param`` into run specifications that are rebuilt in
the worker (``public_params()``); a parameter dropped on the way silently runs the default (as
``dp-linucb noise=wishart`` once ran the Gaussian mechanism). For every parameter of every
policy, this gives a valid non-default value through the real CLI, captures the run
specifications at the point where the simulation/replay would start, builds the policies exactly
as the runner does and checks the value arrived.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path

import numpy as np
import pytest

from streaming_dpbandit import cli
from streaming_dpbandit.config import CONFIGS
from streaming_dpbandit.experiments import runner
from streaming_dpbandit.replay import evaluate

OBD = Path(__file__).resolve().parents[2] / "streaming_dpbandit" / "data" / "obd"
RANDOM = str(OBD / "random" / "men")

SLATE = {"dpucb-mat", "dpts-mat"}
#: set by the command itself, not by --policy-param (ε by --epsilon; seeds per repetition;
#: d is the environment's or the log's; the table's probabilities are tested through from_log
#: in test_replay_cli)
NOT_PARAMS = {"epsilon", "seed", "d", "probabilities"}


#: parameters valid only together with another one (each refusal is a clear one-line error)
COMPANIONS = {
    ("dp-linucb", "shift"): {"noise": "wishart"},
    ("fliphat", "clip_contexts"): {"calibration": "paper"},
    ("fliphat", "max_episode_len"): {"first_episode_len": 1},  # a cap must be ≥ N₀
    ("ldp-gloc", "profile"): {"setting": "multi"},
    **{
        ("ldp-glb", k): {"profile": "authors_code"}
        for k in (
            "ols_shift",
            "normalise",
            "clip_reward",
            "score_clip",
            "ols_noise",
            "ball_dim",
            "warmup_variant",
        )
    },
}
#: what the environment (simulate) or a user (replay) must supply for a policy to build
SIM_ENV = {"private-lasso": ["--env", "privatelasso-m", "--horizon", "2000"]}
REPLAY_REQUIRED = {"private-lasso": {"s0": 5, "clip_l2": 1.0, "reward_bound": 1.0,
                                     "horizon": 4000}}  # fmt: skip


#: parameters replay refuses with a clear line (they need the simulation's environment)
SIM_ONLY: dict[str, tuple] = {}


def _kv(params: dict) -> list[str]:
    return [x for k, v in params.items() for x in ("--policy-param", f"{k}={json.dumps(v)}")]


class Captured(Exception):
    def __init__(self, specs):
        super().__init__("captured")
        self.specs = specs


def _choices(annotation) -> list:
    """The values a field's annotation admits, for Literal and bool; else None."""
    args = typing.get_args(annotation)
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return list(args)
    if annotation is bool:
        return [True, False]
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _choices(inner[0])
    return None


def _base_type(annotation):
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner[0] if len(inner) == 1 else None
    return annotation


def candidates(info) -> list:
    """Non-default values to try for one pydantic field, most likely valid first."""
    default = None if info.is_required() else info.default
    choices = _choices(info.annotation)
    if choices is not None:
        return [c for c in choices if c != default]
    t = _base_type(info.annotation)
    if t is int:
        base = 3 if default is None else int(default)
        return [base + 1, base * 2, 2, 64, 1]
    if t is float:
        if default is None:
            return [0.5, 2.0, 0.05]
        return [default * 0.5, default * 2.0, default + 0.5, 0.3]
    if t is str:
        return ["other"]
    return []  # lists, dicts, nested models: structured values tested elsewhere


def _value_arrived(policy, field: str, value) -> bool:
    got = getattr(policy, field, "<missing>")
    if isinstance(value, float) or isinstance(got, float):
        return got is not None and got != "<missing>" and np.isclose(float(got), float(value))
    return got == value


def _simulate_specs(monkeypatch, name, key, value):
    def fake(env, specs, **kw):
        raise Captured(specs)

    monkeypatch.setattr(runner, "simulate", fake)
    argv = ["simulate", "--policy", name, "--horizon", "500", "--seeds", "1", "--no-progress",
            "--env-param", "d=20", *SIM_ENV.get(name, []),
            *_kv({**COMPANIONS.get((name, key), {}), key: value})]  # fmt: skip
    try:
        code = cli.main(argv)
    except Captured as c:
        return c.specs
    assert code == 2, f"simulate {name} {key}={value}: exit {code}"
    return None  # an invalid combination for this policy: try the next candidate


def _replay_specs(monkeypatch, name, key, value):
    def fake(reader, specs, **kw):
        raise Captured(specs)

    monkeypatch.setattr(evaluate, "replay_log", fake)
    argv = ["replay", "--log", RANDOM, "--policy", name, "--estimator", "replay",
            "--no-progress", *_kv({**REPLAY_REQUIRED.get(name, {}),
                                   **COMPANIONS.get((name, key), {}), key: value})]  # fmt: skip
    if name == "table":
        argv += ["--policy-param", f"from_log={RANDOM}"]
    try:
        code = cli.main(argv)
    except Captured as c:
        return c.specs
    assert code == 2, f"replay {name} {key}={value}: exit {code}"
    return None


def _check_policy(monkeypatch, capsys, command: str, name: str):
    get_specs = _simulate_specs if command == "simulate" else _replay_specs
    fields = CONFIGS[name].model_fields
    exercised, missing, lost = [], [], []
    for key, info in fields.items():
        if key in ("policy", "private") or key in NOT_PARAMS:
            continue
        if command == "replay" and key in REPLAY_REQUIRED.get(name, {}):
            continue
        if command == "simulate" and key == "horizon":  # --horizon
            continue
        for value in candidates(info):
            specs = get_specs(monkeypatch, name, key, value)
            capsys.readouterr()
            if specs is None:
                continue
            for spec in specs:
                pol = spec.build(1) if command == "replay" else runner.build_policy(spec, 1)
                if not _value_arrived(pol, key, value):
                    lost.append(f"{spec.key}: {key}={value!r} ran as {getattr(pol, key, None)!r}")
            exercised.append(key)
            break
        else:
            missing.append(key)
    return exercised, missing, lost


SIM_POLICIES = sorted(set(CONFIGS) - SLATE - {"table"})
REPLAY_POLICIES = sorted(set(CONFIGS) - SLATE)


@pytest.mark.parametrize("name", SIM_POLICIES)
def test_every_simulate_policy_param_arrives(name, monkeypatch, capsys):
    _exercised, missing, lost = _check_policy(monkeypatch, capsys, "simulate", name)
    assert not lost, lost
    structured = {
        k
        for k, info in CONFIGS[name].model_fields.items()
        if not candidates(info) and k not in ("policy", "private")
    }
    # every scalar parameter got a valid non-default value (structured ones are tested elsewhere)
    assert set(missing) <= structured | NOT_PARAMS, missing


@pytest.mark.parametrize("name", REPLAY_POLICIES)
def test_every_replay_policy_param_arrives(name, monkeypatch, capsys):
    _exercised, missing, lost = _check_policy(monkeypatch, capsys, "replay", name)
    assert not lost, lost
    structured = {
        k
        for k, info in CONFIGS[name].model_fields.items()
        if not candidates(info) and k not in ("policy", "private")
    }
    assert set(missing) <= structured | NOT_PARAMS | set(SIM_ONLY.get(name, ())), missing


def test_dp_linucb_wishart_reaches_the_simulation(tmp_path, capsys):
    """The issue's reproduction: the JSON names the mechanism and the regret differs."""
    js = tmp_path / "r.json"
    argv = ["simulate", "--policy", "dp-linucb", "--horizon", "400", "--seeds", "1",
            "--no-progress", "--env-param", "d=10", "--json", str(js)]  # fmt: skip
    assert cli.main([*argv, "--policy-param", "noise=wishart"]) == 0
    run = json.loads(js.read_text())["runs"][0]
    assert run["params"]["noise"] == "wishart"
    assert cli.main(argv) == 0
    gauss = json.loads(js.read_text())["runs"][0]
    assert gauss["params"]["noise"] == "gaussian"
    assert gauss["final_regret"]["mean"] != run["final_regret"]["mean"]


def test_simulate_json_keeps_every_repetition(tmp_path, capsys):
    js = tmp_path / "r.json"
    argv = ["simulate", "--policy", "linucb,random", "--horizon", "300", "--seeds", "3",
            "--no-progress", "--env-param", "d=10", "--json", str(js)]  # fmt: skip
    assert cli.main(argv) == 0
    for run in json.loads(js.read_text())["runs"]:
        finals = run["final_regret"]["per_run"]
        curves = np.array(run["curve"]["per_run"])
        assert len(finals) == 3 and curves.shape == (3, len(run["curve"]["t"]))
        assert np.isclose(np.mean(finals), run["final_regret"]["mean"])
        assert np.allclose(curves.mean(axis=0), run["curve"]["mean"])
        assert np.allclose(curves[:, -1], finals)  # the curve ends at the final regret
        assert len(set(finals)) == 3  # distinct repetitions, not one copied
