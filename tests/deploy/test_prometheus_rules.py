"""deploy/prometheus: the scrape config and rules pass promtool's checks, the rule unit tests
pass (`promtool test rules`) and fail when a rule is broken, and the rules use only metrics and
labels the service really exports."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from dpbandit_testing.deploy_helpers import (
    DEPLOY,
    REPO,
    check_promql,
    load_yaml,
    rule_groups,
    service_metrics,
)

PROM = DEPLOY / "prometheus"
RULE_TEST = PROM / "tests" / "dpbandit-rules.test.yml"

#: what issue 9 asks the alerts to cover
REQUIRED_ALERTS = {
    "DPBanditPrivacyBudgetHigh",  # above 80%
    "DPBanditPrivacyBudgetExhausted",
    "DPBanditPrivacyBudgetExhaustionProjected",  # spend rate: exhaustion within a day
    "DPBanditConsumerLagHigh",
    "DPBanditCheckpointStale",  # older than its interval
    "DPBanditDeadLetterRateHigh",
    "DPBanditRefitFailures",
    "DPBanditNoDecisions",
}


def promtool(prometheus_bin, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(prometheus_bin / "promtool"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def alerts() -> list[dict]:
    return [r for g in rule_groups() for r in g["rules"] if "alert" in r]


def recordings() -> list[dict]:
    return [r for g in rule_groups() for r in g["rules"] if "record" in r]


def test_rules_pass_promtool_check(prometheus_bin):
    files = sorted(str(p) for p in (PROM / "rules").glob("*.rules.yml"))
    assert len(files) == 2
    out = promtool(prometheus_bin, "check", "rules", *files)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == 2


def test_scrape_config_passes_promtool_check(prometheus_bin, tmp_path):
    cfg = load_yaml(PROM / "prometheus.yml")
    # the compose stack mounts rules/ at /etc/prometheus/rules
    assert cfg["rule_files"] == ["/etc/prometheus/rules/*.rules.yml"]
    cfg["rule_files"] = [str(PROM / "rules" / "*.rules.yml")]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    out = promtool(prometheus_bin, "check", "config", str(tmp_path / "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 rule files found" in out.stdout
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert jobs["dpbandit"]["static_configs"][0]["targets"] == ["dpbandit:9464"]
    # the alerts find the service by this job name
    assert all('job="dpbandit"' in a["expr"] for a in alerts() if "up{" in a["expr"])


def test_rule_unit_tests_pass(prometheus_bin):
    out = promtool(prometheus_bin, "test", "rules", RULE_TEST.name, cwd=RULE_TEST.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def _mutations():
    """(alert or record, file, old, new): a plausible bug in each rule."""
    a, r = "dpbandit-alerts.rules.yml", "dpbandit-recording.rules.yml"
    return [
        ("DPBanditPrivacyBudgetHigh", a, "ratio > 0.8 < 1", "ratio > 0.95 < 1"),
        ("DPBanditPrivacyBudgetExhausted", a, "ratio >= 1\n", "ratio > 1\n"),
        ("DPBanditPrivacyBudgetExhaustionProjected", a, "[6h], 86400)", "[6h], 3600)"),
        ("DPBanditCalibrationNotDPValid", a, 'dp_valid="false"', 'dp_valid="true"'),
        ("DPBanditDown", a, 'up{job="dpbandit"} == 0', 'up{job="dpbandit"} == 1'),
        ("DPBanditMissing", a, 'absent(up{job="dpbandit"})', 'absent(up{job="dpbandit-old"})'),
        ("DPBanditNoDecisions", a, "changes(dpbandit_rounds[15m]) == 0", "dpbandit_rounds == 0"),
        (
            "DPBanditConsumerLagHigh",
            a,
            "(dpbandit_consumer_lag) > 10000",
            "(dpbandit_consumer_lag) > 20000",
        ),
        (
            "DPBanditCheckpointStale",
            a,
            "dpbandit_checkpoint_interval_seconds + 60",
            "dpbandit_checkpoint_interval_seconds * 10",
        ),
        ("DPBanditDeadLetterRateHigh", a, "ratio_rate5m > 0.01", "ratio_rate5m > 0.05"),
        (
            "DPBanditRefitFailures",
            a,
            "increase(dpbandit_refit_failures_total[1h]) > 0",
            "dpbandit_refit_failures_total > 5",
        ),
        (
            "of_record",
            r,
            "(dpbandit_privacy_epsilon_of_record)\n",
            '(dpbandit_privacy_epsilon_spent{accountant="basic"})\n',
        ),
        ("ratio_rate5m", r, '{outcome!="watermark"}[5m]))\n', "[5m]))\n"),
        (
            "ratio_rate5m",
            r,
            "(rate(dpbandit_events_total[5m])) * 0",
            "(rate(dpbandit_events_total[5m]))",
        ),
        ("ratio_rate5m", r, '{outcome!="watermark"}[5m])) * 0', '{outcome!="watermark"}[5m]))'),
    ]


@pytest.mark.parametrize(
    "name, file, old, new", _mutations(), ids=[f"{m[0]}-{i}" for i, m in enumerate(_mutations())]
)
def test_rule_unit_tests_catch_a_broken_rule(prometheus_bin, tmp_path, name, file, old, new):
    shutil.copytree(PROM / "rules", tmp_path / "rules")
    shutil.copytree(PROM / "tests", tmp_path / "tests")
    path = tmp_path / "rules" / file
    text = path.read_text()
    assert text.count(old) == 1, f"mutation anchor not found once: {old!r}"
    path.write_text(text.replace(old, new))
    assert promtool(prometheus_bin, "check", "rules", str(path)).returncode == 0
    out = promtool(prometheus_bin, "test", "rules", RULE_TEST.name, cwd=tmp_path / "tests")
    report = out.stdout + out.stderr
    assert out.returncode != 0 and "FAILED" in report, f"{name}: the broken rule passed"
    assert name in report, report  # and the failure is about the broken rule


def test_every_alert_is_documented_labelled_and_tested_both_ways():
    names = [a["alert"] for a in alerts()]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS
    ops = (REPO / "docs" / "operations.md").read_text()
    headings = set(re.findall(r"^#{2,4} (DPBandit\w+)\s*$", ops, flags=re.M))
    tests = load_yaml(RULE_TEST)["tests"]
    cases = [c for t in tests for c in t.get("alert_rule_test", [])]
    for a in alerts():
        n = a["alert"]
        assert a["labels"]["severity"] in ("warning", "critical"), n
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], n
        assert ann["runbook"] == f"docs/operations.md#{n.lower()}", n
        assert n in headings, f"docs/operations.md has no section for {n}"
        mine = [c for c in cases if c["alertname"] == n]
        assert any(c["exp_alerts"] for c in mine), f"no test where {n} fires"
        assert any(not c["exp_alerts"] for c in mine), f"no test where {n} stays quiet"
    assert set(headings) == set(names), "docs/operations.md documents alerts that do not exist"


def test_rules_use_only_exported_metrics_and_labels():
    known = service_metrics()
    known["up"] = set()
    recorded = {r["record"]: set() for r in recordings()}
    # a recording rule keeps the labels it aggregates by
    for r in recordings():
        m = re.search(r"by \(([^)]*)\)", r["expr"])
        if m:
            recorded[r["record"]] = {x.strip() for x in m.group(1).split(",")}
    problems = []
    for r in recordings() + alerts():
        where = r.get("record") or r.get("alert")
        problems += check_promql(r["expr"], known | recorded, where)
    assert not problems, "\n".join(problems)


def test_promql_scanner_finds_typos():
    """The scanner the dashboard and rule checks rely on does find wrong names and labels."""
    known = service_metrics()
    assert check_promql("sum by (bandit) (rate(dpbandit_events_total[5m]))", known, "x") == []
    latency = (
        "histogram_quantile(0.99, sum by (le, bandit) (rate("
        'dpbandit_decision_latency_seconds_bucket{bandit=~"$bandit"}[$__rate_interval])))'
    )
    assert check_promql(latency, known, "x") == []
    assert check_promql("rate(dpbandit_event_total[5m])", known, "x")  # typo in the name
    assert check_promql("dpbandit_rounds{bandit_id='a'}", known, "x")  # no such label
    assert check_promql("sum by (reason) (dpbandit_rounds)", known, "x")  # no such label
    assert check_promql("dpbandit_events", known, "x")  # a counter's family name: not a series
    assert check_promql("vector(1)", known, "x")  # selects nothing
