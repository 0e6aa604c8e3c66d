"""dpbandit replay: one clear error line for bad input, working runs on the bundled Open Bandit
Dataset slice and on service logs, JSON and plot outputs, privacy reporting."""

import json
import subprocess
import sys

import numpy as np
import pytest

from dpbandit_testing.replay_helpers import service_log_lines, write_jsonl
from streaming_dpbandit.cli import main
from streaming_dpbandit.replay.datasets import obd_sample

RANDOM = str(obd_sample("random"))
BTS = str(obd_sample("bts"))


def run(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


BAD = [
    (["replay", "--policy", "random"], "--log"),
    (["replay", "--log", RANDOM], "--policy"),
    (["replay", "--log", "/no/such.jsonl", "--policy", "random"], "no such log"),
    (["replay", "--log", "README.md", "--policy", "random"], "cannot tell the format"),
    (["replay", "--log", RANDOM, "--policy", "nope"], "unknown policy"),
    (
        ["replay", "--log", RANDOM, "--policy", "random", "--estimator", "magic"],
        "unknown estimator",
    ),
    (["replay", "--log", RANDOM, "--policy", "fliphat", "--policy-param", "s=0"], "greater than 0"),
    (
        ["replay", "--log", RANDOM, "--policy", "random", "--policy-param", "zz=1"],
        "not a parameter",
    ),
    (["replay", "--log", RANDOM, "--policy", "random", "--epsilon", "-1"], "positive"),
    (["replay", "--log", RANDOM, "--policy", "random", "--level", "95"], "level must be in"),
    (["replay", "--log", RANDOM, "--policy", "random", "--bootstrap", "-3"], "integer >= 0"),
    (
        ["replay", "--log", RANDOM, "--policy", "random", "--json", "/no/dir/x.json"],
        "does not exist",
    ),
    (["replay", "--log", RANDOM, "--policy", "random", "--format", "xml"], "invalid choice"),
    (["replay", "--log", RANDOM, "--policy", "random", "--map", "action=a"], "--map is for csv"),
    (
        ["replay", "--log", RANDOM, "--policy", "random", "--log-param", "bandit=x"],
        "does not apply",
    ),
    (["replay", "--log", RANDOM, "--policy", "random", "--start", "3"], "range of a Kafka log"),
    (["replay", "--log", RANDOM, "--policy", "table"], "probabilities=[[...]] or from_log"),
    (
        ["replay", "--log", RANDOM, "--policy", "table", "--policy-param", "probabilities=[1, 1]"],
        "the table has 2 arms, the events have 34",
    ),
    (
        ["replay", "--log", BTS, "--policy", "random", "--estimator", "replay"],
        "the replay method needs uniformly logged events",
    ),
    (
        ["replay", "--log", RANDOM, "--policy", "table", "--policy-param", "from_log=/nope"],
        "no such log",
    ),
]


@pytest.mark.parametrize("argv, message", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_replay_input_gives_one_clear_line(argv, message, capsys):
    assert run([*argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_bad_log_in_a_real_process_exits_2(tmp_path):
    p = tmp_path / "log.csv"
    p.write_text("a,r,p\n0,1,0.5\n1,0,0\n")
    out = subprocess.run(
        [sys.executable, "-m", "streaming_dpbandit.cli", "replay", "--log", str(p), "--map",
         "action=a", "--map", "reward=r", "--map", "propensity=p", "--map", "n_arms=2",
         "--policy", "random", "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "row 2: propensity 0.0 is not in (0, 1]" in out.stderr
    assert "Traceback" not in out.stderr


def test_obd_worked_example_bts_from_the_uniform_log(tmp_path, capsys):
    """The documented example on the bundled slice: the BTS policy's value estimated from the
    uniform log agrees with the BTS log's on-policy click rate."""
    js = tmp_path / "out.json"
    plot = tmp_path / "out.png"
    argv = ["replay", "--log", RANDOM, "--policy", "table", "--policy-param", f"from_log={BTS}",
            "--estimator", "ips,snips,dm,dr", "--json", str(js), "--plot", str(plot),
            "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert "that log's on-policy value" in out and "per position" in out
    res = json.loads(js.read_text())
    assert plot.stat().st_size > 10_000
    run_ = res["runs"][0]
    src = run_["reference"]
    assert src["label"] == "source log (on-policy)"
    assert src["events"] == 3000
    assert src["value"] == pytest.approx(29 / 3000)  # the BTS slice's click rate
    est = run_["offpolicy"]["estimates"]
    assert set(est) == {"ips", "snips", "dm", "dr"}
    for name in ("ips", "snips", "dr"):
        e = est[name]
        # consistent with the on-policy value: the difference is within 3 combined s.e.
        diff = abs(e["value"] - src["value"])
        assert diff < 3 * np.hypot(e["se"], src["se"]), name
        assert e["ci_normal"][0] < e["value"] < e["ci_normal"][1]
        assert len(e["per_position"]) == 3 and e["curve"]["events"][-1] == 3000
    w = run_["offpolicy"]["weights"]
    assert 0 < w["ess"] < 3000 and w["warning"] is None
    assert res["on_policy"]["value"] == pytest.approx(13 / 3000)  # the uniform slice's rate
    assert res["reward_model"]["rows"] == 3000


def test_replay_private_policies_report_their_spend(tmp_path, capsys):
    js = tmp_path / "out.json"
    # the fast backend keeps this cheap (DP-LinUCB's secure tree draws ~40 exact Gaussians per
    # release, one release per matched event; replay's secure default is tested with
    # policy_config in tests/privacy/test_secure_noise.py)
    argv = ["replay", "--log", RANDOM, "--policy", "fliphat,dp-linucb,linucb",
            "--epsilon", "0.5,2", "--policy-param", "s=5", "--estimator", "replay",
            "--policy-param", "first_episode_len=1",
            "--policy-param", "noise_backend=fast",
            "--max-events", "1500", "--json", str(js), "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert "fliphat ε=0.5" in out and "dp-linucb ε=2" in out and "non-private" in out
    assert "rel.; fast noise)" in out
    res = json.loads(js.read_text())
    assert res["events"] == 1500
    runs = {r["key"]: r for r in res["runs"]}
    assert set(runs) == {
        "fliphat ε=0.5",
        "fliphat ε=2",
        "dp-linucb ε=0.5",
        "dp-linucb ε=2",
        "linucb",
    }
    for key, eps in (("fliphat ε=0.5", 0.5), ("dp-linucb ε=2", 2.0)):
        p = runs[key]["replay"]["privacy"]
        assert p["private"] and p["calibration"] == "certified" and p["dp_valid"]
        assert p["basic_epsilon"] == pytest.approx(eps)
        assert p["releases"] >= 2
        assert p["noise_backend"] == "fast"  # named in the JSON and the table (issue 31 §5)
        d = runs[key]["replay"]["estimate"]["diagnostics"]
        assert d["events"] == 1500 and 0 < d["matched"] < 200
    assert runs["linucb"]["replay"]["privacy"] == {"private": False, "releases": 0}


def test_paper_calibration_is_labelled(tmp_path, capsys):
    js = tmp_path / "out.json"
    argv = ["replay", "--log", RANDOM, "--policy", "fliphat", "--calibration", "paper",
            "--estimator", "replay", "--max-events", "600", "--json", str(js),
            "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    out = capsys.readouterr().out
    assert "not a valid DP guarantee" in out and "NOT DP-valid" in out
    p = json.loads(js.read_text())["runs"][0]["replay"]["privacy"]
    assert p["dp_valid"] is False and "not a valid DP guarantee" in p["label"]
    # replay's default backend is the library's: secure for FLIPHAT, named in table and JSON
    assert p["noise_backend"] == "secure" and "secure noise)" in out


def test_replay_service_jsonl_log(tmp_path, capsys):
    p = tmp_path / "log.jsonl"
    write_jsonl(p, service_log_lines(3000, K=3, d=2, seed=4))
    js = tmp_path / "out.json"
    argv = ["replay", "--log", str(p), "--policy", "linucb,random", "--policy-param",
            "batch_size=8", "--estimator", "replay,ips,snips,dm,dr", "--warmup", "600",
            "--json", str(js), "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    res = json.loads(js.read_text())
    runs = {r["key"]: r for r in res["runs"]}
    lin = runs["linucb"]
    # reward = x·θ + noise with θ = (0.5, 1): a learning policy beats the logged random policy
    assert lin["replay"]["estimate"]["value"] > res["on_policy"]["value"] + 0.3
    assert lin["offpolicy"]["warmup"]["events"] == 600
    assert lin["offpolicy"]["estimates"]["dr"]["n"] == 2400
    rnd = runs["random"]["offpolicy"]["estimates"]
    for name in ("ips", "snips", "dr"):  # the random policy's value is the logged policy's
        assert abs(rnd[name]["value"] - res["on_policy"]["value"]) < 4 * rnd[name]["se"] + 0.01
    assert res["log"]["join"] == {}
    assert res["reward_model"]["r2_out_of_fold"] > 0.5


def test_replay_csv_log_with_mapping(tmp_path, capsys):
    rng = np.random.default_rng(0)
    n = 2000
    x = rng.normal(size=(n, 2))
    a = rng.integers(0, 2, n)
    r = (rng.random(n) < np.where(a == (x[:, 0] > 0), 0.8, 0.2)).astype(int)
    lines = ["arm,click,ps,x0,x1"] + [
        f"{a[i]},{r[i]},0.5,{x[i, 0]:.4f},{x[i, 1]:.4f}" for i in range(n)
    ]
    p = tmp_path / "log.csv"
    p.write_text("\n".join(lines) + "\n")
    js = tmp_path / "out.json"
    argv = ["replay", "--log", str(p), "--map", "action=arm", "--map", "reward=click",
            "--map", "propensity=ps", "--map", "context=x*", "--policy", "greedy",
            "--estimator", "replay", "--json", str(js), "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    res = json.loads(js.read_text())
    assert res["log"]["d"] == 6  # 2 arms × (2 columns + intercept), disjoint encoding
    # greedy learns the rule "arm 1 iff x0 > 0" (value 0.8) from matched events
    assert res["runs"][0]["replay"]["estimate"]["value"] > 0.65


def test_non_uniform_log_skips_the_replay_method_but_not_the_estimators(tmp_path, capsys):
    js = tmp_path / "out.json"
    argv = ["replay", "--log", BTS, "--policy", "random", "--json", str(js), "--no-progress"]
    assert run(argv) == 0  # default estimators: replay,ips,snips,dr
    out = capsys.readouterr().out
    assert "replay method skipped: the replay method needs uniformly logged events" in out
    res = json.loads(js.read_text())
    run_ = res["runs"][0]
    assert run_["replay"] is None and "uniformly" in run_["replay_skipped"]
    assert set(run_["offpolicy"]["estimates"]) == {"ips", "snips", "dr"}


def test_kafka_is_not_imported_by_the_replay_package():
    code = (
        "import sys, streaming_dpbandit.replay, streaming_dpbandit.replay.readers; "
        "print('kafka' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_plot_bands_of_a_click_rate_stay_in_its_range_and_are_explained(tmp_path, monkeypatch):
    """Issue 21: the OBD slice's click rate is ~0.004, whose early normal intervals go below
    0; the plot clips them to the logged reward range [0, 1] and its caption says what the
    shaded bands are."""
    import matplotlib.figure
    from matplotlib.collections import PolyCollection

    saved = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig))
    argv = ["replay", "--log", RANDOM, "--policy", "table", "--policy-param",
            f"from_log={BTS}", "--estimator", "ips",
            "--bootstrap", "0", "--plot", str(tmp_path / "p.png"), "--no-progress",
            "--json", str(tmp_path / "r.json")]  # fmt: skip
    assert run(argv) == 0
    res = json.loads((tmp_path / "r.json").read_text())
    lo = res["runs"][0]["offpolicy"]["estimates"]["ips"]["curve"]["lo"]
    assert min(v for v in lo if v is not None) < 0  # the unclipped interval does go below 0
    (fig,) = saved
    bands = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert bands
    for band in bands:
        for path in band.get_paths():
            ys = path.vertices[:, 1]
            assert np.nanmin(ys) >= 0 and np.nanmax(ys) <= 1
    assert "shaded: 95% normal intervals" in fig._suptitle.get_text()


@pytest.mark.parametrize("estimator", ["replay,ips,snips,dr", "ips", "replay"])
def test_a_log_without_decisions_says_so_and_names_its_format(tmp_path, capsys, estimator):
    """A `serve --file` input (contexts and feedback only) given to replay: the error names
    what is missing and how the format was chosen, whichever estimator was asked for."""
    p = tmp_path / "events.jsonl"
    write_jsonl(p, [x for x in service_log_lines(50, seed=1) if x["topic"] != "decisions"])
    assert run(["replay", "--log", str(p), "--policy", "linucb", "--estimator", estimator,
                "--no-progress"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err == (
        f"dpbandit replay: error: {p}: read as a service-jsonl log (detected from its name), "
        "the log has 50 context and 50 feedback messages but no decisions: replay needs the "
        "logged decisions (the arm the logging policy chose, with its propensity) beside them "
        "— the decisions topic; for a file run, dpbandit serve --decisions-out writes them"
    )
    assert run(["replay", "--log", str(p), "--format", "service-jsonl", "--policy", "linucb",
                "--no-progress"]) == 2  # fmt: skip
    assert "(given with --format)" in capsys.readouterr().err
