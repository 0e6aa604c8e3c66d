"""deploy/grafana: the dashboard is a well-formed Grafana dashboard, every query selects metrics
(and labels) the service really exports, and it shows what issue 9 asks for. (The queries are
also run against a real Prometheus scraping a real service in test_prometheus_e2e.py.)"""

from __future__ import annotations

import json
import re

import pytest

from dpbandit_testing.deploy_helpers import (
    DEPLOY,
    REPO,
    check_promql,
    promql_metric_names,
    service_metrics,
)

DASHBOARD = DEPLOY / "grafana" / "dpbandit-dashboard.json"
PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "state-timeline"}


@pytest.fixture(scope="module")
def dash() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out += p.get("panels", [])  # collapsed rows hold their panels
    return out


def queries(dash) -> list[tuple[str, str]]:
    """(where, expr) of every panel target and every query variable."""
    out = []
    for p in panels(dash):
        for t in p.get("targets", []):
            out.append((f"panel {p['title']!r} target {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", q)
            assert m, f"variable {v['name']}: unexpected query {q!r}"
            out.append((f"variable {v['name']}", f"sum by ({m.group(2)}) ({m.group(1)})"))
    return out


def test_dashboard_structure(dash):
    for key in ("title", "uid", "panels", "templating", "schemaVersion", "time", "refresh"):
        assert key in dash, key
    assert isinstance(dash["schemaVersion"], int) and dash["schemaVersion"] >= 36
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dash["uid"])
    assert "id" not in dash or dash["id"] is None  # provisioning assigns the id
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    occupied = set()
    for p in panels(dash):
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and g[k] >= 0 for k in "xywh"), p["title"]
        assert g["w"] >= 1 and g["h"] >= 1 and g["x"] + g["w"] <= 24, p["title"]
        cells = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        assert p.get("title"), p
        if p["type"] == "row":
            continue
        assert p.get("description"), f"panel {p['title']!r} has no description"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
            # every bandit-labelled series follows the bandit selector
            if "bandit" in t.get("legendFormat", "").replace("dpbandit", ""):
                assert '$bandit"' in t["expr"], (p["title"], t["expr"])


def test_every_query_uses_metrics_and_labels_the_service_exports(dash):
    known = service_metrics()
    problems = []
    for where, expr in queries(dash):
        problems += check_promql(expr, known, where)
    assert not problems, "\n".join(problems)


def test_every_exported_metric_is_on_the_dashboard(dash):
    used = set()
    for _, expr in queries(dash):
        used |= promql_metric_names(expr)
    known = service_metrics()
    missing = []
    for name in sorted(known):
        if name.startswith(("process_", "python_")):
            continue  # the client library's standard series: CPU and memory are checked below
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        if base + "_bucket" in known:  # a histogram: any of its three series will do
            if not used & {base + "_bucket", base + "_count", base + "_sum"}:
                missing.append(base)
        elif name not in used:
            missing.append(name)
    assert not missing, f"exported but not on the dashboard: {sorted(set(missing))}"


