"""The Helm chart (deploy/helm/lagwatch): helm lint; helm template with default, minimal and full values, validated
against the Kubernetes API schemas (kubernetes-validate, strict); the config it renders accepted by `lagwatch
validate` with secrets from the mounted files only; values.schema.json refusing wrong values at install time;
the PrometheusRule through promtool (check and unit tests of every alert); the dashboards generated from code."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from lagwatch.cli import _parser
from lagwatch.serve.app import openapi_document
from tests.helm_tool import CHART, ROOT, helm_binary, template

HELM = helm_binary()
pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not built (make test builds it: deploy/tools/install-helm.sh)"
)
VALUES = {
    "default": [],
    "minimal": ["-f", str(CHART / "ci" / "minimal-values.yaml")],
    "full": ["-f", str(CHART / "ci" / "full-values.yaml")],
}
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest kubernetes-validate knows.
K8S_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())
CRDS = {"ServiceMonitor", "PrometheusRule"}  # Prometheus Operator's: checked below, not by Kubernetes' schemas


def render(name: str, *extra: str) -> list[dict]:
    assert HELM is not None
    return template(HELM, *VALUES[name], *extra)


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("values", VALUES)
def test_helm_lint_strict(values: str) -> None:
    assert HELM is not None
    result = subprocess.run(
        [HELM, "lint", "--strict", str(CHART), *VALUES[values]], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("values", VALUES)
def test_rendered_manifests_match_the_kubernetes_schemas(values: str) -> None:
    docs = render(values)
    checked = 0
    for doc in docs:
        if doc["kind"] in CRDS:
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises on any unknown or wrong field
        checked += 1
    assert checked >= 5


def test_default_install_is_one_locked_down_pod_with_state() -> None:
    docs = render("default")
    assert sorted(d["kind"] for d in docs) == [
        "ConfigMap",
        "Deployment",
        "PersistentVolumeClaim",
        "Service",
        "ServiceAccount",
    ]
    (deployment,) = by_kind(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    paths = set(openapi_document()["paths"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz" in paths
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" in paths
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    assert container["resources"]["requests"]["memory"] and container["resources"]["limits"]["memory"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (pvc,) = by_kind(docs, "PersistentVolumeClaim")
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (config_map,) = by_kind(docs, "ConfigMap")
    config = yaml.safe_load(config_map["data"]["lagwatch.yaml"])
    assert config["state_dir"] == mounts["state"] and config["http"]["port"] == container["ports"][0]["containerPort"]
    (service,) = by_kind(docs, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    # The config's checksum rolls the pod when the config changes.
    assert config["clusters"] == {"kafka": {"bootstrap_servers": ["kafka:9092"]}}  # the placeholder of a bare install
    (minimal_cm,) = by_kind(render("minimal"), "ConfigMap")
    assert list(yaml.safe_load(minimal_cm["data"]["lagwatch.yaml"])["clusters"]) == ["prod"]  # replaced, not merged
    changed = render("default", "--set", "config.log_level=DEBUG")
    (changed_deployment,) = by_kind(changed, "Deployment")
    annotation = "checksum/config"
    assert (
        changed_deployment["spec"]["template"]["metadata"]["annotations"][annotation]
        != deployment["spec"]["template"]["metadata"]["annotations"][annotation]
    )
    # Without persistence: an emptyDir, and no claim.
    ephemeral = render("default", "--set", "persistence.enabled=false")
    assert not by_kind(ephemeral, "PersistentVolumeClaim")
    (eph,) = by_kind(ephemeral, "Deployment")
    assert {v["name"]: v for v in eph["spec"]["template"]["spec"]["volumes"]}["state"] == {
        "name": "state",
        "emptyDir": {},
    }


@pytest.mark.parametrize("values", ["default", "minimal", "full"])
def test_no_secret_in_env_args_or_configmap(values: str) -> None:
    docs = render(values)
    pods = [d["spec"]["template"]["spec"] for d in by_kind(docs, "Deployment")]
    pods += [d["spec"]["jobTemplate"]["spec"]["template"]["spec"] for d in by_kind(docs, "CronJob")]
    assert pods
    for pod in pods:
        for container in pod["containers"]:
            argv = " ".join(container.get("args", [])).lower()
            assert "password" not in argv and "token" not in argv
            assert all("valueFrom" not in e for e in container.get("env", []))
            env = {e["name"]: e["value"] for e in container["env"]}
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            assert env["LAGWATCH_SECRETS_DIR"] == mounts["secrets"]
        assert {v["name"]: v for v in pod["volumes"]}["secrets"]["projected"]["defaultMode"] == 0o400
    assert not by_kind(docs, "Secret")
    for cm in by_kind(docs, "ConfigMap"):
        text = json.dumps(cm["data"]).lower()
        assert "password:" not in text and "token:" not in text and "xoxb-" not in text


def _secret_files(docs: list[dict], whole_secrets: dict[str, list[str]], tmp: Path) -> Path:
    """The secrets directory as the kubelet would project it from the Deployment's volume (dummy values)."""
    (deployment,) = by_kind(docs, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    secrets = tmp / "secrets"
    secrets.mkdir()
    for source in volumes["secrets"]["projected"]["sources"]:
        secret = source["secret"]
        paths = [i["path"] for i in secret.get("items", [])] or whole_secrets.get(secret["name"], [])
        for path in paths:
            (secrets / path).write_text(f"dummy-{path}")
    return secrets


def _validate(config_text: str, secrets: Path | None, tmp: Path) -> subprocess.CompletedProcess[str]:
    config = tmp / "lagwatch.yaml"
    config.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAGWATCH_")}
    if secrets is not None:
        env["LAGWATCH_SECRETS_DIR"] = str(secrets)
    lagwatch = Path(sys.executable).parent / "lagwatch"
    return subprocess.run(
        [str(lagwatch), "validate", "--config", str(config)], capture_output=True, text=True, env=env, timeout=60
    )


# The keys README tells users to put into the one Secret of the minimal install.
MINIMAL_SECRET_KEYS = ["clusters__prod__security__sasl__password", "notifiers__slack__token"]


@pytest.mark.parametrize("values", ["default", "minimal", "full"])
def test_rendered_config_passes_lagwatch_validate_with_the_mounted_secrets(values: str, tmp_path: Path) -> None:
    docs = render(values)
    (config_map,) = [c for c in by_kind(docs, "ConfigMap") if "lagwatch.yaml" in c["data"]]
    text = config_map["data"]["lagwatch.yaml"]
    # TLS files come from tlsSecrets, mounted at /etc/lagwatch/tls/<name>/: give them a local home.
    (deployment,) = by_kind(docs, "Deployment")
    for mount in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]:
        if mount["mountPath"].startswith("/etc/lagwatch/tls/"):
            local = tmp_path / mount["mountPath"].lstrip("/")
            local.mkdir(parents=True)
            (local / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
            text = text.replace(mount["mountPath"], str(local))
    secrets = _secret_files(docs, {"lagwatch-secrets": MINIMAL_SECRET_KEYS}, tmp_path)
    result = _validate(text, secrets, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout
    if values != "default":
        # The password is in the mounted files and nowhere else: without them lagwatch names the field.
        missing = _validate(text, None, tmp_path)
        assert missing.returncode == 2 and "sasl" in missing.stderr and "password" in missing.stderr, missing.stderr


BAD_VALUES = [
    (["--set", "replicaCount=2"], "/replicaCount"),
    (["--set", "config.notifiers.slack.token=xoxb-1", "--set", "config.notifiers.slack.default_channel=#a"], "token"),
    (
        [
            "--set",
            "config.clusters.prod.bootstrap_servers[0]=k:9092",
            "--set",
            "config.clusters.prod.security.sasl.password=hunter2",
        ],
        "password",
    ),
    (
        [
            "--set",
            "config.clusters.kafka.bootstrap_servers[0]=k:9092",
            "--set",
            "config.clusters.kafka.poll_intervall_s=5",
        ],
        "poll_intervall_s",
    ),
    (
        [
            "--set",
            "config.clusters.kafka.bootstrap_servers[0]=k:9092",
            "--set",
            "config.clusters.kafka.poll_interval_s=0",
        ],
        "poll_interval_s",
    ),
    (
        [
            "--set",
            "config.clusters.kafka.bootstrap_servers[0]=k:9092",
            "--set",
            "config.clusters.kafka.security.protocol=SASL",
        ],
        "protocol",
    ),
    (["--set", "config.log_level=LOUD"], "log_level"),
    (["--set", "pipeline.report.enabled=true", "--set", "pipeline.report.schedule=daily"], "schedule"),
    (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
    (["--set", "extraEnv[0].name=LAGWATCH_NOTIFIERS__SLACK__TOKEN", "--set", "extraEnv[0].value=x"], "extraEnv"),
    (["--set", "networkPolicy.kafka[0].cidr=kafka", "--set", "networkPolicy.kafka[0].ports[0]=9092"], "cidr"),
    (["--set", "persistence.size=lots"], "size"),
    (["--set", "serviceMonitor.interval=30"], "interval"),
    (["--set", "persistence.enable=true"], "enable"),
    # A pipeline CronJob without the lake exited 2 every night ("--lake lake: no such directory").
    (["--set", "pipeline.compact.enabled=true"], "/lake/url"),
    (["--set", "pipeline.report.enabled=true", "--set", "lake.url="], "/lake/url"),
    (["--set", "pipeline.lake=s3a://lake/lagwatch"], "'lake' not allowed"),  # moved to lake.url
    (["--set", "lake.url=/var/lib/lagwatch/lake"], "/lake/url"),  # the daemon's volume: no CronJob reaches it
]


@pytest.mark.parametrize(("args", "names"), BAD_VALUES, ids=[b[1] for b in BAD_VALUES])
def test_values_schema_refuses_wrong_values_at_install(args: list[str], names: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render("default", *args)
    assert "values don't meet the specifications of the schema" in refused.value.stderr
    assert names in refused.value.stderr, refused.value.stderr


def test_values_schema_is_generated_from_lagwatch_settings() -> None:
    gen = _load("gen_chart_schema", ROOT / "deploy" / "tools" / "gen_chart_schema.py")
    assert (CHART / "values.schema.json").read_text() == gen.render(), "run python deploy/tools/gen_chart_schema.py"


def test_full_values_render_every_optional_part() -> None:
    docs = render("full")
    kinds = sorted(d["kind"] for d in docs)
    for kind in ("ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "NetworkPolicy", "CronJob"):
        assert kind in kinds
    (monitor,) = by_kind(docs, "ServiceMonitor")
    (service,) = by_kind(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The Spark jobs: their own image and service account, the lagwatch pipeline commands.
    jobs = {j["metadata"]["name"]: j for j in by_kind(docs, "CronJob")}
    (deployment,) = by_kind(docs, "Deployment")
    for name, command in (("lagwatch-report", "report"), ("lagwatch-compact", "compact")):
        pod = jobs[name]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"][:2] == ["pipeline", command] and "s3a://lake/lagwatch" in container["args"]
        assert container["image"] == "registry.example/lagwatch-spark:0.1.0"
        assert (
            pod["serviceAccountName"]
            == "lagwatch-pipeline"
            != deployment["spec"]["template"]["spec"]["serviceAccountName"]
        )
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        parsed = _parser().parse_args(container["args"])  # the command line lagwatch itself would accept
        assert parsed.lake == "s3a://lake/lagwatch" and str(parsed.config) == "/etc/lagwatch/lagwatch.yaml"
        if command == "report":
            assert parsed.last_days == 1  # yesterday, each day
    assert by_kind(render("default"), "CronJob") == []  # off by default
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].startswith(
        "registry.example/lagwatch@sha256:"
    )
    # Egress: DNS, the brokers' CIDR and ports, Slack over HTTPS (not to private ranges), and the extra rule.
    (policy,) = by_kind(docs, "NetworkPolicy")
    egress = policy["spec"]["egress"]
    assert {p["port"] for p in egress[0]["ports"]} == {53}
    assert egress[1] == {"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}], "ports": [{"port": 9093, "protocol": "TCP"}]}
    assert egress[2]["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert "10.0.0.0/8" in egress[2]["to"][0]["ipBlock"]["except"]
    assert len(egress) == 4 and policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    # Dashboards for the Grafana sidecar: the generated JSON, byte for byte.
    (dashboards,) = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    for name, text in dashboards["data"].items():
        assert text == (ROOT / "grafana" / "dashboards" / name).read_text().rstrip("\n")
    assert len(dashboards["data"]) == 2


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian's prometheus package)")
def test_prometheus_rule_passes_promtool_check_and_unit_tests(tmp_path: Path) -> None:
    (rule,) = by_kind(render("default", "--set", "prometheusRule.enabled=true"), "PrometheusRule")
    (tmp_path / "lagwatch-rules.yaml").write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    shutil.copy(CHART / "tests" / "prometheusrule_test.yaml", tmp_path)
    check = subprocess.run(
        ["promtool", "check", "rules", "lagwatch-rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 10 rules found" in check.stdout
    unit = subprocess.run(
        ["promtool", "test", "rules", "prometheusrule_test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    spec = yaml.safe_load((tmp_path / "prometheusrule_test.yaml").read_text())
    tested = {t["alertname"] for test in spec["tests"] for t in test["alert_rule_test"] if t.get("exp_alerts")}
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert tested == alerts, "every alert has a unit test where it fires"


def test_dashboards_are_the_generated_ones() -> None:
    gen = _load("grafana_dashboards", ROOT / "grafana" / "dashboards.py")
    for path, text in gen.generated().items():
        assert path.read_text() == text, f"{path} is stale: run python grafana/dashboards.py"
    for name in gen.DASHBOARDS:
        dashboard = json.loads((ROOT / "grafana" / "dashboards" / name).read_text())
        names = [v["name"] for v in dashboard["templating"]["list"]]
        assert names == ["datasource", "cluster", "group", "topic"]
