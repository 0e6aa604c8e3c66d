"""``dpbandit gateway`` without a broker: the real process, a real HTTP client (httpx), the
learner in the process (the embedded default). Personalizer's routes and shapes, a 4xx JSON error
naming the field for every bad field, idempotent event ids, deferred activation, learning to a
released model, and a restart that remembers every event."""

from __future__ import annotations

import json
import time

import pytest

from .conftest import RANK, activate_path, bandit, free_port, rank_body, reward_path


def config(tmp_path, **gateway) -> dict:
    return {
        "bandits": {"shop": bandit()},
        "snapshots": {"directory": str(tmp_path / "state"), "interval_s": 1.0},
        "gateway": {"port": free_port(), "heartbeat_s": 0.2, **gateway},
        "log_level": "INFO",
    }


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """One embedded gateway for the request-level tests of this module."""
    from .conftest import GatewayProcess

    d = tmp_path_factory.mktemp("gw")
    gp = GatewayProcess(config(d), d).start()
    yield gp
    gp.stop()


def _error(r, status: int, target: str, inner: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["target"] == target, err
    assert err["message"]
    if inner is not None:
        assert err["innerError"]["code"] == inner, err
    return err


def test_rank_answers_in_personalizers_shape(gateway):
    r = gateway.client.post(RANK, json=rank_body(1, excludedActions=["a2"]))
    assert r.status_code == 201, r.text
    out = r.json()
    assert set(out) == {"ranking", "eventId", "rewardActionId"}
    assert out["eventId"] == "ev-1"
    ranking = out["ranking"]
    assert ranking[0]["id"] == out["rewardActionId"]
    assert sorted(a["id"] for a in ranking) == ["a0", "a1", "a2"]
    # the initial model ties every allowed action: uniform over the two not excluded
    probs = {a["id"]: a["probability"] for a in ranking}
    assert probs["a2"] == 0.0 and ranking[-1]["id"] == "a2"
    assert probs["a0"] == probs["a1"] == 0.5
    assert r.headers["x-dpbandit-model-version"] == "0"
    # no eventId: the gateway makes one
    r = gateway.client.post(RANK, json={"actions": [{"id": "x"}]})
    assert r.status_code == 201 and len(r.json()["eventId"]) == 32


def test_openapi_document_lists_the_routes_and_shapes(gateway):
    doc = gateway.client.get("/openapi.json").json()
    paths = doc["paths"]
    assert {"/personalizer/v1.0/rank", "/personalizer/v1.0/events/{eventId}/reward",
            "/personalizer/v1.0/events/{eventId}/activate"} <= set(paths)  # fmt: skip
    schemas = doc["components"]["schemas"]
    assert {"contextFeatures", "actions", "excludedActions", "eventId", "deferActivation"} == set(
        schemas["RankRequest"]["properties"]
    )
    assert set(schemas["RankResponse"]["properties"]) == {"ranking", "eventId", "rewardActionId"}
    assert "201" in paths["/personalizer/v1.0/rank"]["post"]["responses"]


BAD_RANKS = [
    ("not json", "body"),
    ({}, "actions"),
    ({"actions": []}, "actions"),
    ({"actions": "a0"}, "actions"),
    ({"actions": [{}]}, "actions[0].id"),
    ({"actions": [{"id": ""}]}, "actions[0].id"),
    ({"actions": [{"id": "x" * 201}]}, "actions[0].id"),
    ({"actions": [{"id": 7}]}, "actions[0].id"),
    ({"actions": [{"id": "a", "features": {"t": 1}}]}, "actions[0].features"),
    ({"actions": [{"id": "a", "features": [3]}]}, "actions[0].features[0]"),
    ({"actions": [{"id": "a", "feature": []}]}, "actions[0].feature"),
    ({"actions": [{"id": "a"}, {"id": "b", "features": [{"p": 1e999}]}]},
     "actions[1].features[0].p"),
    ({"actions": [{"id": "a"}, {"id": "a"}]}, "actions[1].id"),
    ({"actions": [{"id": f"a{k}"} for k in range(51)]}, "actions"),
    ({"actions": [{"id": "a"}], "contextFeatures": {"u": 1}}, "contextFeatures"),
    ({"actions": [{"id": "a"}], "contextFeatures": ["u"]}, "contextFeatures[0]"),
    ({"actions": [{"id": "a"}], "contextFeatures": [{"u": {"v": [1, {"w": -1e999}]}}]},
     "contextFeatures[0].u.v[1].w"),
    ({"actions": [{"id": "a"}], "excludedActions": ["b"]}, "excludedActions[0]"),
    ({"actions": [{"id": "a"}], "excludedActions": ["a"]}, "excludedActions"),
    ({"actions": [{"id": "a"}], "excludedActions": "a"}, "excludedActions"),
    ({"actions": [{"id": "a"}], "eventId": ""}, "eventId"),
    ({"actions": [{"id": "a"}], "eventId": "e" * 201}, "eventId"),
    ({"actions": [{"id": "a"}], "eventId": 12}, "eventId"),
    ({"actions": [{"id": "a"}], "deferActivation": "yes"}, "deferActivation"),
    ({"actions": [{"id": "a"}], "slots": []}, "slots"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "target"), BAD_RANKS, ids=[t for _, t in BAD_RANKS])
def test_a_bad_rank_is_a_400_naming_the_field(gateway, body, target):
    content = body if isinstance(body, str) else json.dumps(body)
    r = gateway.client.post(RANK, content=content, headers={"content-type": "application/json"})
    _error(r, 400, target)


def test_bad_rewards_and_unknown_events(gateway):
    c = gateway.client
    assert c.post(RANK, json=rank_body(100)).status_code == 201
    _error(c.post(reward_path("ev-100"), json={}), 400, "value")
    _error(c.post(reward_path("ev-100"), json={"value": "1"}), 400, "value")
    _error(c.post(reward_path("ev-100"), json={"value": 1.5}), 400, "value")  # reward_bounds
    _error(c.post(reward_path("ev-100"), json={"value": 1, "extra": 1}), 400, "extra")
    _error(c.post(reward_path("ev-100"), content="{", headers={"content-type":
           "application/json"}), 400, "body")  # fmt: skip
    _error(c.post(reward_path("nope"), json={"value": 1}), 404, "eventId", "EventNotFound")
    _error(c.post(reward_path("e" * 201), json={"value": 1}), 400, "eventId")
    _error(c.post(activate_path("nope")), 404, "eventId", "EventNotFound")
    assert c.post(reward_path("ev-100"), json={"value": 1}).status_code == 204
    _error(c.post(reward_path("ev-100"), json={"value": 0}), 409, "eventId", "DuplicateReward")


def test_event_ids_are_idempotent(gateway):
    c = gateway.client
    first = c.post(RANK, json=rank_body(200))
    again = c.post(RANK, json=rank_body(200))
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    # another request under the same id is refused, not re-decided
    _error(c.post(RANK, json=rank_body(200, tier="platinum")), 409, "eventId", "EventIdConflict")


def test_deferred_activation(gateway):
    c = gateway.client
    assert c.post(RANK, json=rank_body(300, deferActivation=True)).status_code == 201
    _error(c.post(reward_path("ev-300"), json={"value": 1}), 409, "eventId", "EventNotActivated")
    assert c.post(activate_path("ev-300")).status_code == 204
    assert c.post(activate_path("ev-300")).status_code == 204  # idempotent
    assert c.post(reward_path("ev-300"), json={"value": 1}).status_code == 204


def test_probes_and_metrics(gateway):
    assert gateway.client.get("/livez").status_code == 200
    r = gateway.client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ready"
    assert {"log", "delivery", "buffer"} <= set(r.json()["checks"])
    text = gateway.client.get("/metrics").text
    for name in ("request_duration_seconds_bucket", "decisions_total", "rewards_total",
                 "buffered_records", "refused_total"):  # fmt: skip
        assert f"dpbandit_gateway_{name}" in text
    assert gateway.metric("dpbandit_gateway_decisions_total") >= 1


def _best(body: dict) -> str:
    return "a0" if body["contextFeatures"][0]["user"]["tier"] == "gold" else "a2"


def test_embedded_learner_releases_and_later_ranks_use_the_new_model(tmp_path, gateway_factory):
    """Rank → Reward → the in-process learner releases (FLIPHAT, first episode 30 rounds) →
    the gateway decides with the released model; a restart (SIGTERM) keeps every event."""
    gp = gateway_factory(config(tmp_path)).start()
    c = gp.client
    versions = []
    for i in range(45):
        body = rank_body(i)
        r = c.post(RANK, json=body)
        assert r.status_code == 201, r.text
        versions.append(int(r.headers["x-dpbandit-model-version"]))
        value = 1.0 if r.json()["rewardActionId"] == _best(body) else 0.0
        assert c.post(reward_path(f"ev-{i}"), json={"value": value}).status_code == 204
    deadline = time.monotonic() + 30
    while gp.metric("dpbandit_gateway_model_version") < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gp.metric("dpbandit_gateway_model_version") >= 1, gp.text()
    later = c.post(RANK, json=rank_body(1000))
    assert int(later.headers["x-dpbandit-model-version"]) >= 1
    assert versions[0] == 0
    answer = c.post(RANK, json=rank_body(3)).content
    assert gp.stop() == 0
    gp.start()
    # the restarted gateway remembers: the same answer, the reward already given
    assert gp.client.post(RANK, json=rank_body(3)).content == answer
    _error(gp.client.post(reward_path("ev-3"), json={"value": 1}), 409, "eventId")


def test_the_readme_curl_example(gateway):
    """The README's Rank and Reward examples, sent as they are written."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("## An HTTP front door") :]
    section = section[: section.index("\n## ", 10)]
    bodies = re.findall(r"-d '(\{.*?\})'", section, flags=re.S)
    assert len(bodies) == 2
    rank = json.loads(bodies[0].replace("\\\n", ""))
    r = gateway.client.post(RANK, json=rank)
    assert r.status_code == 201 and r.json()["rewardActionId"] in {"news", "sports"}
    reward = json.loads(bodies[1])
    assert gateway.client.post(reward_path(rank["eventId"]), json=reward).status_code == 204
