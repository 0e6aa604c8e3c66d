"""User-level privacy from the command line (issue 22 §2): ``simulate``, ``replay``,
``explain``, ``budget`` and ``serve``'s configuration take the per-user bound, refuse what it
cannot apply to with one line (exit 2), and state the whole-run guarantee per user."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import yaml

from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
from streaming_dpbandit.cli import main


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stop:  # argparse's usage errors
            code = int(stop.code or 0)
    return code, out.getvalue(), err.getvalue()


# -- serve's configuration ------------------------------------------------------------------
def _bandit(policy: dict, **section) -> dict:
    return {"policy": policy, "user_level": {"max_contributions_per_user": 2, **section}}


FLIPHAT = {"policy": "fliphat", "d": 10, "s": 2}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"bandits": {"b": _bandit(FLIPHAT | {}, max_releases_per_user=0)}}, "greater than"),
        (
            {
                "bandits": {
                    "b": {"policy": FLIPHAT, "user_level": {"max_contributions_per_user": 0}}
                }
            },
            "greater than",
        ),
        ({"bandits": {"b": _bandit(FLIPHAT, k=3)}}, "Extra inputs"),
        ({"bandits": {"b": _bandit({"policy": "linucb", "d": 3})}}, "is not private"),
        ({"bandits": {"b": _bandit({"policy": "ldp-ucb", "d": 3})}}, "no group calibration"),
        (
            {"bandits": {"b": _bandit(FLIPHAT, key_file="/nonexistent/dpbandit-user-key")}},
            "user_level.key_file '/nonexistent/dpbandit-user-key'",
        ),
        (  # replicas and the learner must hash ids with one key: a seed (tests) or a key file
            {
                "kafka": {"bootstrap_servers": "127.0.0.1:1"},
                "broadcast": {"role": "learner"},
                "bandits": {"b": _bandit(FLIPHAT)},
            },
            "user_level in a broadcast needs user_level.key_file",
        ),
    ],
)
def test_serve_refuses_a_bad_user_level_section_with_one_line(tmp_path, settings, message):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(yaml.safe_dump({**settings, "metrics": {"enabled": False}}))
    code, _out, err = _run(["serve", "--config", str(cfg), "--no-progress"])
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert "Traceback" not in err


def test_user_level_key_file_keys_the_hash_and_is_checked_at_start(tmp_path):
    """``user_level.key_file``: every process that reads the file hashes ids with one key (not
    the seed's, never the OS's); a key shorter than 16 bytes is refused with one line."""
    from streaming_dpbandit.config import UserLevelConfig, policy_config

    key = tmp_path / "key"
    key.write_text("0123456789abcdef0123456789abcdef\n")
    pol = policy_config("fliphat", {"d": 10, "s": 2})
    ul = UserLevelConfig(max_contributions_per_user=2, key_file=key)
    a, b = ul.build(pol, seed=1), ul.build(pol, seed=None)
    by_seed = UserLevelConfig(max_contributions_per_user=2).build(pol, seed=1)
    assert a.hash_users(["u"]) == b.hash_users(["u"]) != by_seed.hash_users(["u"])
    from streaming_dpbandit.settings import BanditSettings

    def fingerprint(**section) -> str:
        return BanditSettings.model_validate(_bandit(FLIPHAT, **section)).fingerprint()

    assert fingerprint(key_file=str(key)) == fingerprint()  # the key is in the snapshot
    key.write_text("short")
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"bandits": {"b": _bandit(FLIPHAT, key_file=str(key))}, "metrics": {"enabled": False}}
        )
    )
    code, _out, err = _run(["serve", "--config", str(cfg), "--no-progress"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "the key needs at least 16 bytes" in err and "short" not in err.replace(str(key), "")


# -- explain ---------------------------------------------------------------------------------
def test_explain_states_the_per_user_guarantee_and_the_group_calibration(capsys):
    argv = ["explain", "--policy", "fliphat", "--policy-param", "d=20", "--policy-param", "s=2"]
    argv += ["--horizon", "4096"]
    assert main([*argv, "--max-contributions-per-user", "4", "--max-releases-per-user", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    ul = out["user_level"]
    assert ul["inner_epsilon"] == pytest.approx(0.25)  # ε/k for FLIPHAT's (ε, δ) fit
    assert ul["whole_run"]["statement"].startswith(
        "per user: at most 4 events per release, at most 5 releases, (ε=5,"
    )
    assert "one user" in out["privacy_statement"] and "ε = 1," in out["privacy_statement"]
    assert main(argv) == 0  # event level: no user section
    assert "user_level" not in json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-releases-per-user", "3"], "needs --max-contributions-per-user"),
        (["--max-contributions-per-user", "0"], "positive integer"),
    ],
)
def test_explain_refuses_bad_user_level_options(extra, message):
    code, _out, err = _run(["explain", "--policy", "fliphat", "--policy-param", "d=20", *extra])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


# -- simulate --------------------------------------------------------------------------------
def test_simulate_with_returning_users_bounds_them_and_says_so(tmp_path):
    out = tmp_path / "sim.json"
    argv = "simulate --env dp-linucb-paper --policy dp-linucb,linucb --horizon 600".split()
    argv += "--seeds 1 --jobs 1 --no-progress --max-contributions-per-user 2 --users 40".split()
    argv += ["--json", str(out)]
    code, text, err = _run(argv)
    assert code == 0, err
    runs = {r["key"]: r for r in json.loads(out.read_text())["runs"]}
    run = runs["dp-linucb ε=1 k=2"]
    c = run["counters"]  # DP-LinUCB: one window for the run, so ≤ k rows per user in total
    assert c["user_admitted"] <= 2 * 40 and c["user_admitted"] + c["user_bounded"] == 600
    ul = run["privacy"]["user_level"]
    assert ul["statement"].startswith("per user: at most 2 events per release")
    assert run["privacy"]["of_record"] == ul["of_record"]
    assert "user_level" not in runs["linucb"]["privacy"]
    assert "not private" in text  # the baseline runs without a bound, and says so


def test_simulate_private_lasso_user_level_bounds_each_block(tmp_path):
    """PrivateLASSO-R runs user-level at its group calibration: k rows per user per block
    (its forgetful blocks are the windows), E blocks per user, the whole-run zCDP statement."""
    out = tmp_path / "sim.json"
    argv = "simulate --env privatelasso-m --env-param d=20 --policy private-lasso".split()
    argv += "--horizon 3000 --seeds 1 --jobs 1 --no-progress --users 40".split()
    argv += "--max-contributions-per-user 2 --max-releases-per-user 3 --json".split()
    code, _text, err = _run([*argv, str(out)])
    assert code == 0, err
    (run,) = json.loads(out.read_text())["runs"]
    assert run["key"] == "private-lasso ε=1 k=2"
    c = run["counters"]
    assert 0 < c["user_admitted"] <= 2 * 40 * 3 and c["user_bounded_releases"] > 0
    assert c["user_admitted"] + c["user_bounded"] == 3000
    assert c["rows_learned"] + c["unused_rows"] == c["user_admitted"]
    # built at ρ(ε′) = ρ(ε)/k²: every release of a user's k rows costs ρ(ε = 1, δ)
    from streaming_dpbandit.privacy.zcdp import rho_from_epsilon_delta

    delta = run["params"]["delta"]
    inner = run["params"]["inner_epsilon"]
    assert 4 * rho_from_epsilon_delta(inner, delta) == pytest.approx(
        rho_from_epsilon_delta(1, delta)
    )
    ul = run["privacy"]["user_level"]
    assert ul["statement"].startswith("per user: at most 2 events per release, at most 3 releases")
    assert ul["releases_per_user"] == 3
    assert ul["spend"]["rho"] == pytest.approx(3 * rho_from_epsilon_delta(1, delta), rel=1e-9)
    code, _o, err = _run([*argv[:-1], "--calibration", "paper"])
    assert code == 2 and "calibration=paper is not a valid DP guarantee" in err, err
    assert len(err.strip().splitlines()) == 1


def test_simulate_refuses_users_without_a_bound():
    code, _o, err = _run(["simulate", "--policy", "linucb", "--users", "5", "--no-progress"])
    assert code == 2 and "--users needs --max-contributions-per-user" in err


# -- replay ----------------------------------------------------------------------------------
def _user_log(tmp_path, with_users: bool = True):
    lines = service_log_lines(1200, K=3, d=4, seed=2)
    rng = np.random.default_rng(1)
    for line in lines:
        if line["topic"] == "contexts" and with_users:
            line["value"]["user_id"] = f"replay-user-{int(rng.integers(10)):02d}"
    path = tmp_path / "log.jsonl"
    write_jsonl(path, lines)
    return path


def test_replay_learns_at_most_k_events_per_user_and_states_it(tmp_path):
    out = tmp_path / "replay.json"
    argv = ["replay", "--log", str(_user_log(tmp_path)), "--policy", "dp-linucb"]
    argv += ["--estimator", "replay", "--bootstrap", "0", "--no-progress", "--json", str(out)]
    code, text, err = _run([*argv, "--max-contributions-per-user", "3"])
    assert code == 0, err
    data = json.loads(out.read_text())
    assert "replay-user" not in text + out.read_text()  # ids are never printed
    assert '"statement": "per user: at most 3 events per release' in json.dumps(data)
    nolog = str(_user_log(tmp_path, False))
    code, _text, err = _run([*argv[:2], nolog, *argv[3:-2], "--max-contributions-per-user", "3"])
    assert code == 2 and "needs user ids in the log" in err and len(err.strip().splitlines()) == 1


def test_replay_user_bound_changes_what_the_policy_learns(tmp_path):
    """The bound is applied, not only reported: DP-LinUCB learns from at most k·users rows."""
    from streaming_dpbandit.config import UserLevelConfig, policy_config
    from streaming_dpbandit.replay.build import make_reader
    from streaming_dpbandit.replay.replay_method import ReplayMethod

    reader = make_reader(str(_user_log(tmp_path)), "service-jsonl").open()
    cfg = policy_config("dp-linucb", {"d": 4, "n_cap": 4096})
    pol = UserLevelConfig(max_contributions_per_user=3).build(cfg, seed=0)
    rm = ReplayMethod(pol, bootstrap=0)
    for batch in reader.chunks(512):
        rm.process(batch)
    c = pol.user_counters()
    assert c["admitted"] <= 3 * 10 and c["admitted"] + c["bounded"] == rm.matched > 100


# -- budget ----------------------------------------------------------------------------------
def test_budget_states_the_whole_run_guarantee_per_user(tmp_path, capsys):
    from dpbandit_testing.ledger_helpers import run_into_ledger
    from streaming_dpbandit.config import UserLevelConfig, policy_config

    pol = UserLevelConfig(max_contributions_per_user=2, max_releases_per_user=3).build(
        policy_config(
            "fliphat", {"d": 12, "s": 2, "epsilon": 1.0, "delta": 1e-6, "first_episode_len": 1}
        ),
        seed=1,
    )
    path = tmp_path / "ledger.jsonl"
    run_into_ledger(pol, path, 400, n_users=30)
    assert main(["budget", str(path), "--json"]) == 0
    item = json.loads(capsys.readouterr().out)["bandits"][0]
    ul = item["user_level"]
    assert ul["statement"].startswith("per user: at most 2 events per release, at most 3")
    assert ul["releases_per_user"] == 3
    # the same figure in the statement, the spend and the user-level block
    assert item["spend"]["of_record"] == ul["of_record"]
    assert item["statement"]["epsilon"] == pytest.approx(ul["of_record"]["epsilon"])
    assert ul["of_record"]["epsilon"] == pytest.approx(3.0, rel=1e-6)  # 3 releases of ε = 1
    assert "one user" in item["statement_text"] and ul["statement"] in item["statement_text"]
    assert main(["budget", str(path)]) == 0
    assert ul["statement"] in capsys.readouterr().out


def test_replay_reads_user_ids_from_a_csv_column(tmp_path):
    rng = np.random.default_rng(4)
    n, K = 900, 3
    x = rng.normal(size=(n, 2))
    a = rng.integers(0, K, n)
    r = x[:, 0] * (a == 1) + 0.1 * rng.normal(size=n)
    rows = ["x1,x2,arm,reward,p,uid"]
    rows += [
        f"{x[i, 0]:.5f},{x[i, 1]:.5f},{a[i]},{r[i]:.5f},{1 / K:.10f},csv-u{i % 7}" for i in range(n)
    ]
    path = tmp_path / "log.csv"
    path.write_text("\n".join(rows) + "\n")
    out = tmp_path / "r.json"
    argv = ["replay", "--log", str(path), "--policy", "fliphat", "--policy-param", "s=2"]
    argv += ["--estimator", "replay"]
    argv += ["--bootstrap", "0", "--no-progress", "--max-contributions-per-user", "2"]
    argv += ["--map", "action=arm", "--map", "reward=reward", "--map", "propensity=p"]
    argv += ["--map", "context=x1,x2", "--map", f"n_arms={K}"]
    code, text, err = _run([*argv, "--map", "user=uid", "--json", str(out)])
    assert code == 0, err
    assert "per user: at most 2 events per release" in out.read_text()
    assert "csv-u" not in text + out.read_text()
    code, _text, err = _run(argv)  # no user column: refused
    assert code == 2 and "--map user=COLUMN" in err
