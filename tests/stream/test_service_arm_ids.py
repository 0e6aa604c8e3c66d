"""The service carries arm ids to per-arm models (issue 21): decisions follow the arm, not its
position among the candidates; shared contexts need no catalogue for such a policy."""

import json

import numpy as np
import pytest

from streaming_dpbandit.settings import BanditSettings
from streaming_dpbandit.stream.bandit import BanditRuntime
from streaming_dpbandit.stream.parsing import BadInput, Pending
from streaming_dpbandit.stream.schemas import ContextEvent


def runtime(arms=None):
    b = BanditSettings.model_validate(
        {
            "policy": {"policy": "linucb-disjoint", "d": 2, "beta": 0.0, "batch_size": 64},
            "arms": arms,
            "seed": 3,
        }
    )
    pol = b.policy.build(seed=3)
    # a learned model: "good" pays 1 per unit of x₀, "bad" loses, "meh" pays a little
    x = np.array([[1.0, 0.0]] * 20)
    for arm, r in (("good", 1.0), ("bad", -1.0), ("meh", 0.2)):
        pol.learn_arms(x, np.full(20, r), [arm] * 20)
    pol.decide(np.zeros((64, 1, 2)), arm_ids=["good"])  # a batch of decisions is over
    pol.refit()
    return BanditRuntime("shop", b, pol)


def event(i, ids, shared=True):
    body = {"v": 1, "event_id": f"e{i}", "bandit_id": "shop", "event_time": 1.0 + i}
    if shared:
        body |= {"shared": [1.0, 0.0], "arm_ids": ids}
    else:
        body["arms"] = [{"arm_id": a, "features": [1.0, 0.0]} for a in ids]
    return ContextEvent.model_validate(json.loads(json.dumps(body)))


@pytest.mark.parametrize("shared", [True, False])
def test_decisions_follow_arm_ids_across_changing_candidate_sets(shared):
    rt = runtime()
    sets = [["bad", "good"], ["good", "bad", "meh"], ["meh", "new", "good"], ["bad", "meh"]]
    batch = []
    for i, ids in enumerate(sets):
        ev = event(i, ids, shared)
        X, got = rt.encode(ev)
        batch.append(Pending(ev, X, got, 0.0))
    out = [json.loads(m) for m in rt.decide_messages(batch)]
    assert [d["arm_id"] for d in out] == ["good", "good", "good", "meh"]
    assert [d["arm_index"] for d in out] == [1, 0, 2, 1]
    assert "new" in rt.policy.arm_ids  # a new candidate got a cold model


def test_shared_context_of_the_wrong_width_and_catalogue_checks():
    with pytest.raises(BadInput) as err:
        runtime().encode(
            ContextEvent.model_validate(
                {
                    "v": 1,
                    "event_id": "x",
                    "bandit_id": "shop",
                    "event_time": 1.0,
                    "shared": [1.0, 0.0, 2.0],
                    "arm_ids": ["a"],
                }
            )
        )
    assert err.value.reason == "wrong_dimension"
    with pytest.raises(BadInput) as err:
        runtime(arms=["good", "bad"]).encode(event(0, ["good", "zz"]))
    assert err.value.reason == "unknown_arm"
