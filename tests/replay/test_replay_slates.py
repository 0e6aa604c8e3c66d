"""Slate replay (queue method): exactness against an online run, the service log's rules, CLI."""

import json

import numpy as np
import pytest

from streaming_dpbandit.cli import main
from streaming_dpbandit.policies import DPTSMAT, DPUCBMAT, OMM
from streaming_dpbandit.replay.errors import LogFormatError
from streaming_dpbandit.replay.slates import ItemTapes, queue_replay, read_slate_log
from streaming_dpbandit.utils.serialization import dumps

L, K = 8, 3
MEANS = np.linspace(0.1, 0.8, L)
UNIFORM = {"type": "uniform", "n_items": L, "k": K}


def tapes_of(seed, n=4000):
    """Each item's rewards drawn in advance: the tape every policy reads in order."""
    return (np.random.default_rng(seed).random((L, n)) < MEANS[:, None]).astype(float)


def log_by(logger, tape, decisions):
    """Slates chosen by ``logger(t, used)``, each item reading its tape: (slates, rewards)."""
    used = np.zeros(L, dtype=np.int64)
    slates, rewards = [], []
    for t in range(decisions):
        s = logger(t, used)
        rewards.append([tape[e, used[e]] for e in s])
        used[s] += 1
        slates.append(s)
    return np.array(slates), np.array(rewards)


def online(policy, tape, rounds):
    """The policy served online for ``rounds`` rounds, reading the same tapes."""
    used = np.zeros(L, dtype=np.int64)
    total = 0.0
    for _ in range(rounds):
        if policy.refit_due():
            policy.refit()
        dec = policy.decide_slates(1)
        s = dec.slates[0]
        r = tape[s, used[s]]
        used[s] += 1
        total += r.sum()
        policy.learn(dec.slates, r[None, :], dec.rounds)
    if policy.refit_due():
        policy.refit()
    return total, used


def adaptive_logger(tape):
    """A reward-dependent logger: greedy on the running means of what it has seen."""
    sums = np.zeros(L)
    rng = np.random.default_rng(5)

    def choose(t, used):
        if t > 0:
            for e in last[0]:
                sums[e] += tape[e, used[e] - 1]
        means = np.where(used > 0, sums / np.maximum(used, 1), 1.0)
        explore = rng.random() < 0.3  # the queue method needs every item logged now and then
        last[0] = rng.choice(L, K, replace=False) if explore else np.argsort(-means)[:K]
        return last[0]

    last = [None]
    return choose


@pytest.mark.parametrize(
    "make",
    [
        lambda: DPUCBMAT(UNIFORM, epsilon=1.0, seed=3),
        lambda: DPTSMAT(UNIFORM, epsilon=2.0, calibration="paper", seed=3),
        lambda: OMM(UNIFORM, seed=3),
    ],
    ids=["dpucb-mat", "dpts-mat", "omm"],
)
@pytest.mark.parametrize("logger", ["uniform", "adaptive"])
def test_queue_replay_equals_the_online_run_on_the_same_tapes(make, logger):
    tape = tapes_of(11)
    if logger == "uniform":
        rng = np.random.default_rng(7)
        choose = lambda t, used: rng.choice(L, K, replace=False)  # noqa: E731
    else:
        choose = adaptive_logger(tape)
    slates, rewards = log_by(choose, tape, 1500)
    tapes = ItemTapes(slates.reshape(-1), rewards.reshape(-1), L)
    res = queue_replay(make(), tapes)
    assert res.rounds > 100 and "used up" in res.stop
    ref = make()
    total, used = online(ref, tape, res.rounds)
    assert res.mean_return == pytest.approx(total / res.rounds, rel=1e-12)
    replayed = make()
    tapes.rewind()
    queue_replay(replayed, tapes, max_rounds=res.rounds)
    assert dumps(replayed.state_dict()) == dumps(ref.state_dict())
    assert np.array_equal(tapes.used, used)
    # the online run's next slate needs an item whose logged rewards are all used
    if ref.refit_due():
        ref.refit()
    nxt = ref.decide_slates(1).slates[0]
    assert any(used[e] >= tapes.lengths[e] for e in nxt)


