"""deploy/kubernetes: the manifests validate against the Kubernetes API schemas
(kubernetes-validate, strict), the Prometheus Operator resources have the fields the operator
needs, and the manifests agree with each other, with the image and with the service's real
settings (the ConfigMap's serve.yaml plus the Secret's credentials through the environment)."""

from __future__ import annotations

import os
import shutil
import subprocess

import kubernetes_validate
import pytest
import yaml

from dpbandit_testing.deploy_helpers import (
    DEPLOY,
    args_default,
    image_env,
    load_yaml,
    load_yaml_all,
    rule_groups,
)
from streaming_dpbandit.cli import build_parser
from streaming_dpbandit.commands.serve import build_service_settings

K8S = DEPLOY / "kubernetes"
KUBE_VERSION = "1.30.0"  # the oldest Kubernetes these manifests target


@pytest.fixture(scope="module")
def docs() -> dict[str, dict]:
    """kind → resource, from the files kustomization.yaml lists."""
    kust = load_yaml(K8S / "kustomization.yaml")
    out = {}
    for name in kust["resources"]:
        for doc in load_yaml_all(K8S / name):
            assert doc["kind"] not in out, f"two {doc['kind']} resources"
            out[doc["kind"]] = doc
    return out


def test_kustomization_lists_every_manifest():
    kust = load_yaml(K8S / "kustomization.yaml")
    assert kust["kind"] == "Kustomization" and kust["namespace"] == "dpbandit"
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files
    assert len(kust["resources"]) == len(set(kust["resources"]))


def test_required_resources_are_there(docs):
    assert set(docs) == {
        "Namespace",
        "ConfigMap",
        "Secret",
        "Service",
        "StatefulSet",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "PrometheusRule",
    }


@pytest.mark.parametrize(
    "kind", ["Namespace", "ConfigMap", "Secret", "Service", "StatefulSet", "PodDisruptionBudget"]
)
def test_builtin_resources_validate_against_the_kubernetes_schema(docs, kind):
    kubernetes_validate.validate(docs[kind], KUBE_VERSION, strict=True)


