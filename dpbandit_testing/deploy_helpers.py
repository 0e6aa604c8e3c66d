"""Helpers of the deployment tests: the service's real metric names and labels, PromQL metric
and label references, the repository's deployment files."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from prometheus_client import Counter, Gauge, Histogram

from streaming_dpbandit.metrics import ServiceMetrics

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"

#: labels Prometheus attaches to every scraped series (static configs, Kubernetes SD)
TARGET_LABELS = {"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

PROMQL_KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
}


def service_metrics() -> dict[str, set[str]]:
    """{exported sample name: label names} of everything ``dpbandit serve`` exports.

    Counters export ``<name>_total``, histograms ``<name>_bucket`` (plus ``le``), ``_count`` and
    ``_sum``, gauges ``<name>``: the names a PromQL query can select.
    """
    out: dict[str, set[str]] = {}
    metrics = ServiceMetrics()
    # unlabelled and standard series (process_*, python_info, dpbandit_build_info): as collected
    for fam in metrics.registry.collect():
        for s in fam.samples:
            out.setdefault(s.name, set(s.labels))
    for c in vars(metrics).values():
        if isinstance(c, Counter):
            out[c._name + "_total"] = set(c._labelnames)
        elif isinstance(c, Histogram):
            out[c._name + "_bucket"] = set(c._labelnames) | {"le"}
            out[c._name + "_count"] = set(c._labelnames)
            out[c._name + "_sum"] = set(c._labelnames)
        elif isinstance(c, Gauge):
            out[c._name] = set(c._labelnames)
    return out


def _strip(expr: str) -> str:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"'(?:[^'\\]|\\.)*'", "''", s)
    s = re.sub(r"`[^`]*`", "``", s)
    return s


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (a lexical scan, enough for our queries)."""
    s = _strip(expr)
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\$\{[^}]*\}|\$\w+", " ", s)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][\w:]*", s):
        word = m.group(0)
        if s[m.end() :].lstrip().startswith("(") or word.lower() in PROMQL_KEYWORDS:
            continue  # a function or an aggregation, or a keyword
        names.add(word)
    return names


def promql_label_refs(expr: str) -> tuple[list[tuple[str, str]], set[str]]:
    """([(metric, label) of every matcher attached to a metric name], {labels of by/on/...})."""
    s = _strip(expr)
    matchers = []
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*\{([^{}]*)\}", s):
        for lab in re.finditer(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", m.group(2)):
            matchers.append((m.group(1), lab.group(1)))
    grouping = set()
    for m in re.finditer(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", s):
        grouping |= {x.strip() for x in m.group(1).split(",") if x.strip()}
    return matchers, grouping


def check_promql(expr: str, known: dict[str, set[str]], where: str) -> list[str]:
    """Problems of one expression: unknown metrics, labels a metric does not have, grouping
    labels no selected metric has."""
    problems = []
    names = promql_metric_names(expr)
    if not names:
        problems.append(f"{where}: selects no metric: {expr!r}")
    for n in sorted(names - set(known)):
        problems.append(f"{where}: {n} is not a metric the service exports: {expr!r}")
    matchers, grouping = promql_label_refs(expr)
    for metric, label in matchers:
        if metric in known and label not in known[metric] | TARGET_LABELS | {"__name__"}:
            problems.append(f"{where}: {metric} has no label {label!r}: {expr!r}")
    available = set(TARGET_LABELS)
    for n in names & set(known):
        available |= known[n]
    for label in sorted(grouping - available):
        problems.append(f"{where}: no selected metric has the label {label!r}: {expr!r}")
    return problems


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def rule_groups() -> list[dict]:
    groups = []
    for f in sorted((DEPLOY / "prometheus" / "rules").glob("*.rules.yml")):
        groups += load_yaml(f)["groups"]
    return groups


# -- the Dockerfile ---------------------------------------------------------------------------
def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, buf = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        instr, _, args = buf.strip().partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = ""
    return out


def stages() -> list[list[tuple[str, str]]]:
    out = []
    for instr, args in dockerfile():
        if instr == "FROM":
            out.append([])
        if out:
            out[-1].append((instr, args))
    return out


def image_env() -> dict[str, str]:
    """The ENV of the final stage: the container's environment (PATH included)."""
    env = {}
    for instr, args in stages()[-1]:
        if instr == "ENV":
            for item in shlex.split(args):
                k, _, v = item.partition("=")
                env[k] = v
    return env


def args_default(name: str) -> str:
    for instr, args in dockerfile():
        if instr == "ARG" and args.startswith(name + "="):
            return args.split("=", 1)[1]
    raise AssertionError(f"no ARG {name}")