def test_dashboard_shows_what_the_issue_asks_for(dash):
    by_title = {p["title"]: p for p in panels(dash)}
    spend = by_title["ε spent vs budget"]
    exprs = " ".join(t["expr"] for t in spend["targets"])
    legends = " ".join(t["legendFormat"] for t in spend["targets"])
    assert "dpbandit_privacy_epsilon_spent" in exprs and "dpbandit_privacy_epsilon_budget" in exprs
    assert "{{accountant}}" in legends and "{{calibration}}" in legends
    calib = " ".join(t["expr"] for t in by_title["Calibration and guarantee"]["targets"])
    assert "dpbandit_calibration_info" in calib
    wanted = {
        "Regret proxy": "dpbandit_regret_proxy_window_mean",
        "Reward (mean of the last 1000)": "dpbandit_reward_window_mean",
        "Episode progress": "dpbandit_episode_progress_ratio",
        "Throughput": "dpbandit_events_total",
        "Decision latency": "dpbandit_decision_latency_seconds_bucket",
        "Dead letters": "dpbandit_dead_letters_total",
        "Consumer lag": "dpbandit_consumer_lag",
    }
    for title, metric in wanted.items():
        assert metric in " ".join(t["expr"] for t in by_title[title]["targets"]), title
    # issue 21: time to budget exhaustion, CPU and memory, dead letters per $bandit, the version
    ttl = " ".join(t["expr"] for t in by_title["Time to budget exhaustion"]["targets"])
    assert "dpbandit_privacy_epsilon_budget" in ttl and "dpbandit_privacy_epsilon_of_record" in ttl
    assert "deriv(" in ttl and by_title["Time to budget exhaustion"]["fieldConfig"]["defaults"][
        "unit"
    ] in ("s", "dtdurations")
    cpu = " ".join(t["expr"] for t in by_title["CPU"]["targets"])
    assert re.search(r"rate\(process_cpu_seconds_total\{[^}]*\}\[", cpu)
    mem = " ".join(t["expr"] for t in by_title["Memory"]["targets"])
    assert "process_resident_memory_bytes" in mem
    dead = by_title["Dead letters"]["targets"]
    assert all('bandit=~"$bandit"' in t["expr"] for t in dead)
    used = set().union(*(promql_metric_names(e) for _, e in queries(dash)))
    assert {"dpbandit_build_info", "dpbandit_model_version"} <= used
    assert "dpbandit_episode" not in used
    latency = [t["expr"] for t in by_title["Decision latency"]["targets"]]
    assert {re.match(r"histogram_quantile\(([\d.]+),", e).group(1) for e in latency} == {
        "0.5",
        "0.95",
        "0.99",
    }


def test_dashboard_checks_catch_a_wrong_metric(dash):
    """The metric check above would fail on a typo (it is not vacuous)."""
    broken = json.loads(json.dumps(dash))
    target = next(p for p in panels(broken) if p["type"] != "row")["targets"][0]
    target["expr"] = target["expr"].replace("dpbandit_privacy_epsilon_spent", "dpbandit_eps_spent")
    problems = []
    for where, expr in queries(broken):
        problems += check_promql(expr, service_metrics(), where)
    assert any("dpbandit_eps_spent" in p for p in problems)


def test_metrics_doc_lists_exactly_what_the_service_exports():
    """docs/metrics.md — what dashboards and rules are written against — matches the registry:
    names, types and labels."""
    from prometheus_client import Counter, Gauge, Histogram, Info

    from streaming_dpbandit.metrics import GatewayMetrics, ServiceMetrics
    from streaming_dpbandit.stream.local.runtime import LocalMetrics

    sm = ServiceMetrics()
    exported = {}
    gateway = GatewayMetrics(sm.registry)
    for c in [*vars(sm).values(), *vars(LocalMetrics(sm)).values(), *vars(gateway).values()]:
        if isinstance(c, Info):  # one gauge sample of value 1, its facts as labels
            exported[c._name + "_info"] = ("gauge", set(c._value))
            continue
        for cls, kind, suffix in ((Counter, "counter", "_total"), (Histogram, "histogram", "")):
            if isinstance(c, cls):
                exported[c._name + suffix] = (kind, set(c._labelnames))
                break
        else:
            if isinstance(c, Gauge):
                exported[c._name] = ("gauge", set(c._labelnames))
    documented = {}
    doc = (REPO / "docs" / "metrics.md").read_text()
    for m in re.finditer(r"^\| `(dpbandit_\w+)` \| (\w+) \| ([^|]*) \|", doc, flags=re.M):
        labels = {x.strip() for x in m.group(3).split(",")} - {"—", ""}
        documented[m.group(1)] = (m.group(2), labels)
    assert documented == exported