def test_the_schema_validation_is_not_vacuous(docs):
    bad = yaml.safe_load(yaml.safe_dump(docs["StatefulSet"]))
    bad["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "metrics"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)
    typo = yaml.safe_load(yaml.safe_dump(docs["StatefulSet"]))
    typo["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, KUBE_VERSION, strict=True)


def pod(docs) -> dict:
    return docs["StatefulSet"]["spec"]["template"]


def container(docs) -> dict:
    (c,) = pod(docs)["spec"]["containers"]
    return c


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_statefulset_is_a_secure_singleton_with_a_state_volume(docs):
    sts = docs["StatefulSet"]["spec"]
    assert sts["replicas"] == 1  # see the comment in statefulset.yaml and docs/operations.md
    assert matches(sts["selector"]["matchLabels"], pod(docs)["metadata"]["labels"])
    assert sts["serviceName"] == docs["Service"]["metadata"]["name"]
    assert docs["Service"]["spec"]["clusterIP"] == "None"  # the governing (headless) service
    spec = pod(docs)["spec"]
    sec = spec["securityContext"]
    assert sec["runAsNonRoot"] is True
    assert (
        sec["runAsUser"] == sec["runAsGroup"] == sec["fsGroup"] == int(args_default("DPBANDIT_UID"))
    )
    assert sec["seccompProfile"]["type"] == "RuntimeDefault"
    c = container(docs)
    csec = c["securityContext"]
    assert csec["allowPrivilegeEscalation"] is False and csec["capabilities"]["drop"] == ["ALL"]
    assert csec["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert "/tmp" in mounts  # the only other writable place
    assert spec["terminationGracePeriodSeconds"] >= 30  # the final snapshot on SIGTERM
    # snapshots: the image's snapshot directory lies on the claim template's volume
    state_dir = image_env()["DPBANDIT_SNAPSHOTS__DIRECTORY"]
    (claim,) = sts["volumeClaimTemplates"]
    mount = next(p for p, n in mounts.items() if n == claim["metadata"]["name"])
    assert state_dir.startswith(mount.rstrip("/") + "/")
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert sts["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    # the image is the one docker/ builds
    assert c["image"].split(":")[0] == "dpbandit"
    kust = load_yaml(K8S / "kustomization.yaml")
    assert [i["name"] for i in kust["images"]] == ["dpbandit"]


def test_ports_probes_service_and_monitoring_agree(docs):
    c = container(docs)
    (port,) = c["ports"]
    assert str(port["containerPort"]) == image_env()["DPBANDIT_METRICS__PORT"]
    paths = {"startupProbe": "/livez", "readinessProbe": "/readyz", "livenessProbe": "/livez"}
    for probe, path in paths.items():
        assert c[probe]["httpGet"] == {"path": path, "port": port["name"]}, probe
    svc = docs["Service"]
    # a pod that is not ready (broker away) is still scraped
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert matches(svc["spec"]["selector"], pod(docs)["metadata"]["labels"])
    (sport,) = svc["spec"]["ports"]
    assert sport["targetPort"] == port["name"]
    sm = docs["ServiceMonitor"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] == sport["name"] and ep["path"] == "/metrics"
    # the operator names the job after the Service: the alerts match job="dpbandit"
    assert "jobLabel" not in sm["spec"] and svc["metadata"]["name"] == "dpbandit"
    assert any(
        'up{job="dpbandit"}' in g_rule.get("expr", "")
        for g in rule_groups()
        for g_rule in g["rules"]
    )
    pdb = docs["PodDisruptionBudget"]
    assert matches(pdb["spec"]["selector"]["matchLabels"], pod(docs)["metadata"]["labels"])
    assert pdb["spec"]["minAvailable"] == 1


def test_prometheusrule_is_the_tested_rule_files(docs, prometheus_bin, tmp_path):
    rule = docs["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == rule_groups(), (
        "deploy/kubernetes/prometheusrule.yaml is out of date: "
        "run python3 scripts/sync-prometheusrule.py"
    )
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = subprocess.run(
        [str(prometheus_bin / "promtool"), "check", "rules", str(tmp_path / "rules.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_config_and_credentials_reach_the_service_settings(docs, tmp_path, monkeypatch):
    c = container(docs)
    cm = docs["ConfigMap"]
    config_vol = next(v for v in pod(docs)["spec"]["volumes"] if "configMap" in v)
    assert config_vol["configMap"]["name"] == cm["metadata"]["name"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == config_vol["name"])
    assert mount["readOnly"] is True
    args = c["args"]
    config_path = args[args.index("--config") + 1]
    assert config_path.startswith(mount["mountPath"] + "/")
    key = config_path[len(mount["mountPath"]) + 1 :]
    assert key in cm["data"]
    (tmp_path / key).write_text(cm["data"][key])

    secret = docs["Secret"]
    for k in list(os.environ):
        if k.startswith("DPBANDIT_"):
            monkeypatch.delenv(k)
    env = dict(image_env())
    env.pop("PATH")
    for e in c["env"]:
        ref = e["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        env[e["name"]] = secret["stringData"][ref["key"]]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    parsed = build_parser().parse_args(
        [a if a != config_path else str(tmp_path / key) for a in args]
    )
    settings, _, _ = build_service_settings(parsed)
    k = settings.kafka
    assert k is not None and k.security_protocol == "SASL_SSL"
    assert k.sasl_username == secret["stringData"]["username"]
    assert k.sasl_password.get_secret_value() == secret["stringData"]["password"]
    assert k.create_topics is False and k.replication_factor >= 3
    assert settings.metrics.host == "0.0.0.0" and settings.metrics.port == 9464
    assert all(b.epsilon_budget for b in settings.bandits.values())
    assert "sasl_password" not in cm["data"][key]  # credentials only in the Secret


KUSTOMIZE = (
    ["kubectl", "kustomize"]
    if shutil.which("kubectl")
    else ["kustomize", "build"]
    if shutil.which("kustomize")
    else None
)


@pytest.mark.skipif(KUSTOMIZE is None, reason="needs kubectl (or kustomize) to build -k")
def test_kustomize_builds_what_kubectl_apply_k_would_apply(docs, tmp_path):
    """``kubectl apply -k deploy/kubernetes`` applies this build: it must succeed, put every
    namespaced resource into the namespace, set the image, and leave resources that still
    validate strictly."""
    out = subprocess.run(
        [*KUSTOMIZE, str(K8S)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    built = {d["kind"]: d for d in yaml.safe_load_all(out.stdout) if d}
    assert set(built) == set(docs)
    for kind, doc in built.items():
        if kind != "Namespace":
            assert doc["metadata"]["namespace"] == "dpbandit", kind
    (c,) = built["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    kust = load_yaml(K8S / "kustomization.yaml")
    (img,) = kust["images"]
    assert c["image"] == f"{img['name']}:{img['newTag']}"
    for kind in ("ConfigMap", "Secret", "Service", "StatefulSet", "PodDisruptionBudget"):
        kubernetes_validate.validate(built[kind], KUBE_VERSION, strict=True)
    # the build is not vacuous: a kustomization naming a missing file fails
    broken = tmp_path / "k"
    shutil.copytree(K8S, broken)
    (broken / "service.yaml").unlink()
    bad = subprocess.run([*KUSTOMIZE, str(broken)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "service.yaml" in bad.stderr
