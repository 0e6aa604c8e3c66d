"""End to end: a real Prometheus server (Debian's package) scrapes a real `dpbandit serve`
process during a simulated stream, with the repository's scrape config and rules; queries
through Prometheus's HTTP API return the privacy spend and event counts the service reports,
the rules evaluate without errors, the budget alert goes pending, and every dashboard query
runs against the live data."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from dpbandit_testing.deploy_helpers import DEPLOY, REPO
from streaming_dpbandit.envs import FliphatPaperEnv

EVENTS = 40_000
BANDIT = "default"
EPSILON, DELTA, BUDGET = 1.0, 1e-6, 1.2  # 1/1.2 ≈ 83% of the budget: DPBanditPrivacyBudgetHigh

#: dashboard queries (by a part of their text) that may legitimately return nothing in this
#: run: no such event happened
MAY_BE_EMPTY = {
    "dpbandit_forced_expiries_total",  # no idle timeout in a simulation
    "dpbandit_privacy_rho_spent",  # FLIPHAT's releases are pure-ε/approximate DP: no ρ
    "dpbandit_clipped_inputs_total",  # depends on the draws
    "dpbandit_bounded_events_total",  # the simulated bandit is event level (no user_level)
    'outcome!="decided"',  # contexts that were dead-lettered: the simulation sends none
    "dpbandit_slate_items",  # the simulated bandit is single-arm: no slate catalogue
    # time to budget exhaustion exists only while the spend grows; FLIPHAT's releases compose
    # in parallel (disjoint episodes), so its ε of record is flat and the panel is rightly empty
    "deriv(dpbandit_privacy_epsilon_of_record",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (OSError, ValueError, KeyError) as err:  # not up yet
            last = err
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


class PrometheusAPI:
    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params):
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, **params) -> list[dict]:
        data = self.get("/api/v1/query", query=expr, **params)
        assert data["resultType"] == "vector", data
        return data["result"]

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


@pytest.fixture
def stack(prometheus_bin, tmp_path):
    """Prometheus (repository config and rules, 1 s scrapes) and then the service; both are
    stopped at the end, whatever happens."""
    metrics_port, prom_port = free_port(), free_port()
    cfg = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    cfg["rule_files"] = [str(DEPLOY / "prometheus" / "rules" / "*.rules.yml")]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    jobs["dpbandit"]["static_configs"] = [{"targets": [f"127.0.0.1:{metrics_port}"]}]
    jobs["prometheus"]["static_configs"] = [{"targets": [f"127.0.0.1:{prom_port}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))

    env = FliphatPaperEnv(d=100, K=3, s_star=5)
    serve_cfg = {
        "mode": "service",
        "simulation": {"events": EVENTS, "bandit_id": BANDIT},  # the default environment, d=100
        "bandits": {
            BANDIT: {
                "policy": {
                    "policy": "fliphat",
                    "d": env.d,
                    "s": 10,
                    "epsilon": EPSILON,
                    "delta": DELTA,
                    "b_max": round(env.b_max, 6),
                    "first_episode_len": 256,
                    "swap_delay": 250,
                },
                "feedback_window": 2.0,
                "epsilon_budget": BUDGET,
            }
        },
        "snapshots": {"directory": str(tmp_path / "state"), "interval_s": 1},
        "metrics": {"host": "127.0.0.1", "port": metrics_port},
        "progress": False,
    }
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(serve_cfg))

    procs = {}
    logs = {}
    try:
        logs["prometheus"] = open(tmp_path / "prometheus.log", "w")
        procs["prometheus"] = subprocess.Popen(
            [
                str(prometheus_bin / "prometheus"),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=logs["prometheus"],
            stderr=subprocess.STDOUT,
        )
        api = PrometheusAPI(prom_port)

        def ready():
            assert procs["prometheus"].poll() is None, (tmp_path / "prometheus.log").read_text()
            with urllib.request.urlopen(f"{api.base}/-/ready", timeout=2) as r:
                return r.status == 200

        wait_for(ready, 60, "Prometheus to be ready")
        logs["serve-out"] = open(tmp_path / "serve.out", "w")
        logs["serve-err"] = open(tmp_path / "serve.err", "w")
        started = time.time()
        procs["serve"] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streaming_dpbandit.cli",
                "serve",
                "--config",
                str(tmp_path / "serve.yaml"),
                "--linger",
                "300",
                "--summary-json",
                str(tmp_path / "summary.json"),
            ],
            stdout=logs["serve-out"],
            stderr=logs["serve-err"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        yield {"api": api, "procs": procs, "dir": tmp_path, "started": started}
    finally:
        for name in ("serve", "prometheus"):
            p = procs.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        for fh in logs.values():
            fh.close()


def test_prometheus_scrapes_the_service_during_a_simulated_stream(stack):
    api, procs, d = stack["api"], stack["procs"], stack["dir"]
    sel = f'bandit="{BANDIT}"'

    def service_log() -> str:
        return (d / "serve.err").read_text()[-3000:]

    # 1. the stream runs to its end while Prometheus scrapes; the service then lingers
    def stream_done():
        assert procs["serve"].poll() is None, f"serve exited early:\n{service_log()}"
        return "served " in (d / "serve.out").read_text()

    wait_for(stream_done, 240, "the simulated stream to end", interval=0.5)
    ended = time.time()  # the summary is printed after everything is counted and exported
    wait_for(
        lambda: (api.value(f"timestamp(dpbandit_rounds{{{sel}}})") or 0) > ended + 1,
        30,
        "a scrape of the final state",
    )
    time.sleep(3)  # a few more evaluations of the rules on the final values

    # 2. Prometheus saw the stream in progress, not only its end
    rng = api.get(
        "/api/v1/query_range",
        query=f'dpbandit_events_total{{{sel},outcome="decided"}}',
        start=f"{stack['started']:.3f}",
        end=f"{ended:.3f}",
        step="0.5",
    )
    assert rng["resultType"] == "matrix" and len(rng["result"]) == 1, rng
    seen = sorted({float(v) for _, v in rng["result"][0]["values"]})
    during = [v for v in seen if 0 < v < EVENTS]
    assert len(during) >= 2, f"no scrape during the stream: {seen}"

    # 3. event counts and privacy spend through the HTTP API
    assert api.value(f'dpbandit_events_total{{{sel},outcome="decided"}}') == EVENTS
    assert api.value(f"sum(dpbandit_events_total{{{sel}}})") == EVENTS
    assert api.value(f"dpbandit_decision_latency_seconds_count{{{sel}}}") == EVENTS
    basic = api.value(f'dpbandit_privacy_epsilon_spent{{{sel},accountant="basic"}}')
    pld = api.value(f'dpbandit_privacy_epsilon_spent{{{sel},accountant="pld"}}')
    assert basic == pytest.approx(EPSILON, abs=1e-12)
    assert pld == pytest.approx(EPSILON, rel=1e-6)
    calib = api.query(f'dpbandit_privacy_epsilon_spent{{{sel},accountant="basic"}}')
    assert calib[0]["metric"]["calibration"] == "certified"
    assert api.value(f"dpbandit_privacy_delta_spent{{{sel}}}") == pytest.approx(DELTA)
    assert api.value(f"dpbandit_privacy_epsilon_budget{{{sel}}}") == BUDGET
    info = api.query(f'dpbandit_calibration_info{{{sel},dp_valid="true"}}')
    assert [r["metric"]["calibration"] for r in info] == ["certified"]
    releases = api.value(f"dpbandit_ledger_releases{{{sel}}}")
    assert releases >= 5

    # 4. the recording rules and the budget alert, evaluated by Prometheus itself
    ratio = api.value(f"bandit:dpbandit_privacy_budget_used:ratio{{{sel}}}")
    assert ratio == pytest.approx(EPSILON / BUDGET, rel=1e-6)
    of_record = api.query(f"dpbandit_privacy_epsilon_of_record{{{sel}}}")
    assert len(of_record) == 1, of_record  # one series: the accountant of record, named
    assert float(of_record[0]["value"][1]) == pytest.approx(min(basic, pld))
    assert api.value(f"bandit:dpbandit_privacy_epsilon_spent:of_record{{{sel}}}") == pytest.approx(
        min(basic, pld)
    )
    dl_ratio = api.query("job:dpbandit_dead_letters:ratio_rate5m")
    assert len(dl_ratio) == 1 and 0 <= float(dl_ratio[0]["value"][1]) < 0.05, dl_ratio
    alerts = api.query(f'ALERTS{{alertname="DPBanditPrivacyBudgetHigh",{sel}}}')
    assert alerts and alerts[0]["metric"]["alertstate"] in ("pending", "firing"), alerts
    for quiet in ("DPBanditPrivacyBudgetExhausted", "DPBanditDown", "DPBanditRefitFailures"):
        assert api.query(f'ALERTS{{alertname="{quiet}"}}') == [], quiet
    assert api.value('up{job="dpbandit"}') == 1
    groups = api.get("/api/v1/rules")["groups"]
    rules = [r for g in groups for r in g["rules"]]
    assert {g["name"] for g in groups} == {
        "dpbandit.recording",
        "dpbandit.privacy",
        "dpbandit.service",
    }
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad

    # 5. every dashboard query runs against the live data
    check_dashboard_queries(api)

    # 6. the service's own end-of-run figures agree with what Prometheus recorded (queried
    # now: once the target is gone, Prometheus marks its series stale)
    joined = api.value(f'dpbandit_feedback_total{{{sel},outcome="joined"}}')
    dead = api.value("sum(dpbandit_dead_letters_total)") or 0
    regret = api.value(f"dpbandit_simulated_pseudo_regret{{{sel}}}")
    procs["serve"].send_signal(signal.SIGTERM)
    assert procs["serve"].wait(timeout=30) == 0, service_log()
    summary = json.loads((d / "summary.json").read_text())
    b = summary["bandits"][BANDIT]
    assert summary["decisions"] == b["rounds"] == EVENTS
    assert b["privacy"]["releases"] == releases
    assert b["privacy"]["basic_epsilon"] == pytest.approx(basic, abs=1e-12)
    assert b["privacy"]["of_record"]["epsilon"] == pytest.approx(min(basic, pld))
    assert joined == b["stats"]["joined"] > 0.9 * EVENTS
    assert dead == sum(summary["dead_letters"].values())
    assert regret == pytest.approx(summary["source"]["pseudo_regret"]) and regret > 0


def check_dashboard_queries(api: PrometheusAPI) -> None:
    dash = json.loads((DEPLOY / "grafana" / "dpbandit-dashboard.json").read_text())
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"]
            metric, label = q[len("label_values(") : -1].split(", ")
            values = api.get(f"/api/v1/label/{label}/values", **{"match[]": metric})
            assert values == [BANDIT], (q, values)
    empty, checked = [], 0
    for p in dash["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"].replace("$bandit", ".*").replace("$__rate_interval", "30s")
            result = api.query(expr)  # fails unless Prometheus accepts and evaluates it
            checked += 1
            if not result:
                empty.append((p["title"], t["refId"], expr))
            for r in result:
                assert not math.isinf(float(r["value"][1])), (p["title"], expr, r)
    assert checked >= 30
    unexplained = [e for e in empty if not any(m in e[2] for m in MAY_BE_EMPTY)]
    assert not unexplained, unexplained


def test_stack_fixture_paths_exist():
    """The files the end-to-end test takes from the repository are the shipped ones."""
    assert (REPO / "deploy" / "prometheus" / "prometheus.yml").is_file()
    assert len(list((REPO / "deploy" / "prometheus" / "rules").glob("*.rules.yml"))) == 2
    assert Path(DEPLOY / "grafana" / "dpbandit-dashboard.json").is_file()
