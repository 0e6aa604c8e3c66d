"""The VW-style featuriser (features/hashing.py, docs/features.md): its written rules, computed
independently here from MurmurHash3, its errors, and its use by a policy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streaming_dpbandit.features import FeatureError, FeatureHasher
from streaming_dpbandit.features.hashing import murmur3

FNV_PRIME = 16777619  # VW's multiplier, written out (not imported: a mutation must show)


def test_murmur3_is_the_reference_hash():
    # MurmurHash3_x86_32 reference values (the hash of Vowpal Wabbit)
    assert murmur3("") == 0
    assert murmur3("", seed=1) == 0x514E28B7
    assert murmur3("hello") == 0x248BFA47
    assert murmur3("Hello, world!", seed=1234) == 0xFAF6CDB3


def _index(h: int, d: int) -> int:
    return (h * d) >> 32


def _expected(d, context, actions, seed=0):
    """The rules of the module docstring, written out feature by feature."""

    def flat(objs, default):
        out = []  # (namespace, name, value)
        for obj in objs:
            for k, v in obj.items():
                if isinstance(v, dict):
                    for name, val in v.items():
                        out.append((k, name, val))
                else:
                    out.append((default, k, v))
        feats = []
        for ns, name, val in out:
            nh = murmur3(ns, seed)
            if isinstance(val, str):
                feats.append((murmur3(f"{name}={val}", nh), 1.0))
            elif val is True:
                feats.append((murmur3(name, nh), 1.0))
            else:
                feats.append((murmur3(name, nh), float(val)))
        return feats

    ctx = flat(context, "context")
    X = np.zeros((len(actions), d))
    for k, a in enumerate(actions):
        for h, v in ctx:
            X[k, _index(h, d)] += v
        for h2, v2 in flat(a, "action"):
            X[k, _index(h2, d)] += v2
            for h1, v1 in ctx:
                X[k, _index(((h1 * FNV_PRIME) & 0xFFFFFFFF) ^ h2, d)] += v1 * v2
    return X


CONTEXT = [
    {"user": {"tier": "gold", "age": 31, "mobile": True}},
    {"hour": 13, "weekday": "tue"},
]
ACTIONS = [
    [{"type": "news", "words": 420}],
    [{"type": "sports"}, {"video": {"length": 2.5, "hd": True}}],
    [],
]


@pytest.mark.parametrize("d", [1, 7, 100, 1 << 20])
def test_rows_follow_the_written_rules(d):
    got = FeatureHasher(d).transform(CONTEXT, ACTIONS)
    np.testing.assert_allclose(got, _expected(d, CONTEXT, ACTIONS), rtol=0, atol=1e-12)


def test_seed_changes_the_indices_not_the_mass():
    a = FeatureHasher(1000).transform(CONTEXT, ACTIONS)
    b = FeatureHasher(1000, seed=7).transform(CONTEXT, ACTIONS)
    assert not np.array_equal(a, b)
    np.testing.assert_allclose(a.sum(axis=1), b.sum(axis=1))
    np.testing.assert_allclose(b, _expected(1000, CONTEXT, ACTIONS, seed=7), atol=1e-12)


def test_nested_values_lists_false_and_null():
    h = FeatureHasher(1 << 16)
    ns = murmur3("context", 0)
    X = h.transform(
        [{"a": {"b": {"c": 2.0}}, "tags": ["x", "y"], "v": [3.0, 4.0], "n": None, "off": False}],
        [[]],
    )
    names = {
        murmur3("b.c", murmur3("a", 0)): 2.0,
        murmur3("tags=x", ns): 1.0,
        murmur3("tags=y", ns): 1.0,
        murmur3("v[0]", ns): 3.0,
        murmur3("v[1]", ns): 4.0,
    }
    want = np.zeros(1 << 16)
    for hsh, v in names.items():
        want[_index(hsh, 1 << 16)] += v
    np.testing.assert_array_equal(X[0], want)


def test_interactions_make_the_context_change_the_best_action():
    """With one θ shared by the actions, context features change the ranking only through
    the crossed products: a θ on the product (user=a × type=x) ranks x first for user a only."""
    d = 4096
    acts = [[{"type": "x"}], [{"type": "y"}]]
    h = FeatureHasher(d)
    theta = np.zeros(d)
    hu = murmur3("u=a", murmur3("context", 0))
    hx = murmur3("type=x", murmur3("action", 0))
    theta[_index(((hu * FNV_PRIME) & 0xFFFFFFFF) ^ hx, d)] = 1.0
    assert (h.transform([{"u": "a"}], acts) @ theta).argmax() == 0
    assert (h.transform([{"u": "b"}], acts) @ theta).tolist() == [0.0, 0.0]
    # without interactions the context adds the same vector to every row
    flat = FeatureHasher(d, interactions=[])
    Xa = flat.transform([{"u": "a"}], acts)
    np.testing.assert_array_equal(
        Xa - flat.transform([{"u": "b"}], acts),
        np.broadcast_to((Xa - flat.transform([{"u": "b"}], acts))[0], (2, d)),
    )


def test_namespaces_and_named_pairs():
    ctx = [{"user": {"tier": "gold"}}, {"geo": {"country": "fr"}}]
    acts = [[{"type": "news"}, {"brand": {"name": "b1"}}]]
    only_user = FeatureHasher(1 << 16, namespaces=["user", "action"])
    want = _expected(1 << 16, [ctx[0]], [[acts[0][0]]])
    np.testing.assert_array_equal(only_user.transform(ctx, acts), want)
    # one named pair: user × action only (geo and brand enter first-order only)
    pair = FeatureHasher(1 << 16, interactions=[("user", "action")])
    full = FeatureHasher(1 << 16).transform(ctx, acts)
    got = pair.transform(ctx, acts)
    assert np.count_nonzero(got) < np.count_nonzero(full)
    hu = murmur3("tier=gold", murmur3("user", 0))
    ha = murmur3("type=news", murmur3("action", 0))
    assert got[0, _index(((hu * FNV_PRIME) & 0xFFFFFFFF) ^ ha, 1 << 16)] == 1.0


def test_cache_limit_does_not_change_the_result():
    big = FeatureHasher(512).transform(CONTEXT, ACTIONS)
    tiny = FeatureHasher(512, cache_size=1)
    for _ in range(3):
        np.testing.assert_array_equal(tiny.transform(CONTEXT, ACTIONS), big)


@pytest.mark.parametrize(
    ("context", "actions", "field"),
    [
        ([{"user": {"age": math.inf}}], [[]], "contextFeatures[0].user.age"),
        ([], [[], [{"price": [1.0, math.nan]}]], "actions[1].features[0].price[1]"),
        ([{"user": {"age": 10**400}}], [[]], "contextFeatures[0].user.age"),
        (["not an object"], [[]], "contextFeatures[0]"),
        ([], [[{"x": {1, 2}}]], "actions[0].features[0].x"),
    ],
)
def test_bad_values_name_their_field(context, actions, field):
    with pytest.raises(FeatureError) as err:
        FeatureHasher(16).transform(context, actions)
    assert err.value.field == field


def test_too_many_features():
    with pytest.raises(FeatureError, match="at most 3"):
        FeatureHasher(16, max_features=3).transform([{"a": 1, "b": 2}], [[{"c": 1, "d": 2}]])


def test_settings_build_the_hasher_and_refuse_another_dimension():
    from streaming_dpbandit.settings import BanditSettings

    b = BanditSettings.model_validate(
        {"policy": {"policy": "fliphat", "d": 64}, "features": {"interactions": [["*", "*"]]}}
    )
    np.testing.assert_array_equal(
        b.features.build(64).transform(CONTEXT, ACTIONS), _expected(64, CONTEXT, ACTIONS)
    )
    with pytest.raises(ValueError, match="differs from the policy's d"):
        BanditSettings.model_validate(
            {"policy": {"policy": "fliphat", "d": 64}, "features": {"dimension": 32}}
        )
    # a changed featuriser is a changed configuration for a snapshot
    other = BanditSettings.model_validate(
        {"policy": {"policy": "fliphat", "d": 64}, "features": {"seed": 3}}
    )
    assert other.changes_since(b.fingerprint()) == ["features"]
    assert b.changes_since(b.fingerprint()) == []


@pytest.mark.parametrize(
    ("make", "reuses"),
    [
        (lambda: FeatureHasher(97), True),
        (lambda: FeatureHasher(97, interactions=[("user", "action"), ("*", "video")]), True),
        # the caches start again at every call here, the memo with them (namespace ids)
        (lambda: FeatureHasher(97, namespaces=["user", "action"], cache_size=1), False),
    ],
    ids=["all-pairs", "some-pairs", "tiny-cache"],
)
def test_memo_reuses_equal_actions_and_changes_nothing(make, reuses):
    """``memo=True`` (the gateway's Rank) reuses the flattening of the last actions when the
    next ones are equal, and every matrix equals the plain transform's: repeated catalogues,
    changed ones, values that compare equal across types (true and 1, false and 0)."""
    import copy

    rng = np.random.default_rng(3)
    catalogues = [
        ACTIONS,
        [[{"type": "news", "words": 420}], [{"type": "sports"}]],
        [[{"type": "news", "words": 420.0}], [{"type": "sports"}, {"video": {"hd": 1}}], []],
        [[{"type": "news", "words": 420, "x": False}], [{"video": {"hd": 1}}], []],
        [[{"type": "news", "words": 420, "x": 0}], [{"video": {"hd": True}}], []],
    ]  # fmt: skip
    memo, plain = make(), make()
    hits = 0
    for i in range(60):
        actions = copy.deepcopy(catalogues[int(rng.integers(len(catalogues)))])
        context = [{"user": {"tier": ("gold", "silver")[i % 2], "age": i}}, {"hour": i % 24}]
        kept = memo._memo[0] if getattr(memo, "_memo", None) else None
        got = memo.transform(context, actions, memo=True)
        hits += kept is not None and memo._memo is not None and memo._memo[0] is kept
        np.testing.assert_array_equal(got, plain.transform(context, actions))
    assert hits >= 10 if reuses else hits == 0  # (the reuse was exercised)