def test_take_serves_the_longest_prefix_in_row_order():
    t = ItemTapes([2, 0, 2, 1, 2], [0.1, 0.2, 0.3, 0.4, 0.5], n_items=3)
    r, n = t.take(np.array([[2, 0], [2, 1], [2, 0], [1, 2]]))
    assert n == 2 and r.tolist() == [[0.1, 0.2], [0.3, 0.4]]
    r, n = t.take(np.array([[2, 1]]))
    assert n == 0 and r.shape == (0, 2) and t.used.tolist() == [1, 1, 2]
    r, n = t.take(np.array([[2, 0], [2, 0]]))
    assert n == 0 and t.exhausted(np.array([[2, 0]])) == [0]


def test_replay_of_a_fixed_best_policy_estimates_its_return():
    """A policy that has converged serves A*; its replayed return is unbiased for f(A*)."""
    tape = tapes_of(2, n=20_000)
    rng = np.random.default_rng(1)
    slates, rewards = log_by(lambda t, u: rng.choice(L, K, replace=False), tape, 20_000)
    tapes = ItemTapes(slates.reshape(-1), rewards.reshape(-1), L)
    # OMM after long training picks the top-K items almost always
    res = queue_replay(OMM(UNIFORM, seed=0), tapes)
    best = MEANS[-K:].sum()
    sd = np.sqrt((MEANS[-K:] * (1 - MEANS[-K:])).sum())
    assert res.rounds > 5000
    # learning costs some return; never more than the optimum plus 4 standard errors
    assert res.mean_return < best + 4 * sd / np.sqrt(res.rounds)
    assert res.mean_return > best - 0.1


def _service_log(path, events, shuffle_feedback=True, seed=0, extra=()):
    """Service topics of a uniform slate logger over the MEANS items (item ids sku-<i>)."""
    rng = np.random.default_rng(seed)
    lines, feedback = [], []
    for i in range(events):
        eid = f"e{i}"
        s = rng.choice(L, K, replace=False)
        lines.append(
            {
                "topic": "contexts",
                "value": {
                    "event_id": eid,
                    "bandit_id": "home",
                    "event_time": float(i),
                    "slate_size": K,
                },
            }
        )
        lines.append(
            {
                "topic": "dpbandit.decisions",
                "value": {
                    "event_id": eid,
                    "bandit_id": "home",
                    "model_version": 0,
                    "round": i + 1,
                    "calibration": "non-private",
                    "policy": "random",
                    "decided_at": float(i),
                    "slate": [
                        {"item_id": f"sku-{e}", "item_index": int(e), "key": None} for e in s
                    ],
                },
            }
        )
        for e in s:
            r = float(rng.random() < MEANS[e])
            feedback.append(
                (
                    i,
                    {
                        "topic": "feedback",
                        "value": {
                            "event_id": eid,
                            "bandit_id": "home",
                            "event_time": i + 0.5,
                            "rewards": {f"sku-{e}": r},
                        },
                    },
                )
            )
    order = rng.permutation(len(feedback)) if shuffle_feedback else range(len(feedback))
    lines += [feedback[j][1] for j in order]  # arrival order unrelated to decision order
    lines += list(extra)
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return path


def test_service_log_tapes_are_in_decision_order_whatever_the_arrival_order(tmp_path):
    a = read_slate_log(_service_log(tmp_path / "a.jsonl", 300, shuffle_feedback=False))
    b = read_slate_log(_service_log(tmp_path / "b.jsonl", 300, shuffle_feedback=True))
    assert a.decisions == b.decisions == 300
    assert np.array_equal(a.tapes.data, b.tapes.data)
    assert np.array_equal(a.tapes.lengths, b.tapes.lengths)
    assert a.tapes.lengths.sum() == 300 * K and b.info["defaulted"] == 0


