"""FLIPHAT invariants: forgetting, exactly-once rows, release before use, determinism, state.

Spec: docs/specs/fliphat.md.
"""

import copy
import gc
import tracemalloc

import numpy as np
import pytest

from streaming_dpbandit.envs import FliphatPaperEnv
from streaming_dpbandit.policies import FLIPHAT
from streaming_dpbandit.privacy.statement import PAPER_LABEL


def drive(pol, env, rounds, seed=0, on_release=None, ids=True):
    """Run a policy on an environment; returns per-round arms."""
    rng = np.random.default_rng(seed)
    arms = []
    while pol.t < rounds:
        if pol.refit_due():
            recs = pol.refit()
            if on_release:
                on_release(recs, pol)
        n = min(pol.max_decide_batch(), rounds - pol.t, 512)
        X = env.contexts(rng, n)
        dec = pol.decide(X, event_ids=(np.arange(pol.t + 1, pol.t + n + 1) if ids else None))
        x = X[np.arange(n), dec.arms]
        y = env.mean_rewards(X)[np.arange(n), dec.arms] + env.reward_noise(rng, n)[:, 0]
        pol.learn(x, y, dec.rounds, ids=dec.rounds)
        arms.append(dec.arms)
    return np.concatenate(arms)


ENV = FliphatPaperEnv(d=50, s_star=3, K=4)


def make(**kw):
    """The product defaults (warm start, sign contributions of the first fit) on the paper's
    doubling schedule (N₀ = 1), whose boundaries these tests name."""
    base = {"d": 50, "s": 4, "epsilon": 2.0, "delta": 0.01, "b_max": ENV.b_max, "seed": 3}
    return FLIPHAT(**(base | {"first_episode_len": 1} | kw))


def test_every_row_enters_exactly_one_fit_and_forgetting():
    pol = make()
    seen = []

    def check(recs, p):
        (r,) = recs
        seen.append(r)
        # release before use: the record exists when the new model version is installed
        assert p.model_version == r.model_version
        assert (
            r.params["accumulator_destroyed"]
            and str(r.model_version - 1) not in p.state_dict()["accumulators"]
        )
        assert len(p.state_dict()["accumulators"]) <= 1

    drive(pol, ENV, 4095, on_release=check)
    assert [r.model_version for r in seen] == list(range(1, 12))
    # rows of episode k−1 are exactly rounds 2^{k−1} … 2^k − 1: counts and id digests line up
    total = 0
    for r in seen:
        lo, hi = r.event_range
        assert r.rows_used == hi - lo + 1 == r.params["n_nominal"]
        assert r.params["consumed_ids_digest"].startswith(f"{r.rows_used:x}-")
        total += r.rows_used
    assert total == 2**11 - 1
    digests = [r.params["consumed_ids_digest"] for r in seen]
    assert len(set(digests)) == len(digests)


def test_memory_is_flat_across_episodes_gram_form():
    # the fast backend: under tracemalloc the exact sampler's integer arithmetic is ~50× slower
    # (the memory in question is the accumulators', whatever the sampler)
    pol = make(form="gram", d=300, s=3, b_max=1.0, noise_backend="fast")
    env = FliphatPaperEnv(d=300, s_star=3)
    drive(pol, env, 2**10, ids=False)
    gc.collect()
    tracemalloc.start()
    drive(pol, env, 2**13, ids=False)
    gc.collect()
    snap_a, _ = tracemalloc.get_traced_memory()
    drive(pol, env, 2**15, ids=False)
    gc.collect()
    snap_b, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # one Gram accumulator is 300²·8 = 720 kB; six more episodes must not add any
    assert snap_b - snap_a < 300 * 300 * 8 / 2


def test_late_rows_are_dropped_not_counted():
    pol = make()
    drive(pol, ENV, 15)
    before = pol.counters["rows_learned"]
    pol.learn(np.ones((1, 50)), np.ones(1), np.array([3]))  # round 3 belongs to an old episode
    assert pol.counters["late_rows"] == 1 and pol.counters["rows_learned"] == before


def test_decisions_are_a_function_of_state_and_event_id():
    a, b = make(), make()
    drive(a, ENV, 300)
    drive(b, ENV, 300)
    X = ENV.contexts(np.random.default_rng(9), 20)
    ids = [f"evt-{i}" for i in range(20)]
    state = copy.deepcopy(a.state_dict())
    d1 = a.decide(X, event_ids=ids)
    c = make().load_state_dict(state)
    d2 = c.decide(X, event_ids=ids)
    assert np.array_equal(d1.arms, d2.arms) and np.array_equal(d1.propensities, d2.propensities)


def run_on_stream(pol, X, noise, until, records):
    """Drive ``pol`` over a fixed stream (X: T×K×d, noise: T×K) from its current round."""
    mu = ENV.mean_rewards(X)
    while pol.t < until:
        if pol.refit_due():
            records.extend(pol.refit())
        t0 = pol.t
        n = min(pol.max_decide_batch(), until - t0)
        dec = pol.decide(X[t0 : t0 + n], event_ids=np.arange(t0 + 1, t0 + n + 1))
        rows = np.arange(t0, t0 + n)
        pol.learn(
            X[rows, dec.arms],
            mu[rows, dec.arms] + noise[rows, dec.arms],
            dec.rounds,
            ids=dec.rounds,
        )


