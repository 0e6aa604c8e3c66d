"""Event schemas: the binary feature forms of a context event (docs/events.md) carry the same
values as the JSON lists and each malformed payload is rejected with the reason the service
dead-letters it for; the fast decision encoder writes what the Decision model writes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from streaming_dpbandit.stream.messages import context_value, encode_f64
from streaming_dpbandit.stream.schemas import (
    ContextEvent,
    Decision,
    decision_encoder,
)

X = np.array([[0.5, -1.25, 3.0], [1e-300, 2.0**60, -0.0]])


def event(**fields) -> bytes:
    base = {"v": 1, "event_id": "e", "bandit_id": "b", "event_time": 1.0}
    base.update(fields)
    return json.dumps(base).encode()


def test_binary_per_arm_features_equal_the_json_lists_bit_for_bit():
    as_json = ContextEvent.model_validate_json(context_value("e", "b", 1.0, X, ["a", "c"], "json"))
    as_f64 = ContextEvent.model_validate_json(context_value("e", "b", 1.0, X, ["a", "c"], "f64"))
    assert as_f64.candidate_ids() == as_json.candidate_ids() == ["a", "c"]
    assert as_f64.arm_features().tobytes() == as_json.arm_features().tobytes() == X.tobytes()
    assert as_f64.shared_features() is None


def test_binary_shared_context_equals_the_json_list():
    a = ContextEvent.model_validate_json(event(shared=X[0].tolist(), arm_ids=["a"]))
    b = ContextEvent.model_validate_json(event(shared_f64=encode_f64(X[0]), arm_ids=["a"]))
    assert a.shared_features().tobytes() == b.shared_features().tobytes()
    assert b.arm_features() is None


def test_url_safe_base64_is_accepted():
    text = encode_f64(X).replace("+", "-").replace("/", "_")
    ev = ContextEvent.model_validate_json(event(arm_ids=["a", "c"], arm_features_f64=text))
    assert ev.arm_features().tobytes() == X.tobytes()


@pytest.mark.parametrize(
    ("fields", "error_type"),
    [
        ({"arm_ids": ["a"], "arm_features_f64": encode_f64([np.nan, 1.0])}, "finite_number"),
        ({"arm_ids": ["a"], "arm_features_f64": encode_f64([np.inf])}, "finite_number"),
        ({"arm_ids": ["a"], "shared_f64": encode_f64([-np.inf])}, "finite_number"),
        ({"arm_ids": ["a"], "arm_features_f64": "not base64!"}, "bytes_invalid_encoding"),
        ({"arm_ids": ["a"], "arm_features_f64": "AAAA"}, "value_error"),  # 3 bytes
        ({"arm_ids": ["a"], "arm_features_f64": ""}, "value_error"),  # no values
        ({"arm_ids": ["a", "b"], "arm_features_f64": encode_f64([1.0, 2.0, 3.0])}, "value_error"),
        ({"arm_features_f64": encode_f64([1.0])}, "value_error"),  # no arm ids
        ({"arm_ids": ["a", "a"], "arm_features_f64": encode_f64([1.0, 2.0])}, "value_error"),
        (  # two forms at once
            {"arm_ids": ["a"], "arm_features_f64": encode_f64([1.0]), "shared": [1.0]},
            "value_error",
        ),
        (  # per-arm JSON carries its own ids
            {"arms": [{"arm_id": "a", "features": [1.0]}], "arm_ids": ["a"]},
            "value_error",
        ),
        ({"arm_ids": ["a"], "arm_features_f64": 17}, "bytes_type"),
    ],
)
def test_malformed_binary_features_are_rejected(fields, error_type):
    with pytest.raises(ValidationError) as err:
        ContextEvent.model_validate_json(event(**fields))
    assert err.value.errors()[0]["type"] == error_type


# -- decisions --------------------------------------------------------------------------------
ids = st.text(min_size=1, max_size=30)  # quotes, backslashes, control and non-ASCII characters
finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    bandit=ids,
    calibration=ids,
    policy=ids,
    rows=st.lists(
        st.tuples(ids, ids, st.integers(0, 10**6), finite, st.integers(0, 10**6)),
        min_size=1,
        max_size=5,
    ),
    version=st.integers(0, 10**9),
    episode=st.integers(0, 10**9),
    decided_at=finite,
)
def test_the_fast_decision_encoder_writes_what_the_model_writes(
    bandit, calibration, policy, rows, version, episode, decided_at
):
    enc = decision_encoder(bandit, calibration, policy)
    eids, arms, idx, props, rounds = (list(c) for c in zip(*rows))
    raw = enc(eids, arms, idx, props, version, [episode] * len(rows), rounds, decided_at)
    for r, (e, a, k, p, t) in zip(raw, rows):
        model = Decision(
            event_id=e,
            bandit_id=bandit,
            arm_id=a,
            arm_index=k,
            propensity=p,
            model_version=version,
            episode=episode,
            round=t,
            calibration=calibration,
            policy=policy,
            decided_at=decided_at,
        )
        assert Decision.model_validate_json(r) == model
        # the same fields in the same order as the model's own JSON
        assert list(json.loads(r)) == list(json.loads(model.model_dump_json()))


def test_the_fast_decision_encoder_refuses_non_finite_numbers():
    enc = decision_encoder("b", "certified", "fliphat")
    with pytest.raises(ValueError, match="finite"):
        enc(["e"], ["a"], [0], [float("nan")], 1, [1], [1], 5.0)
    with pytest.raises(ValueError, match="finite"):
        enc(["e"], ["a"], [0], [1.0], 1, [1], [1], float("inf"))


def test_the_binary_example_of_docs_events_md_is_the_json_example():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "events.md").read_text()
    blocks = [b.split("```", 1)[0] for b in doc.split("```json\n")[1:]]
    as_json = ContextEvent.model_validate_json(next(b for b in blocks if '"arms"' in b))
    as_f64 = ContextEvent.model_validate_json(next(b for b in blocks if "arm_features_f64" in b))
    assert as_f64.candidate_ids() == as_json.candidate_ids()
    assert as_f64.arm_features().tobytes() == as_json.arm_features().tobytes()