def test_service_log_window_duplicates_and_default_fill(tmp_path):
    def fb(eid, t, rewards):
        return {
            "topic": "feedback",
            "value": {"event_id": eid, "bandit_id": "home", "event_time": t, "rewards": rewards},
        }

    lines = [
        {
            "topic": "contexts",
            "value": {"event_id": "x", "bandit_id": "home", "event_time": 100.0, "slate_size": 2},
        },
        {
            "topic": "decisions",
            "value": {
                "event_id": "x",
                "bandit_id": "home",
                "model_version": 0,
                "round": 1,
                "calibration": "certified",
                "policy": "dpucb-mat",
                "decided_at": 100.0,
                "slate": [{"item_id": "a", "item_index": 0}, {"item_id": "b", "item_index": 1}],
            },
        },
        fb("x", 200.0, {"a": 1.0}),  # outside the 60 s window: not counted
        fb("x", 101.0, {"a": 0.25}),
        fb("x", 102.0, {"a": 0.75}),  # duplicate: the first value counts
        fb("y", 102.0, {"a": 1.0}),  # no such decision
    ]
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines))
    log = read_slate_log(p, default_reward=0.5)
    assert log.tapes.data.tolist() == [0.25, 0.5]  # b never reported: the default
    assert log.info["late"] == 1 and log.info["duplicates"] == 1
    assert log.info["defaulted"] == 1 and log.info["unknown_or_unserved"] == 1
    assert log.on_policy_return == 0.75


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            [
                {
                    "topic": "contexts",
                    "value": {
                        "event_id": "o",
                        "bandit_id": "other",
                        "event_time": 0,
                        "slate_size": 3,
                    },
                }
            ],
            "name one",
        ),
        (
            [
                {
                    "topic": "decisions",
                    "value": {
                        "event_id": "e0",
                        "bandit_id": "home",
                        "model_version": 0,
                        "round": 1,
                        "calibration": "c",
                        "policy": "p",
                        "decided_at": 0,
                        "slate": [{"item_id": "sku-0", "item_index": 0}],
                    },
                }
            ],
            "two different slates",
        ),
        (["not json"], "not a slate bandit message"),
    ],
)
def test_bad_service_logs_are_refused(tmp_path, extra, message):
    p = _service_log(tmp_path / "bad.jsonl", 5, extra=extra)
    with pytest.raises(LogFormatError, match=message):
        read_slate_log(p)


def test_cli_replays_slate_policies_on_a_service_log(tmp_path, capsys):
    log = _service_log(tmp_path / "log.jsonl", 3000)
    out = tmp_path / "out.json"
    rc = main(
        [
            "replay",
            "--log",
            str(log),
            "--policy",
            "dpucb-mat,dpts-mat",
            "--policy-param",
            f"matroid={json.dumps(UNIFORM)}",
            "--epsilon",
            "1,4",
            "--log-param",
            "bandit_id=home",
            "--json",
            str(out),
            "--plot",
            str(tmp_path / "p.png"),
        ]
    )
    text = capsys.readouterr().out
    assert rc == 0 and "dpts-mat ε=4" in text and "log (on-policy)" in text
    data = json.loads(out.read_text())
    assert data["log"]["decisions"] == 3000
    assert [r["label"] for r in data["results"]] == [
        "dpucb-mat ε=1",
        "dpucb-mat ε=4",
        "dpts-mat ε=1",
        "dpts-mat ε=4",
    ]
    for r in data["results"]:
        assert r["rounds"] > 100 and "used up" in r["stop"]
        assert r["privacy"]["epsilon_certified"] == float(r["label"].split("=")[1])
        assert r["privacy"]["pure_epsilon"] == pytest.approx(r["privacy"]["epsilon_certified"])
        assert r["privacy"]["releases"] > 1
        assert r["privacy"]["noise_backend"] == "secure"  # the default, named (issue 31 §5)
    header = next(ln for ln in text.splitlines() if ln.startswith("policy"))
    row = next(ln for ln in text.splitlines() if ln.startswith("dpts-mat ε=4"))
    col = header.index(" noise ") + 1  # the table's noise column
    assert row[col : col + len("secure")] == "secure"
    assert (tmp_path / "p.png").stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", "dpucb-mat,linucb"], "replay them separately"),
        (["--policy", "dpucb-mat", "--estimator", "ips"], "slate propensities"),
        (["--policy", "dpucb-mat"], "need --policy-param 'matroid="),
        (
            [
                "--policy",
                "dpucb-mat",
                "--policy-param",
                'matroid={"type": "uniform", "n_items": 4, "k": 2}',
            ],
            "catalogue has 4 items",
        ),
    ],
)
def test_cli_slate_replay_errors(tmp_path, capsys, args, message):
    log = _service_log(tmp_path / "log.jsonl", 20)
    assert main(["replay", "--log", str(log), *args]) == 2
    assert message in capsys.readouterr().err
