"""Model broadcast without a broker: released-model export/import, the models-topic schema,
the learner's round numbering, configuration errors (docs/scaling.md, pattern 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from dpbandit_testing.broadcast_helpers import (
    broadcast_stream,
    leaked_numbers,
    run_learner_file,
)
from dpbandit_testing.stream_helpers import (
    BANDIT,
    dead_letters,
    decisions,
    ledger_digests,
    record_stream,
    run_file,
)
from dpbandit_testing.user_level_helpers import raw_ids_in, user_bandit, write_user_stream
from streaming_dpbandit.errors import ConfigError
from streaming_dpbandit.policies import FLIPHAT, RandomPolicy
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.scaling.broadcast import check_broadcast, user_hashes
from streaming_dpbandit.stream.scaling.models_topic import ModelMessage, model_message
from streaming_dpbandit.utils.serialization import dumps

D = 20
PARAMS = dict(d=D, s=3, epsilon=2.0, delta=1e-4, b_max=3.0, first_episode_len=64, swap_delay=0)


def run_policy(pol: FLIPHAT, rounds: int, seed: int = 0, record: bool = False):
    """Drive a policy over a simulated sparse-linear stream; returns its ledger records.

    ``record=True`` counts rounds with ``record_rounds`` (the learner) instead of deciding;
    the rows are then those of a uniformly random arm (what a replica might have chosen).
    """
    rng = np.random.default_rng(seed)
    beta = np.zeros(D)
    beta[:3] = [1.0, -1.0, 0.5]
    records = []
    while pol.t < rounds:
        if pol.refit_due():
            records += pol.refit()
        n = min(pol.max_decide_batch(), rounds - pol.t, 50)
        X = rng.normal(size=(n, 3, D))
        arms = rng.integers(0, 3, size=n)
        if record:
            rnds = pol.record_rounds(n)
        else:
            dec = pol.decide(X)
            rnds, arms = dec.rounds, dec.arms
        chosen = X[np.arange(n), arms]
        pol.learn(chosen, chosen @ beta + 0.1 * rng.normal(size=n), rnds)
    return records


# -- released-model export ----------------------------------------------------------------------
def test_released_model_is_exactly_each_ledger_release():
    pol = FLIPHAT(**PARAMS, bandit_id="shop", seed=3)
    assert pol.released_model() is None  # β̂ = 0 is the data-independent initial model
    rng = np.random.default_rng(1)
    seen = 0
    while pol.t < 64 * 15:
        if pol.refit_due():
            (rec,) = pol.refit()
            m = pol.released_model()
            assert m == {
                "model_version": rec.model_version,
                "release_ids": [rec.release_id],
                "payload": rec.release,
            }
            msg = json.loads(model_message("shop", pol, now=12.5).model_dump_json())
            assert msg["model"] == rec.release and msg["release_ids"] == [rec.release_id]
            # no other number than the released ones: a leaked sum, count or key fails here
            assert leaked_numbers(msg, rec.release) == []
            seen += 1
        n = min(pol.max_decide_batch(), 64)
        X = rng.normal(size=(n, 3, D))
        dec = pol.decide(X)
        chosen = X[np.arange(n), dec.arms]
        pol.learn(chosen, chosen[:, 0] + 0.1 * rng.normal(size=n), dec.rounds)
    assert seen == 3 and pol.model_version == 3
    assert pol.state_dict()["accumulators"]  # there were private statistics to leak


def test_the_leak_check_catches_a_raw_sum():
    pol = FLIPHAT(**PARAMS, bandit_id="shop", seed=3)
    run_policy(pol, 64 * 3 + 10)
    msg = json.loads(model_message("shop", pol, now=1.0).model_dump_json())
    released = pol.released_model()["payload"]
    acc = pol.state_dict()["accumulators"]
    (state,) = acc.values()
    raw = next(np.asarray(v, dtype=float).ravel() for v in state.values() if np.size(v) > 3)
    leaky = dict(msg, model=dict(msg["model"], h=raw.tolist()))
    assert leaked_numbers(msg, released) == []
    assert len(leaked_numbers(leaky, released)) > 0


# -- decide-only policies ------------------------------------------------------------------------
def test_decide_only_policy_decides_like_the_learner_with_the_same_model():
    learner = FLIPHAT(**PARAMS, seed=5)
    run_policy(learner, 64 * 7 + 3)
    model = learner.released_model()
    replica = FLIPHAT.from_released_model(model, **PARAMS, seed=5)
    X = np.random.default_rng(9).normal(size=(500, 4, D))
    ids = [f"e{i}" for i in range(500)]
    a = learner.decide_frozen(X, event_ids=ids)
    b = replica.decide_frozen(X, event_ids=ids)
    assert b.model_version == a.model_version == model["model_version"] == 3
    np.testing.assert_array_equal(a.arms, b.arms)
    np.testing.assert_array_equal(a.propensities, b.propensities)
    assert replica.t == 0  # deciding from a broadcast model consumes no rounds
    with pytest.raises(RuntimeError, match="decide-only"):
        replica.learn(X[:1, 0], np.zeros(1), np.ones(1, dtype=int))
    with pytest.raises(RuntimeError, match="decide-only"):
        replica.refit()
    with pytest.raises(RuntimeError, match="decide-only"):
        replica.record_rounds(1)
    with pytest.raises(RuntimeError, match="fresh policy"):
        learner.load_released_model(model)


def test_initial_model_before_the_first_release():
    pol = FLIPHAT.from_released_model(None, **PARAMS, seed=1)
    dec = pol.decide_frozen(np.ones((200, 4, D)), event_ids=list(range(200)))
    assert dec.model_version == 0
    np.testing.assert_allclose(dec.propensities, 0.25)  # β̂ = 0: uniform over the 4 arms
    assert 20 < np.bincount(dec.arms, minlength=4).min()


GOOD = {"model_version": 2, "release_ids": ["x"], "payload": {"indices": [1], "values": [0.5]}}


@pytest.mark.parametrize(
    "model, match",
    [
        (GOOD | {"payload": {"indices": [1], "values": [0.5], "h": [3.0]}}, "payload keys"),
        (GOOD | {"payload": {"indices": [D], "values": [0.5]}}, "indices"),
        (GOOD | {"payload": {"indices": [-1], "values": [0.5]}}, "indices"),
        (GOOD | {"payload": {"indices": [1, 1], "values": [0.5, 0.1]}}, "distinct"),
        (GOOD | {"payload": {"indices": [1], "values": [float("nan")]}}, "finite"),
        (GOOD | {"payload": {"indices": [1, 2], "values": [0.5]}}, "one length"),
        (GOOD | {"model_version": 0}, "model_version"),
        ({"payload": GOOD["payload"]}, "malformed"),
    ],
)
def test_malformed_released_models_are_refused(model, match):
    pol = FLIPHAT(**PARAMS, seed=1)
    with pytest.raises(ValueError, match=match):
        pol.load_released_model(model)
    assert pol.model_version == 0 and not getattr(pol, "_decide_only", False)


def test_policies_without_released_models_say_so():
    assert not RandomPolicy.supports_released_model
    with pytest.raises(NotImplementedError, match="released model"):
        RandomPolicy.from_released_model(GOOD, d=D, seed=0)
    with pytest.raises(NotImplementedError):
        RandomPolicy(d=D, seed=0).record_rounds(1)
    assert RandomPolicy(d=D, seed=0).released_model() is None


# -- the learner's side ------------------------------------------------------------------------
def test_recorded_rounds_follow_the_schedule_like_decisions():
    pol = FLIPHAT(**PARAMS, seed=2)
    with pytest.raises(ValueError, match="cross a model update"):
        pol.record_rounds(65)  # episode 0 has 64 rounds
    records = run_policy(pol, 64 * 7 + 1, record=True)
    assert [r.model_version for r in records] == [1, 2, 3]
    assert [r.rows_used for r in records] == [64, 128, 256]  # each row in exactly one fit
    assert pol.t == 64 * 7 + 1 and pol.model_version == 3


# -- the models-topic schema -------------------------------------------------------------------
def test_model_message_schema():
    pol = FLIPHAT(**PARAMS, bandit_id="shop", seed=4)
    assert model_message("shop", pol) is None
    run_policy(pol, 64 + 1)
    msg = model_message("shop", pol, now=100.0)
    value = json.loads(msg.model_dump_json())
    assert set(value) == {
        "v",
        "bandit_id",
        "model_version",
        "episode",
        "policy",
        "calibration",
        "model",
        "release_ids",
        "published_at",
    }
    assert value["bandit_id"] == "shop" and value["policy"] == "fliphat"
    assert value["model_version"] == value["episode"] == 1
    assert value["calibration"] == "certified" and value["published_at"] == 100.0
    assert ModelMessage.model_validate_json(msg.model_dump_json()).released_model() == (
        pol.released_model()
    )
    for bad in (
        value | {"extra": 1},
        value | {"model_version": 0},
        value | {"release_ids": []},
        {k: v for k, v in value.items() if k != "model"},
    ):
        with pytest.raises(ValidationError):
            ModelMessage.model_validate(bad)
    with pytest.raises(ValidationError):
        ModelMessage.model_validate_json(json.dumps(value).replace("100.0", "NaN"))


# -- configuration -----------------------------------------------------------------------------
FL4 = {"policy": "fliphat", "d": 4, "s": 2}


def _broadcast_settings(policy: dict, **broadcast) -> ServiceSettings:
    return ServiceSettings.model_validate(
        {
            "kafka": {"bootstrap_servers": "127.0.0.1:1"},
            "bandits": {"b": {"policy": policy}},
            "broadcast": {"role": "decider"} | broadcast,
            "metrics": {"enabled": False},
        }
    )


@pytest.mark.parametrize(
    "policy, broadcast, kafka, match",
    [
        ({"policy": "random", "d": 4}, {}, True, "cannot be served from a released model"),
        ({"policy": "linucb", "d": 4}, {}, True, "cannot be served from a released model"),
        (FL4, {"models_topic": "dpbandit.decisions"}, True, "differ"),
        (FL4, {}, False, "needs the kafka section"),
    ],
)
def test_invalid_broadcast_configurations(policy, broadcast, kafka, match):
    st = _broadcast_settings(policy, **broadcast)
    if not kafka:
        st = st.model_copy(update={"kafka": None})
    with pytest.raises(ConfigError, match=match):
        check_broadcast(st)
    check_broadcast(_broadcast_settings(FL4))  # valid


def test_cli_refuses_a_decider_for_an_unsupported_policy(tmp_path, capsys):
    from streaming_dpbandit.cli import main

    cfg = tmp_path / "x.yaml"
    cfg.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:1'}\n"
        "bandits: {b: {policy: {policy: random, d: 4}}}\n"
        "broadcast: {role: decider}\n"
        "metrics: {enabled: false}\n"
    )
    assert main(["serve", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "cannot be served from a released model" in err and "Traceback" not in err


# -- the learner on a service's own decisions equals the service --------------------------------
@pytest.mark.parametrize("user_level", [False, True], ids=["event-level", "user-level"])
def test_learner_on_the_single_services_decisions_learns_exactly_what_it_learned(
    tmp_path, user_level
):
    """Fed the decisions a single service made (with their rows), the learner numbers them by
    arrival, joins the same rewards, makes the same releases and publishes each model.

    User level: the decisions carry the keyed hash of their user (as a decision replica writes
    them), and the learner admits exactly the rows the single service admitted."""
    over = {}
    if user_level:
        stream = write_user_stream(tmp_path, events=1500)
        over = {"bandits": {BANDIT: user_bandit(max_releases_per_user=2)}}
    else:
        stream = tmp_path / "stream.jsonl"
        record_stream(stream, 3000, seed=11, state_dir=tmp_path / "rec")
    ref, ref_transport, _ = run_file(tmp_path / "ref", stream, **over)
    decs = decisions(ref_transport)
    path = tmp_path / "broadcast.jsonl"
    users = ref.bandits[BANDIT].policy if user_level else None
    broadcast_stream(stream, decs, path, users=users)
    learner, transport, summary = run_learner_file(tmp_path / "learner", path, **over)
    mine, theirs = learner.bandits[BANDIT].state_dict(), ref.bandits[BANDIT].state_dict()
    # the policy (statistics, releases, noise state), held rows and join outcomes are equal;
    # the join's id memory is not: the learner's contexts clock trails by one window, so it
    # remembers resolved ids a little longer (ReorderingJoin)
    assert dumps(mine["policy"]) == dumps(theirs["policy"])
    assert dumps(mine["held_rows"]) == dumps(theirs["held_rows"])
    assert mine["stats"] == theirs["stats"]
    assert set(mine["join"]["resolved_ids"]) >= set(theirs["join"]["resolved_ids"])
    assert ledger_digests(tmp_path / "learner") == ledger_digests(tmp_path / "ref")
    models = [json.loads(v) for v in transport.outputs["dpbandit.models"]]
    versions = [m["model_version"] for m in models]
    assert versions == list(range(1, summary["bandits"][BANDIT]["model_version"] + 1))
    assert len(versions) >= 3 - user_level
    assert summary["bandits"][BANDIT]["stats"]["decided"] == len(decs) == 3000 // (1 + user_level)
    if user_level:  # the same admissions (in the policy state above), and users were bounded
        c = learner.bandits[BANDIT].policy.user_counters()
        assert c == ref.bandits[BANDIT].policy.user_counters() and c["bounded"] > 100
        assert summary["bandits"][BANDIT]["stats"]["bounded"] == c["bounded"]
        outputs = [v.decode() for vs in transport.outputs.values() for v in vs]
        assert raw_ids_in(path.read_text() + json.dumps(outputs)) == []


def test_learner_dead_letters_decisions_without_its_users_hash_key(tmp_path):
    """A user-level learner learns only from decisions hashed with its own key: a decision
    hashed with another key (a replica with another ``key_file``) or without a user hash is
    dead-lettered, never counted, so no user's count is ever split between two keys."""
    from dpbandit_testing.stream_helpers import D, settings
    from streaming_dpbandit.stream.scaling.broadcast import BroadcastDecision, user_key_id

    bandit = user_bandit()
    st = settings(tmp_path / "cfg", bandit=bandit, broadcast={"role": "learner"})
    b = st.bandits[BANDIT]
    own = b.user_level.build(b.policy, seed=b.seed)  # the learner's key (from the seed here)
    other = b.user_level.build(b.policy, seed=b.seed + 1)
    assert user_key_id(own) != user_key_id(other)

    first = BroadcastDecision.model_validate_json(
        f'{{"event_id": "e0", "bandit_id": "{BANDIT}", "arm_id": "a0", "arm_index": 0, '
        '"propensity": 1.0, "model_version": 0, "episode": 0, "round": 0, "calibration": '
        '"certified", "policy": "fliphat", "decided_at": 1.7e9, "event_time": 1.7e9, '
        f'"features": {[0.0] * D}, "replica": "r0"}}'
    )

    def decision(i: int, pol) -> str:
        update: dict = {"event_id": f"e{i}", "event_time": 1.7e9 + i}
        if pol is not None:
            (h,), key = user_hashes(pol, ["person-001@example.org"])
            update |= {"user_hash": h, "user_key": key}
        return first.model_copy(update=update).model_dump_json(exclude_none=True)

    path = tmp_path / "decisions.jsonl"
    lines = [decision(0, own), decision(1, other), decision(2, None), decision(3, own)]
    path.write_text("".join(json.dumps({"topic": "contexts", "value": v}) + "\n" for v in lines))
    learner, transport, summary = run_learner_file(
        tmp_path / "learner", path, bandits={BANDIT: bandit}
    )
    reasons = sorted(x["reason"] for x in dead_letters(transport))
    assert reasons == ["missing_user_id", "user_key_mismatch"]
    assert summary["bandits"][BANDIT]["stats"]["decided"] == 2
    c = learner.bandits[BANDIT].policy.user_counters()
    assert c["admitted"] + c["bounded"] == 2