def test_state_round_trip_reproduces_the_rest_of_the_run_and_its_releases():
    rng = np.random.default_rng(5)
    X, noise = ENV.contexts(rng, 3000), ENV.reward_noise(rng, 3000)
    full, recs_full = make(), []
    run_on_stream(full, X, noise, 3000, recs_full)
    first, recs = make(), []
    run_on_stream(first, X, noise, 1200, recs)
    restored = make().load_state_dict(copy.deepcopy(first.state_dict()))  # a restart
    run_on_stream(restored, X, noise, 3000, recs)
    assert [r.content_digest() for r in recs] == [r.content_digest() for r in recs_full]
    a, b = full.state_dict(), restored.state_dict()
    assert a["t"] == b["t"] == 3000 and a["model_episode"] == b["model_episode"]
    np.testing.assert_array_equal(a["beta_val"], b["beta_val"])
    for k in a["accumulators"]:
        np.testing.assert_array_equal(a["accumulators"][k]["h"], b["accumulators"][k]["h"])


def test_refit_recomputed_after_crash_is_identical():
    """A crash after the release but before the snapshot: the retry re-derives the same noise."""
    pol = make()
    drive(pol, ENV, 255)
    snapshot = copy.deepcopy(pol.state_dict())
    assert pol.refit_due()
    first = pol.refit()[0]
    retry = make().load_state_dict(snapshot).refit()[0]
    assert first.content_digest() == retry.content_digest()


def test_paper_calibration_is_labelled_and_not_dp_valid():
    pol = make(
        calibration="paper", clip_contexts=False, m_schedule="log", m0=0.16, m_guard="allow_zero"
    )
    recs = []
    drive(pol, ENV, 511, on_release=lambda r, p: recs.extend(r))
    assert all(r.calibration == "paper" and r.formula == "paper" and not r.dp_valid for r in recs)
    assert all(r.note == PAPER_LABEL for r in recs)
    assert recs[0].accounting == [{"type": "zero"}] and recs[0].params["iterations"] == 0
    assert "WARNING" in pol.privacy.text() and PAPER_LABEL in pol.explain(1000)["label"]
    cert = make()  # defaults: contribution clip, PLD accountant, warm start, sign (issue 35)
    assert cert.explain(1000)["formula"] == "certified-v2+grad_clip+pld+warm+sign"
    assert "label" not in cert.explain(1000)
    issue20 = make(warm_start=False)  # the defaults of issue 20
    assert issue20.explain(1000)["formula"] == "certified-v2+grad_clip+pld"
    legacy = make(grad_clip="off", accountant="closed_form")
    assert legacy.explain(1000)["formula"] == "certified-v1"


def test_certified_requires_clipping():
    with pytest.raises(ValueError, match="clip_contexts"):
        make(clip_contexts=False).decide(np.zeros((1, 2, 50)))


def test_swap_delay_serves_the_old_model_for_w_rounds():
    pol = make(swap_delay=3, first_episode_len=8)
    versions = []
    rng = np.random.default_rng(0)
    while pol.t < 60:
        if pol.refit_due():
            pol.refit()
        dec = pol.decide(ENV.contexts(rng, 1))
        pol.learn(np.zeros((1, 50)), np.zeros(1), dec.rounds)
        versions.append((int(dec.rounds[0]), int(dec.episodes[0]), dec.model_version))
    # episode 1 starts at round 9; the new model is used from round 9 + 3 = 12
    assert [v for t, e, v in versions if 9 <= t <= 13] == [0, 0, 0, 1, 1]
    # rows of rounds 9–11 belong to episode 1 (the new episode), not to the fit of episode 0
    assert {e for t, e, v in versions if 9 <= t <= 11} == {1}


def test_batches_cannot_cross_a_release():
    pol = make()
    with pytest.raises(ValueError, match="crosses"):
        pol.decide(np.zeros((2, 3, 50)))
    pol.decide(np.zeros((1, 3, 50)))
    with pytest.raises(RuntimeError, match="refit"):
        pol.decide(np.zeros((1, 3, 50)))


def test_clipping_is_counted_and_bounds_hold():
    pol = make(reward_clip=1.0)
    pol.decide(np.zeros((1, 2, 50)))
    pol.learn(np.full((1, 50), 100.0), np.array([-50.0]), np.array([1]))
    acc = pol._acc[0]
    assert np.all(np.abs(acc.h) <= pol.x_bound * 1.0 + 1e-12)
    assert pol.counters["clipped_context_coords"] == 50 and pol.counters["clipped_rewards"] == 1


def test_nan_never_reaches_the_accumulator():
    pol = make()
    pol.decide(np.zeros((1, 2, 50)))
    with pytest.raises(ValueError, match="finite"):
        pol.learn(np.full((1, 50), np.nan), np.array([0.0]), np.array([1]))


def test_state_survives_the_snapshot_codec_exactly():
    from streaming_dpbandit.utils.serialization import dumps, loads

    for form in ("h", "gram", "rows"):
        pol = make(form=form, first_episode_len=40)
        drive(pol, ENV, 100)
        state = pol.state_dict()
        back = loads(dumps(state))
        restored = make(form=form, first_episode_len=40).load_state_dict(back)
        assert dumps(restored.state_dict()) == dumps(state)
        X = ENV.contexts(np.random.default_rng(1), 5)
        a, b = pol.decide(X, event_ids=list("abcde")), restored.decide(X, event_ids=list("abcde"))
        assert np.array_equal(a.arms, b.arms)
